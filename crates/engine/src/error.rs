//! The engine's one error type.
//!
//! `Error` is `Clone` because group commit answers every waiter of a batch with the batch's
//! result: a failed commit must reach each of them. I/O and SQLite errors are therefore kept as
//! their rendered message plus the facts callers branch on (`DiskFull`, `Poisoned`).

use std::path::PathBuf;

/// Result alias used throughout the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the engine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is empty or longer than [`crate::MAX_KEY_LEN`] bytes.
    #[error("key length {len} is outside 1..={max} bytes")]
    InvalidKey {
        /// Length of the rejected key.
        len: usize,
        /// The largest key the engine accepts.
        max: usize,
    },
    /// The value is longer than the configured maximum.
    #[error("value length {len} exceeds the maximum of {max} bytes")]
    ValueTooLarge {
        /// Length of the rejected value.
        len: usize,
        /// The configured maximum (`Config::max_value`).
        max: usize,
    },
    /// The key does not exist and the operation requires it to.
    #[error("key not found")]
    NotFound,
    /// A write's condition did not hold.
    #[error("{}", condition_failed(current))]
    ConditionFailed {
        /// The record's version when the condition was evaluated (`None`: no record).
        current: Option<crate::Version>,
    },
    /// The operation needs lookups by key, which this index mode does not offer.
    #[error("index mode `none` is append-only: {operation} needs lookups by key")]
    Unsupported {
        /// The refused operation.
        operation: &'static str,
    },
    /// The partition's write queue is full; retry later.
    #[error("partition {partition} is overloaded: its write queue is full")]
    Overloaded {
        /// The partition whose queue is full.
        partition: u32,
    },
    /// A previous commit or fsync failed, or the writer died: this partition refuses writes.
    #[error("partition {partition} is poisoned and refuses writes: {reason}")]
    Poisoned {
        /// The poisoned partition.
        partition: u32,
        /// What failed first.
        reason: String,
    },
    /// The disk (or a file-size limit) is full; the write was rolled back and may be retried.
    #[error("disk full: {0}")]
    DiskFull(String),
    /// The partition has used all 2^32 record ids.
    #[error("partition {partition} has used all of its 2^32 record ids")]
    PartitionFull {
        /// The full partition.
        partition: u32,
    },
    /// An operating-system I/O error.
    #[error("I/O error on {path}: {message}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The rendered error.
        message: String,
    },
    /// An error from SQLite.
    #[error("SQLite error: {0}")]
    Sqlite(String),
    /// A file of ours failed its format checks.
    #[error("corrupt file {path}: {what}")]
    Corrupt {
        /// The corrupt file.
        path: PathBuf,
        /// What check failed.
        what: String,
    },
    /// The data directory's manifest disagrees with what the caller asked for, or is unusable.
    #[error("manifest {path}: {message}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong, in words a user can act on.
        message: String,
    },
    /// Another process has the data directory open.
    #[error(
        "data directory in use: {} holds the lock of {}{}; reach a running server with --url \
         instead of --data, or stop it first",
        path.display(),
        holder.map_or("another shardlite process".to_owned(), |pid| format!("shardlite process {pid}")),
        holder.map_or(String::new(), |pid| format!(" (`ps -p {pid}`)"))
    )]
    InUse {
        /// The directory's lock file.
        path: PathBuf,
        /// The process holding it, as it wrote in the lock file.
        holder: Option<u32>,
    },
    /// The data directory given is not one: a file, or a directory holding other files.
    #[error("{} {why}", path.display())]
    NotADataDirectory {
        /// What was given.
        path: PathBuf,
        /// What it is instead, and what to give.
        why: String,
    },
    /// A partition's write-ahead log is gone and commits were (or may have been) lost with it.
    #[error(
        "write-ahead log {path} is missing: {detail}. Restore the file if you have it; to serve what the \
         database file holds anyway, open once with accept_wal_loss (serve --accept-wal-loss)"
    )]
    WalMissing {
        /// The missing log.
        path: PathBuf,
        /// What was lost, as far as can be told.
        detail: String,
    },
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The store is shutting down or closed.
    #[error("the store is closed")]
    Closed,
    /// A backup or a restore was refused or failed: a destination that is not empty, a backup
    /// that is incomplete or damaged (naming the file), a cancelled backup.
    #[error("{0}")]
    Backup(String),
    /// An import was refused: a duplicate key under `--on-duplicate error`, or an interrupted
    /// import is pending.
    #[error("import refused: {0}")]
    Import(String),
    /// An import was committed and then interrupted: the directory holds part of it, and
    /// opening it would serve that part as if it were all.
    #[error(
        "an import into {dir} was interrupted and is pending: finish it with `shardlite import --data {dir} \
         --resume` (or, to keep only what it applied so far, remove {dir}/import.staging)",
        dir = dir.display()
    )]
    ImportPending {
        /// The data directory.
        dir: PathBuf,
    },
    /// The caller asked the work under way to stop (Ctrl-C), and it stopped where nothing is
    /// half done.
    #[error("stopped as asked")]
    Stopped,
    /// Too few of a partition's copies acknowledged the write in time: it was rolled back here,
    /// and a copy that got it never applies it (docs/cluster.md, "Replicas").
    #[error("not replicated: {0}")]
    Unreplicated(String),
    /// A frame of another node's transactions could not be taken in (malformed, or this store
    /// cannot keep copies).
    #[error("replication: {0}")]
    Replication(String),
    /// Moving a partition between nodes was refused or failed: a damaged transfer, a
    /// partition this node may not take (docs/cluster.md, "Moving a partition").
    #[error("{0}")]
    Move(String),
}

fn condition_failed(current: &Option<crate::Version>) -> String {
    match current {
        Some(version) => format!("the condition does not hold: the record is now at version {version}"),
        None => "the condition does not hold: no record exists for this key".to_owned(),
    }
}

impl Error {
    /// Wraps an `io::Error` with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, err: &std::io::Error) -> Self {
        let path = path.into();
        if is_disk_full(err) {
            return Error::DiskFull(format!("{}: {err}", path.display()));
        }
        Error::Io { path, message: err.to_string() }
    }

    /// Whether this error means the storage could not be written for lack of space.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Error::DiskFull(_))
    }

    /// Whether the write failed without harm to the partition, and may be retried: a full disk
    /// (SQLite rolled back cleanly), or copies that did not acknowledge it.
    pub fn is_retryable_write(&self) -> bool {
        matches!(self, Error::DiskFull(_) | Error::Unreplicated(_))
    }
}

fn is_disk_full(err: &std::io::Error) -> bool {
    matches!(err.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::FileTooLarge)
}

impl From<rusqlite::Error> for Error {
    fn from(err: rusqlite::Error) -> Self {
        use rusqlite::ffi::ErrorCode;
        match err.sqlite_error_code() {
            Some(ErrorCode::DiskFull) => Error::DiskFull(err.to_string()),
            _ => Error::Sqlite(err.to_string()),
        }
    }
}
