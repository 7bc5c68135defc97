//! A partition moving here from another node, taken in by its writer one [`Adopt`] step at a time
//! (docs/cluster.md, "Moving a partition"): emptied first, then the copy's records inserted with
//! their ids and counters, the counts noted durably and the index rebuilt; then each round of
//! changes applied by id. Nothing else reads or writes the partition meanwhile: this node does not
//! own it yet. Emptying is also how the old owner drops its stale copy.
//!
//! The partition keeps the epoch its versions carried on the old owner, so every tag given there
//! still names the same state here. `meta.log_applied` is set past the whole commit log, which may
//! hold older transactions of this partition that must never be replayed onto the new records.

use std::sync::atomic::Ordering;

use super::PartitionWriter;
use crate::{
    cache::RecordCache,
    commitlog::CommitLog,
    config::{IndexMode, TxMode},
    index::entry,
    manifest::epoch_now,
    partition::{sql, Epoch},
    transfer::Moved,
    Config, Result, Synchronous,
};

/// One step of taking a partition in.
#[derive(Debug)]
pub enum Adopt {
    /// Remove every record (the start of a move here, or the end of one that failed).
    Empty,
    /// Insert these records of the copy with their ids and counters.
    Records(Vec<Moved>),
    /// Apply these changes of a round of catching up (deletions first).
    Changes(Vec<Moved>),
    /// A stream is in whole: note `next_id`, the record count and the epoch durably; after the
    /// copy, rebuild the index (the rounds of changes keep it up to date themselves).
    Finish {
        /// The next id the old owner would have given.
        next_id: u64,
        /// Its live records.
        records: u64,
        /// Rebuild the index from the records (after the copy).
        rebuild: bool,
        /// The epoch its versions carried on the old owner, which they keep here; 0: a copy
        /// that may lack states shown before (a restored replica), given a new epoch.
        epoch: u64,
    },
    /// A copy kept for another node becomes this node's (a failover promoted it): note its
    /// counts and the epoch its versions carried on the dead owner durably (0: unknown, a new
    /// one).
    Keep {
        /// The dead owner's epoch of the partition.
        epoch: u64,
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
            // Noted durably past the log's end, so that no transaction the log holds for the
            // partition is ever replayed onto the emptied partition.
            Adopt::Empty => self.empty(cache).and_then(|()| self.finish_adoption(1, 0, None, log, config)),
            Adopt::Records(records) => self.in_transaction(|conn| {
                records.iter().try_for_each(|r| sql::insert(conn, r.id, &r.key, r.counter, &r.value))
            }),
            Adopt::Changes(changes) => self.apply_changes(&changes),
            Adopt::Keep { epoch } => {
                let kept = Epoch {
                    kept: if epoch == 0 { epoch_now() } else { epoch },
                    directory: self.partition.directory_epoch(),
                };
                let (next_id, records) = (self.next_id, self.records);
                self.finish_adoption(next_id, records, Some(kept), log, config)
            }
            Adopt::Finish { next_id, records, rebuild, epoch } => {
                let directory = self.partition.directory_epoch();
                let kept = match epoch {
                    0 => Epoch { kept: epoch_now(), directory },
                    kept => Epoch { kept, directory },
                };
                self.finish_adoption(next_id, records, Some(kept), log, config)?;
                match rebuild {
                    true => self.rebuild(),
                    false => Ok(()),
                }
            }
        }
    }

    /// Removes every record and tombstone; the keys leave the record cache (as they are read,
    /// so that a large partition's keys are never all in memory at once).
    fn empty(&mut self, cache: Option<&RecordCache>) -> Result<()> {
        sql::begin(&self.conn, TxMode::Immediate)?;
        let forgotten = match cache {
            Some(cache) => {
                cache.commit_begins(self.partition.id, std::iter::empty());
                sql::scan_keys(&self.conn, 0, |_, key| cache.commit_begins(self.partition.id, [&key.to_vec()]))
            }
            None => Ok(()),
        };
        let run = forgotten
            .and_then(|()| sql::empty_records(&self.conn))
            .and_then(|()| sql::write_meta(&self.conn, 1, 0, None));
        if let Err(err) = run {
            sql::rollback(&self.conn);
            if let Some(cache) = cache {
                cache.commit_ended(self.partition.id);
            }
            return Err(err);
        }
        let committed = self.partition.commit(&self.conn);
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

    /// Applies a round of changes in one transaction, the index as a commit keeps it: the
    /// deletions first, so that a key deleted and written again (a new id) never has two rows.
    /// A round split over several transactions keeps that order too: a round is in id order,
    /// and a key's new id is always above its old one.
    fn apply_changes(&mut self, changes: &[Moved]) -> Result<()> {
        let hashed = self.partition.mode == IndexMode::Hash;
        let floor = self.partition.index.as_ref().map_or(0, |i| i.tombstone_floor());
        let (mut added, mut removed) = (Vec::new(), Vec::new());
        let (deletions, writes): (Vec<&Moved>, Vec<&Moved>) = changes.iter().partition(|c| c.counter == 0);
        let hasher = self.hasher;
        self.in_transaction(|conn| {
            for gone in deletions {
                let Some((key, _)) = sql::key_counter_by_id(conn, gone.id)? else { continue };
                let tombstone = hashed && u64::from(gone.id) <= floor;
                sql::delete(conn, gone.id, tombstone)?;
                if hashed && !tombstone {
                    removed.push(entry(hasher.locate(&key).fingerprint, gone.id));
                }
            }
            for r in writes {
                if sql::key_counter_by_id(conn, r.id)?.is_some() {
                    sql::update(conn, r.id, r.counter, &r.value)?;
                    continue;
                }
                sql::insert(conn, r.id, &r.key, r.counter, &r.value)?;
                if hashed {
                    added.push(entry(hasher.locate(&r.key).fingerprint, r.id));
                }
            }
            Ok(())
        })?;
        if let Some(index) = &self.partition.index {
            let highest = changes.iter().map(|c| u64::from(c.id)).max().unwrap_or(0);
            index.apply(&added, &removed, highest);
        }
        Ok(())
    }

    /// Notes the adopted partition's counts, the epoch it keeps (`None`: the directory's) and
    /// the log position in a commit synced to disk, which makes every adopted record durable
    /// with it.
    fn finish_adoption(
        &mut self,
        next_id: u64,
        records: u64,
        kept: Option<Epoch>,
        log: Option<&CommitLog>,
        config: &Config,
    ) -> Result<()> {
        let applied = log.map(CommitLog::end);
        sql::set_synchronous(&self.conn, Synchronous::Full)?;
        let noted = self.in_transaction(|conn| {
            sql::write_meta(conn, next_id, records, applied)?;
            sql::keep_epoch(conn, kept)
        });
        sql::set_writer_synchronous(&self.conn, config)?;
        noted?;
        if let Some(end) = applied {
            self.partition.applied.store(end, Ordering::Relaxed);
        }
        self.partition.set_epoch(self.partition.directory_epoch(), kept);
        self.set_counts(next_id, records);
        Ok(())
    }

    fn in_transaction(&self, run: impl FnOnce(&rusqlite::Connection) -> Result<()>) -> Result<()> {
        sql::begin(&self.conn, TxMode::Immediate)?;
        match run(&self.conn).and_then(|()| self.partition.commit(&self.conn)) {
            Ok(()) => Ok(()),
            Err(err) => {
                sql::rollback(&self.conn);
                Err(err)
            }
        }
    }

    /// The counts after a commit that noted them in `meta`.
    pub(super) fn set_counts(&mut self, next_id: u64, records: u64) {
        self.next_id = next_id;
        self.records = records;
        self.noted = (next_id, records);
        self.partition.next_id.store(next_id, Ordering::Relaxed);
        self.partition.counters.records.store(records, Ordering::Relaxed);
    }
}
