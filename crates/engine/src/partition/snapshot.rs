//! A partition frozen for a backup: a read transaction on a connection of its own and the index
//! file of the same moment, taken on the partition's writer thread between two rounds of
//! commits ([`take`]), so the two agree exactly.
//!
//! Just before, the writer checkpoints. If that copied the whole WAL, the database file is itself
//! the snapshot, unchanging while the read transaction lasts, and the backup copies it as a file
//! ([`Snapshot::file_is_snapshot`]); otherwise it reads it through SQLite's backup API. The
//! writer's stall is measured in `stalled`. A snapshot holds checkpoints back until it ends.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use rusqlite::Connection;

use super::{sql, Partition};
use crate::{index::MainIndex, Result};

/// One partition as of one moment.
pub struct Snapshot {
    /// A read-only connection inside a read transaction: the partition as of the snapshot.
    pub conn: Connection,
    /// The index file as of the snapshot (`None`: the partition has no compact index).
    pub index_file: Option<Arc<MainIndex>>,
    /// The next id the writer was going to assign.
    pub next_id: u64,
    /// Live records.
    pub records: u64,
    /// How long the writer was held up taking it.
    pub stalled: Duration,
    /// The partition's database file.
    pub db_path: PathBuf,
    /// The database file alone is the snapshot and stays unchanged while `conn`'s transaction
    /// lasts: it may be copied as a file.
    pub file_is_snapshot: bool,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").field("next_id", &self.next_id).field("records", &self.records).finish()
    }
}

/// Takes the snapshot of `partition` through `conn` (a read connection of its own), after a
/// checkpoint through `writer` (the writer's connection). Call on the partition's writer
/// thread, between rounds: nothing commits meanwhile.
pub fn take(partition: &Partition, writer: &Connection, conn: Connection) -> Result<Snapshot> {
    let started = Instant::now();
    let file_is_snapshot = partition.checkpoint_passive(writer)?;
    let index_file = partition.index.as_ref().map(|index| index.file());
    let (next_id, records) = sql::begin_snapshot(&conn)?;
    Ok(Snapshot {
        conn,
        index_file,
        next_id,
        records,
        stalled: started.elapsed(),
        db_path: partition.db_path.clone(),
        file_is_snapshot,
    })
}
