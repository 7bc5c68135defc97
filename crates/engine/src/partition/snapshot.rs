//! A partition frozen for a backup: a read transaction on a connection of its own and the index
//! file of the same moment, taken on the partition's writer thread between two rounds of
//! commits ([`take`]), so the two agree exactly: every entry of the file is a record of the
//! snapshot or tombstoned in it (tombstones are only cleared on the writer thread, after the
//! merge that dropped their entries), and every record of the snapshot above the file's
//! watermark is one the backup adds to the index it writes. Taking it costs the writer one
//! `BEGIN` and one read of `meta` (the stall measured in `stalled`); the copy that follows runs
//! on the backup's thread while the writer goes on committing (WAL mode: a reader never blocks
//! the writer, but holds back checkpoints past its snapshot until it ends).

use std::{
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
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").field("next_id", &self.next_id).field("records", &self.records).finish()
    }
}

/// Takes the snapshot of `partition` through `conn` (a read connection of its own). Call on the
/// partition's writer thread, between rounds: nothing commits meanwhile.
pub fn take(partition: &Partition, conn: Connection) -> Result<Snapshot> {
    let started = Instant::now();
    let index_file = partition.index.as_ref().map(|index| index.file());
    let (next_id, records) = sql::begin_snapshot(&conn)?;
    Ok(Snapshot { conn, index_file, next_id, records, stalled: started.elapsed() })
}
