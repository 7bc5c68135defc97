//! [`DirLock`]: one process at a time per data directory, and whether the last one closed it.
//!
//! - `DIR/shardlite.lock` is held with an exclusive `flock` while a store, the bulk loader or an
//!   import has the directory open: a second one is refused, told which process holds it.
//! - `DIR/shardlite.open` marks a session whose partitions are open, from when they all are until
//!   they are all checkpointed at close. Found at open, the last session did not close: a missing
//!   WAL may mean lost commits ([`crate::partition::wal`]), and a new epoch starts if that session
//!   may have shown states not yet durable ([`Shown`]).
//!
//! An open: [`DirLock::acquire`], read the commit log, [`DirLock::begin`], open the partitions,
//! [`DirLock::opened`]. A close ends the session ([`DirLock::end_session`]) once every partition
//! is checkpointed, before SQLite deletes the WALs.

use std::{
    fs::{File, OpenOptions},
    path::{Path, PathBuf},
};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::{
    layout::{self, Layout},
    manifest::{checked_body, write_checksummed},
    partition::wal,
    Config, Error, Manifest, Result,
};

/// What a session may have shown (answered, let be read, cached) of the states it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shown {
    /// Only states already durable: a crash loses none of them.
    OnlyDurable,
    /// Maybe states not yet durable (`synchronous = normal` or `off`): a crash may lose some.
    MaybeNotDurable,
}

impl Shown {
    /// What a store running with `config` shows: with `synchronous = full` a commit is durable
    /// before anything can read it (the commit log is flushed before the `COMMIT`; without it
    /// SQLite syncs the log before the commit is visible), so it shows only durable states.
    pub fn by(config: &Config) -> Self {
        match config.synchronous {
            crate::Synchronous::Full => Shown::OnlyDurable,
            _ => Shown::MaybeNotDurable,
        }
    }
}

/// The marker's format version.
const MARKER_FORMAT: u32 = 1;

/// The open-session marker's content (checksummed TOML, as the manifest).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Marker {
    format_version: u32,
    shown: Shown,
}

/// The held lock of a data directory.
#[derive(Debug)]
pub struct DirLock {
    marker: PathBuf,
    /// The last session did not close.
    unclean: bool,
    /// ... and it may have shown states that its crash lost.
    shown_lost: bool,
    /// `opening` was called: the marker is this session's to remove.
    session: bool,
    /// Held for as long as this value lives.
    _lock: Flock<File>,
}

impl DirLock {
    /// Takes the directory's lock, or fails with [`Error::InUse`] (naming the process that
    /// holds it) if another process holds it. The holder writes its process id in the lock
    /// file, for that message only.
    pub fn acquire(layout: &Layout) -> Result<Self> {
        let path = layout.lock();
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path);
        let file = file.map_err(|e| Error::io(&path, &e))?;
        let mut lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(mut file, _)| {
            let mut text = String::new();
            let holder =
                std::io::Read::read_to_string(&mut file, &mut text).ok().and_then(|_| text.trim().parse().ok());
            Error::InUse { path: path.clone(), holder }
        })?;
        let written = lock
            .set_len(0)
            .and_then(|()| std::io::Write::write_all(&mut *lock, std::process::id().to_string().as_bytes()));
        written.map_err(|e| Error::io(&path, &e))?;
        let marker = layout.open_marker();
        let unclean = marker.exists();
        let shown_lost = unclean && read_marker(&marker) != Some(Shown::OnlyDurable);
        Ok(Self { unclean, shown_lost, marker, session: false, _lock: lock })
    }

    /// Checks every partition's WAL against the last session ([`wal::check`]; skipped when
    /// `wal_checks` is false: the commit log judges what a missing WAL lost), starts a new epoch
    /// in `manifest` (written to the directory) if that session may have shown states now lost
    /// (it did not close and showed states before they were durable, or commits were lost),
    /// then forgets that session: what an open does before it opens the partitions.
    pub fn begin(&mut self, layout: &Layout, config: &Config, manifest: &mut Manifest, wal_checks: bool) -> Result<()> {
        if self.unclean {
            // What the last session wrote and never synced may sit in the page cache (a killed
            // process): durable before this session shows any of it.
            layout::sync_filesystem_of(layout.dir())?;
        }
        let mut lost = false;
        for p in (0..manifest.partitions).filter(|_| wal_checks) {
            lost |= wal::check(layout, p, self.unclean, config.accept_wal_loss)?;
        }
        if self.shown_lost || lost || manifest.needs_epoch() {
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

    /// Every partition is open: marks the session, saying what it may show, until the lock is
    /// dropped.
    pub fn opened(&self, shown: Shown) -> Result<()> {
        write_checksummed(&self.marker, &Marker { format_version: MARKER_FORMAT, shown })
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

/// What the marker at `path` says was shown, if it reads whole.
fn read_marker(path: &Path) -> Option<Shown> {
    let text = std::fs::read_to_string(path).ok()?;
    let marker: Marker = toml::from_str(checked_body(&text).ok()?).ok()?;
    (marker.format_version == MARKER_FORMAT).then_some(marker.shown)
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
        first.opened(Shown::OnlyDurable).unwrap();
        drop(first);
        assert!(!layout.open_marker().exists());

        let mut second = DirLock::acquire(&layout).unwrap();
        assert!(!second.unclean());
        second.opening().unwrap();
        second.opened(Shown::OnlyDurable).unwrap();
        std::mem::forget(second); // as a crash would: no drop runs
        assert!(layout.open_marker().exists());
    }

    /// Only a marker that reads whole as "only durable" spares the next open a new epoch: one
    /// saying otherwise, an older build's empty one and a damaged one all start one.
    #[test]
    fn the_marker_tells_whether_states_shown_may_be_lost() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let left = |shown: Shown| {
            let mut lock = DirLock::acquire(&layout).unwrap();
            lock.opening().unwrap();
            lock.opened(shown).unwrap();
            lock.session = false; // as a crash: the marker stays, the lock goes with the process
            drop(lock);
            DirLock::acquire(&layout).unwrap()
        };
        let after = left(Shown::OnlyDurable);
        assert!(after.unclean() && !after.shown_lost);
        drop(after);
        let after = left(Shown::MaybeNotDurable);
        assert!(after.unclean() && after.shown_lost);
        drop(after);
        let text = std::fs::read_to_string(layout.open_marker()).unwrap();
        for content in [String::new(), text.replace("maybe-not-durable", "only-durable")] {
            std::fs::write(layout.open_marker(), content).unwrap();
            let lock = DirLock::acquire(&layout).unwrap();
            assert!(lock.unclean() && lock.shown_lost, "an unreadable marker counts as states lost");
        }
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
