//! Compaction of one partition: its SQLite database rewritten without the space deleted records
//! left behind ([`run`]), on the partition's writer thread between two rounds of commits.
//!
//! `VACUUM` copies every table into a new database, full pages only, and keeps every record's id
//! (`records`' and `tombstones`' `INTEGER PRIMARY KEY` is the rowid, which it preserves), so
//! versions and the compact index stay as they were. In WAL mode the rewritten pages go through
//! the WAL, so the writer checkpoints right after: `TRUNCATE`, waiting at most [`CLOSE_WAIT`] for
//! readers (with Litestream, `PASSIVE`). Meanwhile writes to the partitions of that writer thread
//! wait: [`PartitionCompaction::stalled_us`].

use std::time::Instant;

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use super::{sql, Partition};
use crate::{checkpointer::CLOSE_WAIT, Config, Result};

/// What compacting one partition did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionCompaction {
    /// The partition.
    pub partition: u32,
    /// Bytes of its database file and WAL before.
    pub bytes_before: u64,
    /// Bytes of its database file and WAL after.
    pub bytes_after: u64,
    /// Pages on the database's free list before (wholly unused pages).
    pub free_pages_before: u64,
    /// How long the partition's writer thread was held up, microseconds.
    pub stalled_us: u64,
    /// WAL frames the checkpoint after the `VACUUM` could not copy yet (a reader held them);
    /// until they are copied the database file keeps its old size.
    pub frames_left: u64,
}

/// What compacting every partition did (what `POST /admin/compact` answers).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactReport {
    /// Bytes of the databases and WALs before, all partitions.
    pub bytes_before: u64,
    /// Bytes of the databases and WALs after, all partitions.
    pub bytes_after: u64,
    /// The longest a writer thread was held up by one partition, microseconds.
    pub longest_stall_us: u64,
    /// Each partition's compaction.
    pub partitions: Vec<PartitionCompaction>,
}

impl CompactReport {
    /// The report of these partitions' compactions.
    pub fn of(partitions: Vec<PartitionCompaction>) -> Self {
        Self {
            bytes_before: partitions.iter().map(|p| p.bytes_before).sum(),
            bytes_after: partitions.iter().map(|p| p.bytes_after).sum(),
            longest_stall_us: partitions.iter().map(|p| p.stalled_us).max().unwrap_or(0),
            partitions,
        }
    }
}

/// Compacts `partition` through its writer's connection `conn`. Call on the partition's
/// writer thread, between rounds (no transaction open).
pub fn run(partition: &Partition, conn: &Connection, config: &Config) -> Result<PartitionCompaction> {
    let started = Instant::now();
    let bytes_before = files_size(partition);
    let free_pages_before = sql::free_pages(conn)?;
    sql::vacuum(conn)?;
    let done = partition.checkpoint_at_close(conn, !config.litestream, CLOSE_WAIT)?;
    let stalled_us = started.elapsed().as_micros() as u64;
    Ok(PartitionCompaction {
        partition: partition.id,
        bytes_before,
        bytes_after: files_size(partition),
        free_pages_before,
        stalled_us,
        frames_left: done.frames_left() as u64,
    })
}

/// Bytes of the partition's database file and WAL.
fn files_size(partition: &Partition) -> u64 {
    let size = |path: &std::path::Path| std::fs::metadata(path).map_or(0, |m| m.len());
    size(&partition.db_path) + size(&partition.wal_path)
}
