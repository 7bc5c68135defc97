//! [`DirLock`]: one process at a time per data directory, and whether the last one closed it.
//!
//! `DIR/shardlite.lock` is held with an exclusive `flock` for as long as a store (or the bulk
//! loader) has the directory open, so a second server or loader on the same directory is
//! refused instead of corrupting the index files. `DIR/shardlite.open` marks a session whose
//! partitions are open: created once they all are, removed once they are all closed again
//! (closing checkpoints each log into its database and removes it). Finding the marker at open
//! means the last session ended without closing — a crash or `kill -9` — which is when a
//! missing write-ahead log can mean lost commits ([`crate::partition::wal`]). Both files are
//! empty, so neither can be half written.
//!
//! An open goes: take the lock ([`DirLock::acquire`], learning [`DirLock::unclean`]), read the
//! commit log, then [`DirLock::begin`]: check every partition's WAL (unless the commit log
//! judges missing WALs), start a new epoch if the last session may have lost state it had
//! shown ([`Manifest::start_epoch`]: durable before the old session is forgotten, so a crash
//! right after cannot hide it), forget the old session (the logs are vouched for); then open
//! the partitions, and [`DirLock::opened`]. A close ends the session ([`DirLock::end_session`])
//! once every partition is checkpointed, before their connections close and SQLite deletes the
//! WALs; dropping the lock otherwise (a failed open) removes the marker too; a process killed
//! before then leaves it. Dropped before `opening`, the lock leaves the old session's marker
//! as it found it.

use std::{
    fs::{File, OpenOptions},
    path::{Path, PathBuf},
};

use nix::fcntl::{Flock, FlockArg};

use crate::{
    layout::{self, Layout},
    partition::wal,
    Config, Error, Manifest, Result,
};

/// The held lock of a data directory.
#[derive(Debug)]
pub struct DirLock {
    marker: PathBuf,
    unclean: bool,
    /// `opening` was called: the marker is this session's to remove.
    session: bool,
    /// Held for as long as this value lives.
    _lock: Flock<File>,
}

impl DirLock {
    /// Takes the directory's lock, or fails with [`Error::InUse`] if another process holds it.
    pub fn acquire(layout: &Layout) -> Result<Self> {
        let path = layout.lock();
        let file = OpenOptions::new().write(true).create(true).truncate(false).open(&path);
        let file = file.map_err(|e| Error::io(&path, &e))?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|_| Error::InUse { path })?;
        let marker = layout.open_marker();
        Ok(Self { unclean: marker.exists(), marker, session: false, _lock: lock })
    }

    /// Checks every partition's WAL against the last session ([`wal::check`]; skipped when
    /// `wal_checks` is false: the commit log judges what a missing WAL lost), starts a new epoch
    /// in `manifest` (written to the directory) if that session did not close or lost commits,
    /// then forgets that session: what an open does before it opens the partitions.
    pub fn begin(&mut self, layout: &Layout, config: &Config, manifest: &mut Manifest, wal_checks: bool) -> Result<()> {
        let mut lost = false;
        for p in (0..manifest.partitions).filter(|_| wal_checks) {
            lost |= wal::check(layout, p, self.unclean, config.accept_wal_loss)?;
        }
        if self.unclean || lost || manifest.needs_epoch() {
            manifest.start_epoch();
            manifest.write(&layout.manifest())?;
        }
        self.opening()
    }

    /// Whether the last session's partitions were left open (it did not close cleanly).
    pub fn unclean(&self) -> bool {
        self.unclean
    }

    /// The partitions' logs have been checked: forgets the last session before opening them.
    fn opening(&mut self) -> Result<()> {
        self.session = true;
        remove(&self.marker)
    }

    /// Every partition is open: marks the session, until the lock is dropped.
    pub fn opened(&self) -> Result<()> {
        File::create(&self.marker).and_then(|_| layout::sync_dir(&self.marker)).map_err(|e| Error::io(&self.marker, &e))
    }

    /// Every partition is checkpointed (what another process's reader kept in a WAL stays there,
    /// durable, for the next open), its connections still open: ends the session now, before
    /// closing them deletes the WALs. (Removed after, the marker of a
    /// session that crashed while closing would make the next open take those WALs for lost.)
    pub fn end_session(&mut self) -> Result<()> {
        self.session = false;
        remove(&self.marker)
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        if self.session {
            if let Err(err) = remove(&self.marker) {
                tracing::warn!(path = %self.marker.display(), %err, "could not remove the open-session marker");
            }
        }
    }
}

fn remove(marker: &Path) -> Result<()> {
    match std::fs::remove_file(marker) {
        Ok(()) => layout::sync_dir(marker).map_err(|e| Error::io(marker, &e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(marker, &e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_a_left_marker_means_unclean() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let mut first = DirLock::acquire(&layout).unwrap();
        assert!(!first.unclean());
        assert!(matches!(DirLock::acquire(&layout), Err(Error::InUse { .. })));
        first.opening().unwrap();
        first.opened().unwrap();
        drop(first);
        assert!(!layout.open_marker().exists());

        let mut second = DirLock::acquire(&layout).unwrap();
        assert!(!second.unclean());
        second.opening().unwrap();
        second.opened().unwrap();
        std::mem::forget(second); // as a crash would: no drop runs
        assert!(layout.open_marker().exists());
    }

    #[test]
    fn a_lock_dropped_before_opening_keeps_the_old_sessions_marker() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        File::create(layout.open_marker()).unwrap();
        let lock = DirLock::acquire(&layout).unwrap();
        assert!(lock.unclean());
        drop(lock);
        let mut again = DirLock::acquire(&layout).unwrap();
        assert!(again.unclean());
        again.opening().unwrap();
        assert!(!layout.open_marker().exists());
    }
}
