//! A partition moving here from another node, taken in by its writer (docs/cluster.md, "Moving
//! a partition"): emptied first (the copy this node may hold from an earlier ownership), then
//! the records inserted with their ids and counters as the old owner had them, then the
//! partition's `next_id` and record count noted durably and its index rebuilt. The node does
//! not own the partition meanwhile, so nothing else reads or writes it here.
//!
//! `meta.log_applied` is set past everything the commit log holds at the end: a transaction the
//! log may still hold for this partition from an earlier ownership is older than the adopted
//! records and must never be replayed onto them.

use std::sync::atomic::Ordering;

use super::PartitionWriter;
use crate::{
    cache::RecordCache, commitlog::CommitLog, config::TxMode, partition::sql, transfer::Moved, Config, Result,
    Synchronous,
};

/// One step of taking a partition in.
#[derive(Debug)]
pub enum Adopt {
    /// Remove every record (the start of a move here, or the end of one that failed).
    Empty,
    /// Insert these records with their ids and counters.
    Records(Vec<Moved>),
    /// Every record is in: note `next_id` and the record count durably, rebuild the index.
    Finish {
        /// The next id the old owner would have given.
        next_id: u64,
        /// Its live records.
        records: u64,
    },
}

impl PartitionWriter {
    /// Runs one step of taking the partition in.
    pub(super) fn adopt(
        &mut self,
        step: Adopt,
        log: Option<&CommitLog>,
        cache: Option<&RecordCache>,
        config: &Config,
    ) -> Result<()> {
        if let Some(err) = self.partition.poison_error() {
            return Err(err);
        }
        match step {
            Adopt::Empty => self.empty(cache),
            Adopt::Records(records) => self.in_transaction(|conn| {
                records.iter().try_for_each(|r| sql::insert(conn, r.id, &r.key, r.counter, &r.value))
            }),
            Adopt::Finish { next_id, records } => self.finish_adoption(next_id, records, log, config),
        }
    }

    /// Removes every record and tombstone; the keys leave the record cache.
    fn empty(&mut self, cache: Option<&RecordCache>) -> Result<()> {
        let mut keys = Vec::new();
        sql::scan_keys(&self.conn, 0, |_, key| keys.push(key.to_vec()))?;
        sql::begin(&self.conn, TxMode::Immediate)?;
        let run = sql::empty_records(&self.conn).and_then(|()| sql::write_meta(&self.conn, 1, 0, None));
        if let Err(err) = run {
            sql::rollback(&self.conn);
            return Err(err);
        }
        if let Some(cache) = cache {
            cache.commit_begins(self.partition.id, keys.iter());
        }
        let committed = sql::commit(&self.conn);
        if let Some(cache) = cache {
            cache.commit_ended(self.partition.id);
        }
        if committed.is_err() {
            sql::rollback(&self.conn);
        }
        committed?;
        self.set_counts(1, 0);
        self.rebuild()
    }

    /// Notes the adopted partition's counts (and the log position) in a commit synced to disk,
    /// which makes every adopted record durable with it; then rebuilds the index.
    fn finish_adoption(&mut self, next_id: u64, records: u64, log: Option<&CommitLog>, config: &Config) -> Result<()> {
        let applied = log.map(CommitLog::end);
        sql::set_synchronous(&self.conn, Synchronous::Full)?;
        let noted = self.in_transaction(|conn| sql::write_meta(conn, next_id, records, applied));
        sql::set_writer_synchronous(&self.conn, config)?;
        noted?;
        if let Some(end) = applied {
            self.partition.applied.store(end, Ordering::Relaxed);
        }
        self.set_counts(next_id, records);
        self.rebuild()
    }

    fn in_transaction(&self, run: impl FnOnce(&rusqlite::Connection) -> Result<()>) -> Result<()> {
        sql::begin(&self.conn, TxMode::Immediate)?;
        match run(&self.conn).and_then(|()| sql::commit(&self.conn)) {
            Ok(()) => Ok(()),
            Err(err) => {
                sql::rollback(&self.conn);
                Err(err)
            }
        }
    }

    fn set_counts(&mut self, next_id: u64, records: u64) {
        self.next_id = next_id;
        self.records = records;
        self.partition.counters.records.store(records, Ordering::Relaxed);
    }
}
