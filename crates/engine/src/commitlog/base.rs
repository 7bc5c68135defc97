//! `commit.base`: how far each partition's own files were known durable when the commit log
//! last dropped segments. Log records before that point are gone, so a partition whose database
//! is found older than its base lost commits with its WAL (power loss after the WAL was deleted,
//! or the file deleted by hand); one at or past its base can be brought forward by replaying
//! what the log still holds. Its presence also says the directory is looked after by the log.
//!
//! Layout (little-endian), written with `layout::replace_file`:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `SHLTBASE` |
//! | 8 | 4 | format version (1) |
//! | 12 | 4 | partitions P |
//! | 16 | 8 × P | per partition, the log position its durable files have applied up to |
//! | 16 + 8P | 4 | crc32c of every byte before |

use std::path::Path;

use crate::{layout, Error, Result};

const MAGIC: &[u8; 8] = b"SHLTBASE";
const VERSION: u32 = 1;

/// Reads the base file at `path`: `None` if there is none.
pub fn read(path: &Path, partitions: u32) -> Result<Option<Vec<u64>>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, &e)),
    };
    let corrupt = |what: String| Error::Corrupt { path: path.to_owned(), what };
    let want = 16 + 8 * partitions as usize + 4;
    if bytes.len() != want || &bytes[..8] != MAGIC {
        return Err(corrupt(format!("not a commit log base of {partitions} partitions ({} bytes)", bytes.len())));
    }
    let (body, crc) = bytes.split_at(want - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("four bytes")) {
        return Err(corrupt("checksum mismatch".into()));
    }
    let version = u32::from_le_bytes(body[8..12].try_into().expect("four bytes"));
    if version > VERSION {
        return Err(corrupt(format!("format {version} is newer than this build ({VERSION})")));
    }
    Ok(Some(body[16..].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("eight bytes"))).collect()))
}

/// Replaces the base file at `path` with `applied` (one log position per partition).
pub fn write(path: &Path, applied: &[u64]) -> Result<()> {
    let mut bytes = Vec::with_capacity(20 + 8 * applied.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&(applied.len() as u32).to_le_bytes());
    for lsn in applied {
        bytes.extend_from_slice(&lsn.to_le_bytes());
    }
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    layout::replace_file(path, |f| std::io::Write::write_all(f, &bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("commit.base");
        assert_eq!(read(&path, 3).unwrap(), None);
        write(&path, &[1, 20, 300]).unwrap();
        assert_eq!(read(&path, 3).unwrap(), Some(vec![1, 20, 300]));
        assert!(matches!(read(&path, 4), Err(Error::Corrupt { .. })), "another partition count");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(matches!(read(&path, 3), Err(Error::Corrupt { .. })));
    }
}
