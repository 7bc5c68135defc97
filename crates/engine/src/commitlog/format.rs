//! The commit log's bytes: segment headers and records, written and read. Little-endian.
//!
//! A segment file is a header ([`SegmentHeader`]) and records back to back ([`Record`]). A record
//! at file offset `o` has the LSN `base + o - 4096`; LSNs grow across segments without gaps or
//! reuse, so a record's LSN names it for the whole life of the directory. Where reading stops:
//! [`read_records`].

use crate::{Error, Result};

/// Magic bytes at the start of every segment.
pub const MAGIC: &[u8; 8] = b"SHLTLOG\0";
/// Format version of segments and records.
pub const VERSION: u32 = 1;
/// Bytes before a segment's first record.
pub const HEADER: u64 = 4096;
/// Bytes of a record's header (length, checksum, LSN).
pub const RECORD_HEADER: usize = 16;

const KIND_TX: u8 = 1;
const KIND_CANCEL: u8 = 2;
const INSERT: u8 = 1;
const UPDATE: u8 = 2;
const DELETE: u8 = 3;

/// A segment's header fields.
///
/// A segment file (`commit-NNNNNNNNNNNNNNNN.log`, the number is the segment's sequence):
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 8 | magic `SHLTLOG\0` |
/// | 8 | 4 | format version (1) |
/// | 12 | 4 | header size: 4096 |
/// | 16 | 8 | sequence number of the segment |
/// | 24 | 8 | base LSN: the log position of the segment's first record byte |
/// | 32 | 4 | crc32c of bytes 0..32 |
/// | 36 | 4060 | zero |
/// | 4096 | … | records, back to back, then zeros (the file is preallocated) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The segment's sequence number (its file name).
    pub seq: u64,
    /// The LSN of its first record byte.
    pub base: u64,
}

impl SegmentHeader {
    /// The header's 4096 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER as usize);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(HEADER as u32).to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.base.to_le_bytes());
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.resize(HEADER as usize, 0);
        out
    }

    /// Parses and checks a header; `what` names the file in errors.
    pub fn decode(bytes: &[u8], what: &std::path::Path) -> Result<Self> {
        let corrupt = |why: &str| Error::Corrupt { path: what.to_owned(), what: why.to_owned() };
        if bytes.len() < 36 || &bytes[..8] != MAGIC {
            return Err(corrupt("not a commit log segment (bad magic)"));
        }
        if crc32c::crc32c(&bytes[..32]) != u32_at(bytes, 32) {
            return Err(corrupt("segment header checksum mismatch"));
        }
        let version = u32_at(bytes, 8);
        if version > VERSION {
            return Err(corrupt(&format!("segment format {version} is newer than this build ({VERSION})")));
        }
        if u64::from(u32_at(bytes, 12)) != HEADER {
            return Err(corrupt("unexpected segment header size"));
        }
        Ok(Self { seq: u64_at(bytes, 16), base: u64_at(bytes, 24) })
    }
}

/// A transaction record's body being built by a writer, effect by effect.
#[derive(Debug, Default)]
pub struct TxBuilder {
    effects: u32,
    bytes: Vec<u8>,
}

impl TxBuilder {
    /// Whether no effect was added.
    pub fn is_empty(&self) -> bool {
        self.effects == 0
    }

    /// Logs the insert of record `id`.
    pub fn insert(&mut self, id: u32, counter: u64, key: &[u8], value: &[u8]) {
        self.effect(INSERT, id);
        self.bytes.extend_from_slice(&counter.to_le_bytes());
        put_bytes(&mut self.bytes, key);
        put_bytes(&mut self.bytes, value);
    }

    /// Logs an update of record `id`.
    pub fn update(&mut self, id: u32, counter: u64, value: &[u8]) {
        self.effect(UPDATE, id);
        self.bytes.extend_from_slice(&counter.to_le_bytes());
        put_bytes(&mut self.bytes, value);
    }

    /// Logs the deletion of record `id`.
    pub fn delete(&mut self, id: u32) {
        self.effect(DELETE, id);
    }

    fn effect(&mut self, kind: u8, id: u32) {
        self.effects += 1;
        self.bytes.push(kind);
        self.bytes.extend_from_slice(&id.to_le_bytes());
    }

    /// The record's body: the transaction of `partition` leaving it at `next_id` and `records`.
    pub fn finish(self, partition: u32, next_id: u64, records: u64) -> Body {
        let mut body = Vec::with_capacity(1 + 24 + self.bytes.len());
        body.push(KIND_TX);
        body.extend_from_slice(&partition.to_le_bytes());
        body.extend_from_slice(&next_id.to_le_bytes());
        body.extend_from_slice(&records.to_le_bytes());
        body.extend_from_slice(&self.effects.to_le_bytes());
        body.extend_from_slice(&self.bytes);
        Body::new(body)
    }
}

/// A record's body and its checksum, ready to be given an LSN.
#[derive(Debug)]
pub struct Body {
    bytes: Vec<u8>,
    crc: u32,
}

impl Body {
    fn new(bytes: Vec<u8>) -> Self {
        let crc = crc32c::crc32c(&bytes);
        Self { bytes, crc }
    }

    /// The body of a record cancelling the transaction record at `lsn` of `partition`.
    pub fn cancel(partition: u32, lsn: u64) -> Self {
        let mut body = vec![KIND_CANCEL];
        body.extend_from_slice(&partition.to_le_bytes());
        body.extend_from_slice(&lsn.to_le_bytes());
        Self::new(body)
    }

    /// Bytes of the whole record.
    pub fn record_len(&self) -> usize {
        RECORD_HEADER + self.bytes.len()
    }

    /// The record as read back from the log at `lsn`.
    pub fn decode_at(&self, lsn: u64) -> Option<Record> {
        decode_body(&self.bytes, lsn, self.record_len())
    }

    /// Appends the whole record, at log position `lsn`, to `out`. The record's length must fit
    /// a u32 (the caller checks [`Body::record_len`]).
    pub fn write_at(&self, lsn: u64, out: &mut Vec<u8>) {
        let len = u32::try_from(self.record_len()).expect("records are checked to fit a u32");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c_append(self.crc, &lsn.to_le_bytes()).to_le_bytes());
        out.extend_from_slice(&lsn.to_le_bytes());
        out.extend_from_slice(&self.bytes);
    }
}

/// One effect of a logged transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// A new record.
    Insert {
        /// Its id.
        id: u32,
        /// Its counter.
        counter: u64,
        /// Its key.
        key: Vec<u8>,
        /// Its value.
        value: Vec<u8>,
    },
    /// A record's new value and counter.
    Update {
        /// Its id.
        id: u32,
        /// The new counter.
        counter: u64,
        /// The new value.
        value: Vec<u8>,
    },
    /// A deleted record.
    Delete {
        /// Its id.
        id: u32,
    },
}

/// A record read back.
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 4 | length of the whole record, this header included (≥ 17) |
/// | 4 | 4 | crc32c of the body (bytes 16..length), then of the LSN's 8 bytes |
/// | 8 | 8 | LSN: the record's own position |
/// | 16 | 1 | kind: 1 transaction, 2 cancel |
/// | 17 | … | the kind's body |
///
/// Transaction body: partition (u32), `next_id` after it (u64), live records after it (u64),
/// effect count (u32), then each effect: kind (u8: 1 insert, 2 update, 3 delete), record id
/// (u32), and for an insert the counter (u64), key length (u32), key, value length (u32), value;
/// for an update the counter (u64), value length (u32), value; for a delete nothing more.
///
/// Cancel body: partition (u32), LSN of the transaction record it cancels (u64): that
/// transaction was logged but SQLite failed to commit it, and its writers were told so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A transaction of one partition.
    Tx(LoggedTx),
    /// The transaction at `lsn` of `partition` did not commit.
    Cancel {
        /// Its partition.
        partition: u32,
        /// The cancelled transaction's LSN.
        lsn: u64,
    },
}

/// A transaction as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedTx {
    /// Its position in the log.
    pub lsn: u64,
    /// The position just past it: what a partition has applied once it holds this transaction.
    pub end: u64,
    /// Its partition.
    pub partition: u32,
    /// The partition's `next_id` after it.
    pub next_id: u64,
    /// The partition's live records after it.
    pub records: u64,
    /// What it did, in order.
    pub effects: Vec<Effect>,
}

/// Reads the records of a segment's data (the bytes after its header), whose first byte is at
/// `base`. Returns the records and the LSN just past the last valid one.
///
/// Reading stops at the first record that is not whole and valid: a length of 0 or running past
/// the data, a checksum mismatch, or an LSN that is not its position (a leftover of older
/// bytes). Bytes after that point were never made durable by a completed flush.
pub fn read_records(data: &[u8], base: u64) -> (Vec<Record>, u64) {
    let mut records = Vec::new();
    let mut at = 0usize;
    while let Some((record, len)) = read_record(&data[at..], base + at as u64) {
        records.push(record);
        at += len;
    }
    (records, base + at as u64)
}

/// The record at the start of `data` if it is whole, valid and at `lsn`; with its length.
fn read_record(data: &[u8], lsn: u64) -> Option<(Record, usize)> {
    let raw = raw_record(data, lsn)?;
    Some((raw.decode()?, raw.record_len()))
}

/// The record at the start of `data`, checked but not decoded, if it is whole, valid and at `lsn`.
fn raw_record(data: &[u8], lsn: u64) -> Option<Raw<'_>> {
    if data.len() < RECORD_HEADER + 1 {
        return None;
    }
    let len = u32_at(data, 0) as usize;
    if len <= RECORD_HEADER || len > data.len() || u64_at(data, 8) != lsn {
        return None;
    }
    let body = &data[RECORD_HEADER..len];
    if crc32c::crc32c_append(crc32c::crc32c(body), &lsn.to_le_bytes()) != u32_at(data, 4) {
        return None;
    }
    Some(Raw { lsn, body })
}

/// The valid records at the start of `data`, whose first byte is at `base`, checked but not
/// decoded; reading stops as [`read_records`] does.
pub fn raw_records(data: &[u8], base: u64) -> impl Iterator<Item = Raw<'_>> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let raw = raw_record(&data[at..], base + at as u64)?;
        at += raw.record_len();
        Some(raw)
    })
}

/// A record's body as the log holds it (its checksum checked), at its LSN.
#[derive(Debug, Clone, Copy)]
pub struct Raw<'a> {
    /// The record's LSN.
    pub lsn: u64,
    /// Its body: the kind byte, then the kind's fields.
    pub body: &'a [u8],
}

impl Raw<'_> {
    /// Bytes of the whole record.
    pub fn record_len(&self) -> usize {
        RECORD_HEADER + self.body.len()
    }

    /// Whether it is a transaction (not a cancel).
    pub fn is_tx(&self) -> bool {
        self.body[0] == KIND_TX
    }

    /// The partition it concerns (a transaction's or a cancel's); `None` if the body is too short.
    pub fn partition(&self) -> Option<u32> {
        (self.body.len() >= 5).then(|| u32_at(self.body, 1))
    }

    /// The same body, to be appended to another log.
    pub fn to_body(&self) -> Body {
        Body::new(self.body.to_vec())
    }

    /// The record decoded; `None` if its body does not parse.
    pub fn decode(&self) -> Option<Record> {
        decode_body(self.body, self.lsn, self.record_len())
    }
}

/// A record's body decoded, the record being `len` bytes at `lsn`.
fn decode_body(body: &[u8], lsn: u64, len: usize) -> Option<Record> {
    let mut r = Reader { bytes: body, at: 1 };
    let record = match body[0] {
        KIND_TX => {
            let (partition, next_id, records, count) = (r.u32()?, r.u64()?, r.u64()?, r.u32()?);
            let effects = (0..count).map(|_| r.effect()).collect::<Option<Vec<_>>>()?;
            Record::Tx(LoggedTx { lsn, end: lsn + len as u64, partition, next_id, records, effects })
        }
        KIND_CANCEL => Record::Cancel { partition: r.u32()?, lsn: r.u64()? },
        _ => return None,
    };
    (r.at == body.len()).then_some(record)
}

/// A cursor over a record's body; `None` past its end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.bytes.len())?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Some(out)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32_at(self.take(4)?, 0))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64_at(self.take(8)?, 0))
    }

    fn bytes(&mut self) -> Option<Vec<u8>> {
        let len = self.u32()? as usize;
        Some(self.take(len)?.to_vec())
    }

    fn effect(&mut self) -> Option<Effect> {
        let (kind, id) = (self.u8()?, self.u32()?);
        match kind {
            INSERT => Some(Effect::Insert { id, counter: self.u64()?, key: self.bytes()?, value: self.bytes()? }),
            UPDATE => Some(Effect::Update { id, counter: self.u64()?, value: self.bytes()? }),
            DELETE => Some(Effect::Delete { id }),
            _ => None,
        }
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Keys are at most 1 KiB and values at most 64 MiB: their lengths fit a u32.
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx() -> TxBuilder {
        let mut tx = TxBuilder::default();
        tx.insert(7, 1, b"key", b"value");
        tx.update(3, 4, b"");
        tx.delete(2);
        tx
    }

    fn sample() -> Vec<u8> {
        let mut data = Vec::new();
        let first = tx().finish(5, 8, 41);
        first.write_at(1000, &mut data);
        Body::cancel(5, 1000).write_at(1000 + data.len() as u64, &mut data);
        data
    }

    #[test]
    fn records_round_trip_and_reading_stops_at_the_first_bad_one() {
        let mut data = sample();
        let valid_end = 1000 + data.len() as u64;
        let first_end = 1000 + tx().finish(5, 8, 41).record_len() as u64;
        data.extend_from_slice(&[0u8; 64]);
        let (records, end) = read_records(&data, 1000);
        assert_eq!(end, valid_end);
        let effects = vec![
            Effect::Insert { id: 7, counter: 1, key: b"key".to_vec(), value: b"value".to_vec() },
            Effect::Update { id: 3, counter: 4, value: Vec::new() },
            Effect::Delete { id: 2 },
        ];
        assert_eq!(
            records,
            vec![
                Record::Tx(LoggedTx { lsn: 1000, end: first_end, partition: 5, next_id: 8, records: 41, effects }),
                Record::Cancel { partition: 5, lsn: 1000 },
            ]
        );
    }

    #[test]
    fn a_torn_flipped_or_misplaced_record_ends_the_log() {
        let data = sample();
        let whole = read_records(&data, 1000).0.len();
        for cut in 1..data.len() {
            let (records, _) = read_records(&data[..cut], 1000);
            assert!(records.len() < whole, "a record cut at {cut} must not read whole");
        }
        for i in 0..data.len() {
            let mut flipped = data.clone();
            flipped[i] ^= 0x10;
            assert!(read_records(&flipped, 1000).0.len() < whole, "a flip at byte {i} must be caught");
        }
        // The same bytes at another position are a leftover, not a record.
        assert!(read_records(&data, 1001).0.is_empty());
    }

    #[test]
    fn segment_headers_round_trip_and_refuse_damage() {
        let header = SegmentHeader { seq: 3, base: 123_456 };
        let bytes = header.encode();
        assert_eq!(bytes.len(), HEADER as usize);
        let path = std::path::Path::new("commit-3.log");
        assert_eq!(SegmentHeader::decode(&bytes, path), Ok(header));
        let mut damaged = bytes.clone();
        damaged[20] ^= 1;
        assert!(matches!(SegmentHeader::decode(&damaged, path), Err(Error::Corrupt { .. })));
        assert!(matches!(SegmentHeader::decode(&[0u8; 100], path), Err(Error::Corrupt { .. })));
    }
}
