//! `replication.positions`: where this node's copies of each owner's log stood when the store
//! last closed cleanly, so that a copy that restarts goes on with its owners' streams instead of
//! being brought up to date from snapshots. Written at a clean close: a position for each owner
//! whose transactions were all applied then (none held, none awaiting a snapshot, the owner not
//! sealed), "unknown" for the other owners it took frames from; read and removed at the next
//! open, so that a crash after it leaves no claim behind (the copies then come from snapshots,
//! as the log's replay may apply transactions their owners refused later). It also says whether
//! the directory was new when it first opened: its copies of an owner it never took a frame from
//! are then empty, and that owner's log from 0 follows them.
//!
//! Layout (little-endian), written with `layout::replace_file`:
//!
//! | size | field |
//! |---|---|
//! | 8 | magic `SHLTRPOS` |
//! | 4 | format version (1) |
//! | 4 | 1: the directory was new when it first opened; 0: not, or not known |
//! | 4 | owners N |
//! | N × (2 + len + 8) | the owner's node id (length u16, UTF-8), then the position (`u64::MAX`: unknown) |
//! | 4 | crc32c of every byte before |

use std::path::Path;

use super::frame::Cursor;
use crate::{layout, Error, Result};

const MAGIC: &[u8; 8] = b"SHLTRPOS";
const VERSION: u32 = 1;
/// The position written for an owner whose copies are not all applied.
const UNKNOWN: u64 = u64::MAX;

/// What the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Positions {
    /// The directory was new when it first opened (and has not crashed since).
    pub untouched: bool,
    /// Each owner's node id and where this node's copy of its log ended, if known.
    pub owners: Vec<(String, Option<u64>)>,
}

/// Replaces the file at `path` with `positions`.
pub fn write(path: &Path, positions: &Positions) -> Result<()> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&u32::from(positions.untouched).to_le_bytes());
    bytes.extend_from_slice(&(positions.owners.len() as u32).to_le_bytes());
    for (owner, position) in &positions.owners {
        let len =
            u16::try_from(owner.len()).map_err(|_| Error::Replication(format!("node id `{owner}` is too long")))?;
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(owner.as_bytes());
        bytes.extend_from_slice(&position.unwrap_or(UNKNOWN).to_le_bytes());
    }
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    layout::replace_file(path, |f| std::io::Write::write_all(f, &bytes))
}

/// Reads the file at `path` and removes it (durably): `None` if there is none.
pub fn take(path: &Path) -> Result<Option<Positions>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, &e)),
    };
    let positions = decode(&bytes).ok_or_else(|| Error::Corrupt {
        path: path.to_owned(),
        what: format!("not a replication positions file of format {VERSION} ({} bytes)", bytes.len()),
    })?;
    std::fs::remove_file(path).map_err(|e| Error::io(path, &e))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    layout::sync_dir(dir).map_err(|e| Error::io(dir, &e))?;
    Ok(Some(positions))
}

fn decode(bytes: &[u8]) -> Option<Positions> {
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().ok()?) || body.get(..8)? != MAGIC {
        return None;
    }
    let mut r = Cursor { bytes: body, at: MAGIC.len() };
    if r.u32()? != VERSION {
        return None;
    }
    let untouched = r.u32()? == 1;
    let owners = (0..r.u32()?)
        .map(|_| {
            let len = u16::from_le_bytes(r.take(2)?.try_into().ok()?) as usize;
            let owner = String::from_utf8(r.take(len)?.to_vec()).ok()?;
            let position = r.u64()?;
            Some((owner, (position != UNKNOWN).then_some(position)))
        })
        .collect::<Option<Vec<_>>>()?;
    (r.at == body.len()).then_some(Positions { untouched, owners })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_is_removed_once_read_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replication.positions");
        assert_eq!(take(&path).unwrap(), None);
        let owners = vec![("n1".into(), Some(4096)), ("node-two".into(), None), ("n3".into(), Some(0))];
        let positions = Positions { untouched: false, owners };
        write(&path, &positions).unwrap();
        assert_eq!(take(&path).unwrap(), Some(positions.clone()));
        assert!(!path.exists(), "read once");
        write(&path, &Positions { untouched: true, owners: Vec::new() }).unwrap();
        assert_eq!(take(&path).unwrap(), Some(Positions { untouched: true, owners: Vec::new() }));
        write(&path, &positions).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(matches!(take(&path), Err(Error::Corrupt { .. })));
    }
}
