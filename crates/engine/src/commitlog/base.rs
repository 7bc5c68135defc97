//! `commit.base`: how far each partition's own files were known durable when the commit log
//! last dropped segments. Log records before that point are gone, so a partition whose database
//! is found older than its base lost commits with its WAL (power loss after the WAL was deleted,
//! or the file deleted by hand); one at or past its base can be brought forward by replaying
//! what the log still holds. Its presence also says the directory is looked after by the log.
//!
//! Two figures tell "older": the log position the database's `meta` notes, and its next record
//! id (a transaction that only inserts may leave `meta` alone). The file also keeps where the log
//! ended, so that the next session's log goes on from there: a position is never used twice (the
//! copies of a node's partitions know its log by position). The file's layout: [`write`](fn@write).

use std::path::Path;

use crate::{layout, Error, Result};

const MAGIC: &[u8; 8] = b"SHLTBASE";
const VERSION: u32 = 3;
/// The format without the log's end (read as 0).
const VERSION_WITHOUT_END: u32 = 2;
/// The format with each partition's log position alone.
const VERSION_POSITIONS_ONLY: u32 = 1;

/// What the base file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    /// Where the log ended when the file was written (at least): the next log starts there.
    pub end: u64,
    /// How far each partition's files were known durable.
    pub durable: Vec<Durable>,
}

/// How far a partition's own files were known durable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Durable {
    /// The log position its `meta` notes as applied.
    pub applied: u64,
    /// Its next record id (0: not recorded).
    pub next_id: u64,
}

/// Reads the base file at `path`: `None` if there is none.
pub fn read(path: &Path, partitions: u32) -> Result<Option<Base>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, &e)),
    };
    let corrupt = |what: String| Error::Corrupt { path: path.to_owned(), what };
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        return Err(corrupt(format!("not a commit log base ({} bytes)", bytes.len())));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("four bytes"));
    let (head, per_partition) = match version {
        VERSION_POSITIONS_ONLY => (16, 8),
        VERSION_WITHOUT_END => (16, 16),
        VERSION => (24, 16),
        _ => return Err(corrupt(format!("format {version} is not one this build reads ({VERSION} or older)"))),
    };
    let want = head + per_partition * partitions as usize + 4;
    if bytes.len() != want {
        return Err(corrupt(format!("not a commit log base of {partitions} partitions ({} bytes)", bytes.len())));
    }
    let (body, crc) = bytes.split_at(want - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("four bytes")) {
        return Err(corrupt("checksum mismatch".into()));
    }
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("eight bytes"));
    let end = if head == 24 { word(&body[16..24]) } else { 0 };
    let durable = body[head..]
        .chunks_exact(per_partition)
        .map(|c| Durable { applied: word(&c[..8]), next_id: if per_partition == 16 { word(&c[8..]) } else { 0 } })
        .collect();
    Ok(Some(Base { end, durable }))
}

/// Replaces the base file at `path` with `durable` (one entry per partition) and `end`, where
/// the log ends (at least).
///
/// Layout (little-endian), written with `layout::replace_file`:
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 8 | magic `SHLTBASE` |
/// | 8 | 4 | format version (3) |
/// | 12 | 4 | partitions P |
/// | 16 | 8 | where the log ended: the next log starts there |
/// | 24 | 16 × P | per partition, the log position its durable files have applied up to, then its next record id |
/// | 24 + 16P | 4 | crc32c of every byte before |
///
/// Format 2 has no end (read as 0); format 1 neither, and 8 bytes per partition, the position
/// only (read with no next id to compare: 0).
pub fn write(path: &Path, end: u64, durable: &[Durable]) -> Result<()> {
    let mut bytes = Vec::with_capacity(28 + 16 * durable.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&(durable.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&end.to_le_bytes());
    for d in durable {
        bytes.extend_from_slice(&d.applied.to_le_bytes());
        bytes.extend_from_slice(&d.next_id.to_le_bytes());
    }
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    layout::replace_file(path, |f| std::io::Write::write_all(f, &bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn durable(pairs: &[(u64, u64)]) -> Vec<Durable> {
        pairs.iter().map(|&(applied, next_id)| Durable { applied, next_id }).collect()
    }

    #[test]
    fn round_trips_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("commit.base");
        assert_eq!(read(&path, 3).unwrap(), None);
        write(&path, 4000, &durable(&[(1, 5), (20, 6), (300, 7)])).unwrap();
        assert_eq!(read(&path, 3).unwrap(), Some(Base { end: 4000, durable: durable(&[(1, 5), (20, 6), (300, 7)]) }));
        assert!(matches!(read(&path, 4), Err(Error::Corrupt { .. })), "another partition count");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(matches!(read(&path, 3), Err(Error::Corrupt { .. })));
    }

    /// A base file of an older format `version`: `partitions`, then `words`, then its checksum.
    fn older(version: u32, partitions: u32, words: &[u64]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("commit.base");
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&version.to_le_bytes());
        bytes.extend_from_slice(&partitions.to_le_bytes());
        words.iter().for_each(|w| bytes.extend_from_slice(&w.to_le_bytes()));
        bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
        std::fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    #[test]
    fn reads_the_format_with_positions_only() {
        let (_dir, path) = older(VERSION_POSITIONS_ONLY, 2, &[7, 8]);
        assert_eq!(read(&path, 2).unwrap(), Some(Base { end: 0, durable: durable(&[(7, 0), (8, 0)]) }));
    }

    #[test]
    fn reads_the_format_without_the_end() {
        let (_dir, path) = older(VERSION_WITHOUT_END, 1, &[7, 3]);
        assert_eq!(read(&path, 1).unwrap(), Some(Base { end: 0, durable: durable(&[(7, 3)]) }));
    }
}
