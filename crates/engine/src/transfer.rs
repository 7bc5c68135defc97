//! The stream a partition moves in between nodes (docs/cluster.md, "Moving a partition"), byte
//! by byte: every record with its id and counter (so the new owner keeps its versions), the
//! partition's `next_id` and its epoch. A stream is the whole partition (the copy) or the records
//! changed since the last stream, where counter 0 says an id's record is gone.
//!
//! ```text
//! magic   "SHLTMV3\n"                                                  8 bytes
//! next_id u64, live u64 (the partition's records at the stream's moment), epoch u64
//! record  id u32 (never 0), counter u64, key length u32, value length u32, key, value
//!         (counter 0, lengths 0: the record of this id is deleted)
//! ...
//! end     id 0 u32, entries u64, crc32c u32 of every byte before it     (little-endian)
//! ```
//!
//! A stream cut short has no end; a damaged one fails its checksum: [`Decoder::finish`] refuses both.

use crate::{Error, Result};

/// The stream's first 8 bytes.
pub const MAGIC: &[u8; 8] = b"SHLTMV3\n";
/// Bytes before the first record: the magic, `next_id`, `live` and the epoch.
const START: usize = MAGIC.len() + 24;
/// Bytes of a record's header: id u32, counter u64, key length u32, value length u32.
const HEADER: usize = 20;
/// Bytes of the end after its id 0: the record count u64 and the crc32c u32.
const END: usize = 12;

/// One record of a moving partition, or (counter 0) the deletion of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// Its id in the partition.
    pub id: u32,
    /// Its update counter; 0: the record of `id` is deleted (key and value empty).
    pub counter: u64,
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
}

/// Writes a stream: [`Encoder::start`], a [`Encoder::record`] per record, [`Encoder::end`].
#[derive(Debug, Default)]
pub struct Encoder {
    crc: u32,
    records: u64,
}

impl Encoder {
    /// Appends the stream's start, for a partition whose next id is `next_id`, which holds
    /// `live` records and whose versions carry `epoch` (0: none to keep).
    pub fn start(&mut self, out: &mut Vec<u8>, next_id: u64, live: u64, epoch: u64) {
        let from = out.len();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&next_id.to_le_bytes());
        out.extend_from_slice(&live.to_le_bytes());
        out.extend_from_slice(&epoch.to_le_bytes());
        self.sum(&out[from..]);
    }

    /// Appends one record.
    pub fn record(&mut self, out: &mut Vec<u8>, id: u32, counter: u64, key: &[u8], value: &[u8]) {
        let from = out.len();
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&counter.to_le_bytes());
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(value);
        self.sum(&out[from..]);
        self.records += 1;
    }

    /// Appends the deletion of the record of `id`.
    pub fn deleted(&mut self, out: &mut Vec<u8>, id: u32) {
        self.record(out, id, 0, &[], &[]);
    }

    /// Entries appended so far.
    pub fn entries(&self) -> u64 {
        self.records
    }

    /// Appends the end.
    pub fn end(mut self, out: &mut Vec<u8>) {
        let from = out.len();
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.records.to_le_bytes());
        self.sum(&out[from..]);
        out.extend_from_slice(&self.crc.to_le_bytes());
    }

    fn sum(&mut self, bytes: &[u8]) {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
    }
}

/// What a whole stream said of its partition ([`Decoder::finish`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The partition's next id.
    pub next_id: u64,
    /// Its records at the stream's moment.
    pub live: u64,
    /// The epoch its versions carry (0: the new owner gives it a new one).
    pub epoch: u64,
    /// The stream's entries (records and deletions).
    pub entries: u64,
}

/// Reads a stream that arrives in pieces of any size.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    crc: u32,
    /// `next_id`, `live` and the epoch, once the start is read.
    start: Option<(u64, u64, u64)>,
    records: u64,
    ended: Option<[u8; END]>,
}

impl Decoder {
    /// Takes the next piece of the stream; the records it completed.
    pub fn push(&mut self, piece: &[u8]) -> Result<Vec<Moved>> {
        self.buf.extend_from_slice(piece);
        let mut at = 0;
        let mut out = Vec::new();
        if self.start.is_none() {
            if self.buf.len() < START {
                return Ok(out);
            }
            if &self.buf[..MAGIC.len()] != MAGIC {
                return Err(damaged("it does not start as a partition transfer of this version"));
            }
            let field = |n: usize| u64_at(&self.buf, MAGIC.len() + 8 * n);
            self.start = Some((field(0), field(1), field(2)));
            at = START;
        }
        while self.ended.is_none() && self.buf.len() - at >= 4 {
            let id = u32_at(&self.buf, at);
            if id == 0 {
                if self.buf.len() - at < 4 + END {
                    break;
                }
                let end = &self.buf[at + 4..at + 4 + END];
                self.ended = Some(end.try_into().expect("END bytes"));
                // The crc covers the end's id and count, not itself.
                at += 4 + END - 4;
                break;
            }
            if self.buf.len() - at < HEADER {
                break;
            }
            let (keys, values) = (u32_at(&self.buf, at + 12) as usize, u32_at(&self.buf, at + 16) as usize);
            let len = HEADER + keys + values;
            if self.buf.len() - at < len {
                break;
            }
            let body = &self.buf[at + HEADER..at + len];
            out.push(Moved {
                id,
                counter: u64_at(&self.buf, at + 4),
                key: body[..keys].to_vec(),
                value: body[keys..].to_vec(),
            });
            self.records += 1;
            at += len;
        }
        self.crc = crc32c::crc32c_append(self.crc, &self.buf[..at]);
        self.buf.drain(..at);
        Ok(out)
    }

    /// The stream is over: what it said, once its end and checksum are found whole and right.
    pub fn finish(self) -> Result<Received> {
        let (Some((next_id, live, epoch)), Some(end)) = (self.start, self.ended) else {
            return Err(damaged("it ended before its end marker (cut short)"));
        };
        let records = u64_at(&end, 0);
        let crc = u32_at(&end, 8);
        if crc != self.crc || records != self.records || self.buf.len() != 4 {
            return Err(damaged(&format!(
                "{} records and crc32c {:08x} received, the stream says {records} and {crc:08x}",
                self.records, self.crc
            )));
        }
        Ok(Received { next_id, live, epoch, entries: records })
    }
}

fn damaged(why: &str) -> Error {
    Error::Move(format!("the partition transfer is damaged: {why}"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream() -> Vec<u8> {
        let (mut out, mut enc) = (Vec::new(), Encoder::default());
        enc.start(&mut out, 42, 2, 77);
        enc.record(&mut out, 3, 7, b"key", b"value");
        enc.record(&mut out, 9, 1, b"k2", b"");
        enc.deleted(&mut out, 5);
        enc.end(&mut out);
        out
    }

    #[test]
    fn a_stream_read_in_pieces_of_any_size_gives_its_records() {
        let bytes = stream();
        for size in [1, 2, 5, 19, bytes.len()] {
            let mut dec = Decoder::default();
            let records: Vec<Moved> = bytes.chunks(size).flat_map(|c| dec.push(c).unwrap()).collect();
            assert_eq!(records.len(), 3);
            assert_eq!(records[0], Moved { id: 3, counter: 7, key: b"key".to_vec(), value: b"value".to_vec() });
            assert_eq!(records[2], Moved { id: 5, counter: 0, key: Vec::new(), value: Vec::new() });
            assert_eq!(dec.finish().unwrap(), Received { next_id: 42, live: 2, epoch: 77, entries: 3 });
        }
    }

    #[test]
    fn a_cut_or_damaged_stream_is_refused() {
        let bytes = stream();
        let mut cut = Decoder::default();
        cut.push(&bytes[..bytes.len() - 1]).unwrap();
        assert!(cut.finish().unwrap_err().to_string().contains("damaged"));
        let mut flipped = bytes.clone();
        flipped[START + HEADER] ^= 1;
        let mut dec = Decoder::default();
        dec.push(&flipped).unwrap();
        assert!(dec.finish().unwrap_err().to_string().contains("crc32c"));
        assert!(Decoder::default().push(b"not a partition transfer stream at all").is_err());
    }
}
