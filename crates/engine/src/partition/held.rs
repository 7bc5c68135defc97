//! Writes answered but not yet committed to SQLite ([`Held`]). With the commit log, a write is
//! durable once the log holds it; the writer thread may then keep the partition's SQLite
//! transaction open across a few rounds and commit them with one `COMMIT`
//! (`writer::thread`). Until that commit, the read connections do not see those writes, so
//! every read by key asks here first: the last value each such key was given, or that it was
//! deleted. Reads that cannot ask by key (scans, snapshots) have the writer commit first.
//!
//! The writer adds a round's writes before it answers them, and removes them only after the
//! `COMMIT` that holds them (and after the record cache forgot their keys), so a read that finds
//! nothing here finds them, or something newer, in SQLite. A transaction that cannot commit
//! leaves its writes here until the process ends: the partition is poisoned, and the commit log
//! brings them into SQLite at the next start.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex, MutexGuard,
    },
};

/// What holding a write costs besides its key and value, each kept twice (here, and in its
/// group's commit log record, kept for a re-apply): its slot in the map (64 bytes, the map at
/// most half full after it grows), the allocations' rounding and the record's own header.
/// Computed from the types, not measured.
const HELD_WRITE_BYTES: usize = 192;

/// What holding a write of a `key`-byte key and a `value`-byte value takes in RAM, at most.
pub fn charge(key: usize, value: usize) -> usize {
    2 * (key + value) + HELD_WRITE_BYTES
}

/// A key's state in the held writes: `(id, counter, value)`, or `None` once deleted.
pub type HeldRecord = Option<(u32, u64, Vec<u8>)>;

/// One partition's writes answered but not yet committed to SQLite.
#[derive(Debug, Default)]
pub struct Held {
    /// Whether any write is held: reads skip the lock while none is.
    any: AtomicBool,
    records: Mutex<HashMap<Vec<u8>, HeldRecord>>,
}

impl Held {
    /// The held state of `key`: `Some(None)` if a held write deleted it, `None` if no held
    /// write touched it.
    pub fn get(&self, key: &[u8]) -> Option<HeldRecord> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.lock().get(key).cloned()
    }

    /// Whether any write is held.
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// Adds a round's writes, each key's last state, before they are answered.
    pub fn add(&self, writes: impl IntoIterator<Item = (Vec<u8>, HeldRecord)>) {
        let mut records = self.lock();
        records.extend(writes);
        if !records.is_empty() {
            self.any.store(true, Ordering::Release);
        }
    }

    /// Forgets every held write: they are committed.
    pub fn clear(&self) {
        let mut records = self.lock();
        self.any.store(false, Ordering::Release);
        records.clear();
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Vec<u8>, HeldRecord>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_reads_its_last_held_state_until_cleared() {
        let held = Held::default();
        assert_eq!(held.get(b"a"), None);
        held.add([(b"a".to_vec(), Some((1, 1, b"x".to_vec())))]);
        held.add([(b"a".to_vec(), Some((1, 2, b"y".to_vec()))), (b"b".to_vec(), None)]);
        assert_eq!(held.get(b"a"), Some(Some((1, 2, b"y".to_vec()))));
        assert_eq!(held.get(b"b"), Some(None), "a held delete reads as deleted");
        assert_eq!(held.get(b"c"), None);
        held.clear();
        assert!(!held.any());
        assert_eq!(held.get(b"a"), None);
    }
}
