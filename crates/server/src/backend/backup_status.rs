//! What a backend says of its backup: [`BackupStatus`], as `GET /admin/backup` answers it and
//! `shardlite backup` reads it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use shardlite_engine::backup::ProgressReport;

/// Where a backup is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackupState {
    /// No backup was started since the server started.
    Idle,
    /// Copying.
    Running,
    /// Written completely.
    Done,
    /// Failed or cancelled: nothing was left at the destination.
    Failed,
}

/// A backup's status, as `/admin/backup` answers it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackupStatus {
    /// Where it is.
    pub state: BackupState,
    /// Its destination.
    pub to: Option<PathBuf>,
    /// Seconds since it started (until it ended, once it has).
    pub seconds: f64,
    /// Bytes and partitions so far.
    pub progress: ProgressReport,
    /// What it wrote, once done.
    pub result: Option<BackupResult>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// What a finished backup wrote.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackupResult {
    /// Records in all partitions' snapshots.
    pub records: u64,
    /// Partitions.
    pub partitions: usize,
    /// Bytes written.
    pub bytes: u64,
    /// The longest a partition's writer was held up by its snapshot, microseconds.
    pub longest_stall_us: u64,
}
