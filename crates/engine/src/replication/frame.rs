//! What an owner sends a copy ([`Frame`]), byte by byte: its transactions of a range of its log
//! that concern the copy's partitions, how far the owner's log is committed (the copy applies
//! the transactions before that), the ranges the copies refused (never applied), and the epoch
//! of each partition the transactions write (a copy made owner keeps it, and so every tag).
//!
//! ```text
//! magic     "SHLTRP1\n"                                                      8 bytes
//! from u64, to u64       the range of the owner's log this frame covers
//! commit u64             the owner's log is committed (or refused) before this
//! new_stream u8          1: the owner does not know how far this copy is (it just started, or
//!                        the map names copies stale); 2: the same, and every copy this node
//!                        keeps of the owner's partitions comes from a snapshot (it was behind);
//!                        with 1 or 2,
//! resync u32, then partition u32 each: partitions whose copy comes from a snapshot next
//! refused u32, then (from u64, to u64) each
//! epochs u32, then (partition u32, epoch u64) each
//! txs u32, then each: lsn u64 (in the owner's log), body length u32, body (as logged)
//! crc32c u32 of every byte before it                                         (little-endian)
//! ```

use crate::{Error, Result};

/// The frame's first 8 bytes.
pub const MAGIC: &[u8; 8] = b"SHLTRP1\n";

/// An owner's transactions for one copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    /// The LSN of the owner's log where the range begins: the copy must hold everything before.
    pub from: u64,
    /// The LSN just past the range.
    pub to: u64,
    /// Everything of the owner's log before this is committed or refused.
    pub commit: u64,
    /// The owner does not know how far the copy is (its first frame since it started, or
    /// since the copy was behind).
    pub new_stream: bool,
    /// With `new_stream`: `resync` names every partition whose copy the node keeps for the
    /// owner (it was behind), so it need not hold what came before `from`.
    pub resync_all: bool,
    /// With `new_stream`: the partitions whose copy the owner sends next as a snapshot; until
    /// it arrives their transactions are held, not applied.
    pub resync: Vec<u32>,
    /// Ranges of the owner's log the copies refused: their transactions are never applied.
    pub refused: Vec<(u64, u64)>,
    /// The epoch of each partition the transactions write, on the owner.
    pub epochs: Vec<(u32, u64)>,
    /// The transactions, in log order: LSN and body as the owner logged them.
    pub txs: Vec<(u64, Vec<u8>)>,
}

impl Frame {
    /// An idle owner's frame: no transactions, and a range that is empty, its log not having
    /// moved since the last frame (it only says where the commit stands). A frame whose range
    /// holds no transaction of the copy's is not idle: the owner's log moved with writes of
    /// other partitions, or with the copies it keeps itself, and more of its writes follow.
    pub fn is_idle(&self) -> bool {
        self.txs.is_empty() && self.from == self.to
    }

    /// The frame's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let bodies: usize = self.txs.iter().map(|(_, b)| 12 + b.len()).sum();
        let mut out = Vec::with_capacity(45 + 16 * self.refused.len() + bodies);
        out.extend_from_slice(MAGIC);
        for n in [self.from, self.to, self.commit] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.push(match (self.new_stream, self.resync_all) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        });
        if self.new_stream {
            out.extend_from_slice(&(self.resync.len() as u32).to_le_bytes());
            for partition in &self.resync {
                out.extend_from_slice(&partition.to_le_bytes());
            }
        }
        out.extend_from_slice(&(self.refused.len() as u32).to_le_bytes());
        for (from, to) in &self.refused {
            out.extend_from_slice(&from.to_le_bytes());
            out.extend_from_slice(&to.to_le_bytes());
        }
        out.extend_from_slice(&(self.epochs.len() as u32).to_le_bytes());
        for (partition, epoch) in &self.epochs {
            out.extend_from_slice(&partition.to_le_bytes());
            out.extend_from_slice(&epoch.to_le_bytes());
        }
        out.extend_from_slice(&(self.txs.len() as u32).to_le_bytes());
        for (lsn, body) in &self.txs {
            out.extend_from_slice(&lsn.to_le_bytes());
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(body);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads and checks a frame.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let bad = |why: &str| Error::Replication(format!("a replication frame {why}"));
        if bytes.len() < MAGIC.len() + 4 || &bytes[..MAGIC.len()] != MAGIC {
            return Err(bad("does not start with its magic (not a frame, or a newer format)"));
        }
        let (data, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(data) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(bad("fails its checksum"));
        }
        let mut r = Cursor { bytes: data, at: MAGIC.len() };
        let parsed = (|| {
            let (from, to, commit) = (r.u64()?, r.u64()?, r.u64()?);
            let (new_stream, resync_all) = match r.take(1)?[0] {
                0 => (false, false),
                1 => (true, false),
                2 => (true, true),
                _ => return None,
            };
            let resync = match new_stream {
                true => (0..r.u32()?).map(|_| r.u32()).collect::<Option<Vec<_>>>()?,
                false => Vec::new(),
            };
            let refused = (0..r.u32()?).map(|_| Some((r.u64()?, r.u64()?))).collect::<Option<Vec<_>>>()?;
            let epochs = (0..r.u32()?).map(|_| Some((r.u32()?, r.u64()?))).collect::<Option<Vec<_>>>()?;
            let txs = (0..r.u32()?)
                .map(|_| {
                    let lsn = r.u64()?;
                    let len = r.u32()? as usize;
                    Some((lsn, r.take(len)?.to_vec()))
                })
                .collect::<Option<Vec<_>>>()?;
            Some(Self { from, to, commit, new_stream, resync_all, resync, refused, epochs, txs })
        })();
        match parsed {
            Some(frame) if r.at == data.len() && frame.from <= frame.to => Ok(frame),
            _ => Err(bad("is malformed")),
        }
    }
}

/// A cursor over a frame (or another of replication's little-endian files); `None` past its end.
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) at: usize,
}

impl Cursor<'_> {
    pub(super) fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.bytes.len())?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Some(out)
    }

    pub(super) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    pub(super) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_damage_is_refused() {
        let frame = Frame {
            from: 4096,
            to: 9000,
            commit: 4096,
            new_stream: true,
            resync_all: true,
            resync: vec![2, 5],
            refused: vec![(100, 200)],
            epochs: vec![(3, 77)],
            txs: vec![(4096, vec![1, 2, 3]), (5000, vec![])],
        };
        let bytes = frame.encode();
        assert_eq!(Frame::decode(&bytes).unwrap(), frame);
        let announced = Frame { resync_all: false, ..frame.clone() };
        assert_eq!(Frame::decode(&announced.encode()).unwrap(), announced);
        let mut damaged = bytes.clone();
        damaged[20] ^= 1;
        assert!(Frame::decode(&damaged).unwrap_err().to_string().contains("checksum"));
        assert!(Frame::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(Frame::decode(b"SHLTMV3\n....").unwrap_err().to_string().contains("magic"));
    }
}
