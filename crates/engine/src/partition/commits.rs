//! The commits of a partition's writer as its lookups see them: whether one is under way, and
//! how many have taken place ([`Commits`]). A lookup connection keeps its read transaction only
//! while that count is the one it began at and no commit is under way ([`super::readers`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// The commits of a partition's writer: those begun (counted by SQLite's commit hook, before a
/// commit can be seen) and how many of them had taken place when the last one did (after its
/// `COMMIT` returned, or in SQLite's WAL hook once its frames are in the WAL:
/// [`super::sql::watch_wal`]). One that writes no frame is only known to have ended at the
/// writer's next [`Commits::settle`] or WAL hook; until then lookups keep no read transaction.
#[derive(Debug, Default)]
pub struct Commits {
    begun: AtomicU64,
    ended: AtomicU64,
}

impl Commits {
    /// A commit begins: from now on until it is settled, lookups keep no read transaction.
    pub fn begin(&self) {
        self.begun.fetch_add(1, Ordering::SeqCst);
    }

    /// Every commit begun has taken place (or failed): call when the writer's `COMMIT` returns.
    pub fn settle(&self) {
        self.ended.store(self.begun.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// The commits that have taken place, if none is under way: `ended` is read first, so that
    /// the same count in `begun` read after it means that none began in between.
    pub fn settled(&self) -> Option<u64> {
        let ended = self.ended.load(Ordering::SeqCst);
        (self.begun.load(Ordering::SeqCst) == ended).then_some(ended)
    }
}
