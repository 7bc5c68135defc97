//! A partition's copy kept here for the node that owns it (docs/cluster.md, "Replicas"): the
//! owner's transactions, received and made durable in this node's commit log, applied by the
//! partition's writer as the owner's writer applied them — same ids, counters, values, `next_id`
//! and record count — keeping the index and the record cache as a commit does. `meta.log_applied`
//! moves past each transaction's record in this node's log, so an open replays what the copy
//! lacks exactly as it does for the node's own writes.
//!
//! Applying a transaction the copy holds already changes nothing (as replay): an insert below
//! `next_id` is there, an update not above the record's counter is older than what it holds, a
//! delete of an absent record is done. A copy taken from a snapshot may so get transactions the
//! snapshot has.

use std::sync::atomic::Ordering;

use super::PartitionWriter;
use crate::{
    cache::RecordCache,
    commitlog::{Effect, LoggedTx},
    config::{IndexMode, TxMode},
    index::entry,
    partition::sql,
    Error, Result,
};

/// One of the owner's transactions as this node logged it.
#[derive(Debug)]
pub struct Replicated {
    /// The transaction, as the owner logged it.
    pub tx: LoggedTx,
    /// Where its record ends in this node's commit log.
    pub local_end: u64,
}

/// What a transaction did to the index and the record cache.
#[derive(Default)]
struct Touched {
    keys: Vec<Vec<u8>>,
    added: Vec<u64>,
    removed: Vec<u64>,
}

impl PartitionWriter {
    /// Applies `txs` (the owner's, in its log order) in one SQLite transaction.
    pub(super) fn apply_replicated(&mut self, txs: &[Replicated], cache: Option<&RecordCache>) -> Result<()> {
        if let Some(err) = self.partition.poison_error() {
            return Err(err);
        }
        let Some(last) = txs.last() else { return Ok(()) };
        let (next_id, records) = (last.tx.next_id, last.tx.records);
        sql::begin(&self.conn, TxMode::Immediate)?;
        let mut touched = Touched::default();
        let mut held_next_id = self.next_id;
        let run = txs
            .iter()
            .try_for_each(|r| {
                self.apply_tx(&r.tx, held_next_id, &mut touched)?;
                held_next_id = r.tx.next_id;
                Ok(())
            })
            .and_then(|()| {
                let applied = self.partition.applied.load(Ordering::Relaxed).max(last.local_end);
                sql::write_meta(&self.conn, next_id, records, Some(applied))
            });
        if let Err(err) = run {
            sql::rollback(&self.conn);
            return Err(err);
        }
        if let Some(cache) = cache {
            cache.commit_begins(self.partition.id, touched.keys.iter());
        }
        let committed = self.partition.commit(&self.conn);
        if let Some(cache) = cache {
            cache.commit_ended(self.partition.id);
        }
        if let Err(err) = committed {
            sql::rollback(&self.conn);
            return Err(err);
        }
        if let Some(index) = &self.partition.index {
            index.apply(&touched.added, &touched.removed, next_id.saturating_sub(1));
        }
        self.set_counts(next_id, records);
        self.partition.applied.fetch_max(last.local_end, Ordering::Relaxed);
        Ok(())
    }

    /// One transaction's effects, in order, but those the copy holds already (module doc).
    fn apply_tx(&self, tx: &LoggedTx, held_next_id: u64, touched: &mut Touched) -> Result<()> {
        let hashed = self.partition.mode == IndexMode::Hash;
        let floor = self.partition.index.as_ref().map_or(0, |i| i.tombstone_floor());
        for effect in &tx.effects {
            match effect {
                Effect::Insert { id, counter, key, value } => {
                    if u64::from(*id) < held_next_id {
                        continue;
                    }
                    sql::insert(&self.conn, *id, key, *counter, value)?;
                    if hashed {
                        touched.added.push(entry(self.hasher.locate(key).fingerprint, *id));
                    }
                    touched.keys.push(key.clone());
                }
                Effect::Update { id, counter, value } => {
                    let (key, held) = self.held(*id)?;
                    if *counter <= held {
                        continue;
                    }
                    sql::update(&self.conn, *id, *counter, value)?;
                    touched.keys.push(key);
                }
                Effect::Delete { id } => {
                    let Some((key, _)) = sql::key_counter_by_id(&self.conn, *id)? else { continue };
                    let tombstone = hashed && u64::from(*id) <= floor;
                    sql::delete(&self.conn, *id, tombstone)?;
                    if hashed && !tombstone {
                        touched.removed.push(entry(self.hasher.locate(&key).fingerprint, *id));
                    }
                    touched.keys.push(key);
                }
            }
        }
        Ok(())
    }

    /// The key and counter of record `id`, which the copy must hold: an update of a record it
    /// lacks means the copy is not the owner's.
    fn held(&self, id: u32) -> Result<(Vec<u8>, u64)> {
        sql::key_counter_by_id(&self.conn, id)?.ok_or_else(|| Error::Corrupt {
            path: self.partition.db_path.clone(),
            what: format!("the owner changed record {id}, which this copy lacks: the copy differs from the owner's"),
        })
    }
}
