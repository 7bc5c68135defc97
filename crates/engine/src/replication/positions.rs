//! `replication.positions`: where this node's copies of each owner's log stood when the store
//! last closed cleanly, so that a copy that restarts goes on with its owners' streams instead of
//! being brought up to date from snapshots. Written at a clean close: for each owner none of
//! whose partitions awaited a snapshot (and not sealed), the position, how far the owner's log
//! was committed, and the transactions held past that, not applied (the owner may still refuse
//! them; the next open logs them again and holds them as before); "unknown" for the other owners
//! it took frames from. Read and removed at the next open, so that a crash after it leaves no
//! claim behind (the copies then come from snapshots, as the log's replay may apply transactions
//! their owners refused later). It also says whether the directory was new when it first
//! opened: its copies of an owner it never took a frame from are then empty, and that owner's
//! log from 0 follows them.
//!
//! Layout (little-endian), written with `layout::replace_file`:
//!
//! | size | field |
//! |---|---|
//! | 8 | magic `SHLTRPOS` |
//! | 4 | format version (2) |
//! | 4 | 1: the directory was new when it first opened; 0: not, or not known |
//! | 4 | owners N |
//! | N × … | the owner's node id (length u16, UTF-8), then the position (`u64::MAX`: unknown); if known, the owner's commit point (u64), the transactions held H (u32), and H × (the transaction's position in the owner's log u64, its body's length u32, its body) |
//! | 4 | crc32c of every byte before |
//!
//! Format 1 has neither commit point nor transactions held (read as committed up to the
//! position, none held).

use std::path::Path;

use super::frame::Cursor;
use crate::{layout, Error, Result};

const MAGIC: &[u8; 8] = b"SHLTRPOS";
const VERSION: u32 = 2;
/// The format without commit points and transactions held.
const VERSION_POSITIONS_ONLY: u32 = 1;
/// The position written for an owner whose copies are not all applied.
const UNKNOWN: u64 = u64::MAX;

/// What the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Positions {
    /// The directory was new when it first opened (and has not crashed since).
    pub untouched: bool,
    /// Each owner's node id and where this node's copy of its log stood, if known.
    pub owners: Vec<(String, Option<Place>)>,
}

/// Where this node's copy of an owner's log stood.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Place {
    /// Where it ended.
    pub position: u64,
    /// How far the owner's log was committed: everything held before it was applied.
    pub commit: u64,
    /// The transactions held, not applied, each as its position in the owner's log and its
    /// body as logged, in log order.
    pub held: Vec<(u64, Vec<u8>)>,
}

/// Replaces the file at `path` with `positions`.
pub fn write(path: &Path, positions: &Positions) -> Result<()> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&u32::from(positions.untouched).to_le_bytes());
    bytes.extend_from_slice(&(positions.owners.len() as u32).to_le_bytes());
    for (owner, place) in &positions.owners {
        let len =
            u16::try_from(owner.len()).map_err(|_| Error::Replication(format!("node id `{owner}` is too long")))?;
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(owner.as_bytes());
        let Some(place) = place else {
            bytes.extend_from_slice(&UNKNOWN.to_le_bytes());
            continue;
        };
        bytes.extend_from_slice(&place.position.to_le_bytes());
        bytes.extend_from_slice(&place.commit.to_le_bytes());
        bytes.extend_from_slice(&(place.held.len() as u32).to_le_bytes());
        for (lsn, body) in &place.held {
            let len = u32::try_from(body.len()).map_err(|_| Error::Replication("a transaction too large".into()))?;
            bytes.extend_from_slice(&lsn.to_le_bytes());
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes.extend_from_slice(body);
        }
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
        what: format!("not a replication positions file of format {VERSION} or older ({} bytes)", bytes.len()),
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
    let version = r.u32()?;
    if version != VERSION && version != VERSION_POSITIONS_ONLY {
        return None;
    }
    let untouched = r.u32()? == 1;
    let owners = (0..r.u32()?)
        .map(|_| {
            let len = u16::from_le_bytes(r.take(2)?.try_into().ok()?) as usize;
            let owner = String::from_utf8(r.take(len)?.to_vec()).ok()?;
            let position = r.u64()?;
            let place = match (position, version) {
                (UNKNOWN, _) => None,
                (position, VERSION_POSITIONS_ONLY) => Some(Place { position, commit: position, held: Vec::new() }),
                (position, _) => Some(Place { position, commit: r.u64()?, held: held(&mut r)? }),
            };
            Some((owner, place))
        })
        .collect::<Option<Vec<_>>>()?;
    (r.at == body.len()).then_some(Positions { untouched, owners })
}

/// The transactions held of one owner: their count, then each one's position, length and body.
fn held(r: &mut Cursor<'_>) -> Option<Vec<(u64, Vec<u8>)>> {
    (0..r.u32()?)
        .map(|_| {
            let lsn = r.u64()?;
            let len = r.u32()? as usize;
            Some((lsn, r.take(len)?.to_vec()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_is_removed_once_read_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replication.positions");
        assert_eq!(take(&path).unwrap(), None);
        let held = vec![(4000, b"first".to_vec()), (4050, b"second".to_vec())];
        let owners = vec![
            ("n1".into(), Some(Place { position: 4096, commit: 4000, held })),
            ("node-two".into(), None),
            ("n3".into(), Some(Place::default())),
        ];
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

    #[test]
    fn reads_the_format_with_positions_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replication.positions");
        let mut bytes = MAGIC.to_vec();
        for word in [VERSION_POSITIONS_ONLY, 0, 2] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        for (owner, position) in [("n1", 700u64), ("n2", UNKNOWN)] {
            bytes.extend_from_slice(&(owner.len() as u16).to_le_bytes());
            bytes.extend_from_slice(owner.as_bytes());
            bytes.extend_from_slice(&position.to_le_bytes());
        }
        bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
        std::fs::write(&path, bytes).unwrap();
        let place = Place { position: 700, commit: 700, held: Vec::new() };
        let want = Positions { untouched: false, owners: vec![("n1".into(), Some(place)), ("n2".into(), None)] };
        assert_eq!(take(&path).unwrap(), Some(want));
    }
}
