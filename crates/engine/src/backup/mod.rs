//! Backups of a data directory, online or offline, and their restore into a new directory.
//!
//! A backup ([`crate::Store::backup`]) copies each partition in turn from a snapshot of its own
//! ([`crate::partition::snapshot`]) while writes go on, with an index file covering exactly that
//! snapshot (so a restore rebuilds nothing); then the directory's manifest and, last, the
//! backup's own ([`BackupManifest`]). Every write acknowledged before the backup started is in it.
//! All of it is written into `.NAME.partial` beside the destination and renamed into place once
//! complete. A restore ([`restore()`]) verifies every file as it copies it, and starts a new epoch.
//!
//! - `copy`: one partition's snapshot copied (as a file, or through SQLite's backup API)
//! - `pace`: how fast: at most `max_rate`, slower while durable writes wait on the disk
//! - `manifest`: `backup.toml`, versioned and checksummed
//! - `restore`: a backup restored into a new data directory

mod copy;
mod manifest;
mod pace;
mod restore;

use std::{
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::Duration,
};

use serde::{Deserialize, Serialize};

pub(crate) use copy::{database, index};
use manifest::{read_chunks, read_chunks_of};
pub use manifest::{BackupManifest, FileEntry, PartitionEntry, BACKUP_FORMAT_VERSION};
pub(crate) use pace::Pacer;
pub use restore::restore;

use crate::{layout, Error, Result};

/// How a backup runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct BackupOptions {
    /// Bytes per second to write at most (`None`: as fast as the disk goes).
    pub max_rate: Option<u64>,
}

/// How far a backup or a restore has come; shared with whoever watches it, who may also cancel
/// a backup.
#[derive(Debug, Default)]
pub struct Progress {
    bytes_total: AtomicU64,
    bytes_done: AtomicU64,
    partitions_done: AtomicU64,
    partitions: AtomicU64,
    longest_stall_us: AtomicU64,
    cancelled: AtomicBool,
}

/// What [`Progress`] says at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressReport {
    /// Bytes expected in all (an estimate until every partition is copied).
    pub bytes_total: u64,
    /// Bytes written so far.
    pub bytes_done: u64,
    /// Partitions finished.
    pub partitions_done: u64,
    /// Partitions in all.
    pub partitions: u64,
    /// The longest a partition's writer was held up taking its snapshot, microseconds.
    pub longest_stall_us: u64,
}

impl Progress {
    /// Asks the backup to stop at its next step; it then fails, leaving no backup behind.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    /// What it says now.
    pub fn report(&self) -> ProgressReport {
        ProgressReport {
            bytes_total: self.bytes_total.load(Ordering::Relaxed),
            bytes_done: self.bytes_done.load(Ordering::Relaxed),
            partitions_done: self.partitions_done.load(Ordering::Relaxed),
            partitions: self.partitions.load(Ordering::Relaxed),
            longest_stall_us: self.longest_stall_us.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn start(&self, partitions: u32, bytes_total: u64) {
        self.partitions.store(u64::from(partitions), Ordering::Relaxed);
        self.bytes_total.store(bytes_total, Ordering::Relaxed);
    }

    pub(crate) fn wrote(&self, bytes: u64) {
        self.bytes_done.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A partition is done; `estimated` of the total was its share, `actual` what it took.
    pub(crate) fn partition_done(&self, estimated: u64, actual: u64) {
        self.partitions_done.fetch_add(1, Ordering::Relaxed);
        let _ = self.bytes_total.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
            Some(t.saturating_sub(estimated).saturating_add(actual))
        });
    }

    pub(crate) fn stalled(&self, stall: Duration) {
        self.longest_stall_us.fetch_max(stall.as_micros() as u64, Ordering::Relaxed);
    }

    /// `Err` once cancelled.
    pub(crate) fn go_on(&self) -> Result<()> {
        match self.cancelled.load(Ordering::Relaxed) {
            true => Err(Error::Backup("the backup was cancelled (the server is shutting down?)".into())),
            false => Ok(()),
        }
    }
}

/// What a finished backup wrote.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// The backup directory.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: BackupManifest,
    /// Bytes written.
    pub bytes: u64,
    /// How long it took, seconds.
    pub seconds: f64,
    /// The longest a partition's writer was held up taking its snapshot, microseconds.
    pub longest_stall_us: u64,
}

/// Refuses a destination for a backup or a restore that exists and is not an empty directory.
pub fn check_destination(dir: &Path) -> Result<()> {
    if dir.file_name().is_none() {
        return Err(Error::Backup(format!("{} names no directory", dir.display())));
    }
    let empty = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(Error::io(dir, &e)),
    };
    match empty {
        true => Ok(()),
        false => Err(Error::Backup(format!("{} is not empty: give a new or empty directory", dir.display()))),
    }
}

/// A destination being written: `.NAME.partial` beside it, renamed to it once complete.
pub(crate) struct Destination {
    dir: PathBuf,
    partial: PathBuf,
}

impl Destination {
    /// Refuses a destination that exists and is not an empty directory; starts its partial
    /// directory (removing one a crashed backup or restore left).
    pub(crate) fn prepare(dir: &Path) -> Result<Self> {
        check_destination(dir)?;
        let partial = layout::partial_dir(dir);
        if partial.exists() {
            tracing::warn!(path = %partial.display(), "removing what an interrupted backup or restore left");
            std::fs::remove_dir_all(&partial).map_err(|e| Error::io(&partial, &e))?;
        }
        std::fs::create_dir_all(&partial).map_err(|e| Error::io(&partial, &e))?;
        Ok(Self { dir: dir.to_owned(), partial })
    }

    /// Where the files go meanwhile.
    pub(crate) fn partial(&self) -> &Path {
        &self.partial
    }

    /// Every file is written and synced: makes the directory durable and gives it its name.
    pub(crate) fn complete(self) -> Result<PathBuf> {
        let sync = |path: &Path| std::fs::File::open(path).and_then(|d| d.sync_all()).map_err(|e| Error::io(path, &e));
        sync(&self.partial)?;
        // Over an empty directory, rename replaces it.
        std::fs::rename(&self.partial, &self.dir).map_err(|e| Error::io(&self.dir, &e))?;
        layout::sync_dir(&self.dir).map_err(|e| Error::io(&self.dir, &e))?;
        Ok(self.dir)
    }

    /// Removes the partial directory of a failed backup or restore.
    pub(crate) fn abandon(self) {
        if let Err(err) = std::fs::remove_dir_all(&self.partial) {
            tracing::warn!(path = %self.partial.display(), %err, "could not remove a failed backup's files");
        }
    }
}
