//! A partition's recovery at open: the commit log's transactions its database lacks are
//! replayed ([`super::replay`]), then the index file is checked, reloaded with the records
//! committed after its watermark, or rebuilt from SQLite. The one recovery path, for serving
//! and for the bulk loader.

use std::path::Path;

use rusqlite::Connection;

use super::{replay, sql};
use crate::{
    commitlog::{Durable, LoggedTx},
    config::IndexMode,
    index::{entry, HashIndex},
    keyhash::KeyHasher,
    layout::{self, Layout},
    Config, Error, Manifest, Result,
};

/// What the commit log holds for one partition at open.
#[derive(Debug, Clone, Copy, Default)]
pub struct PartitionLog<'a> {
    /// Its logged transactions, in log order.
    pub txs: &'a [LoggedTx],
    /// How far its database was known durable at the log's last trim, if the log keeps a base.
    pub base: Option<Durable>,
}

/// What a partition's writer starts from: the id counter, the record count and the index.
pub struct Recovered {
    /// The next record id to assign.
    pub next_id: u64,
    /// Live records.
    pub records: u64,
    /// The compact index, brought up to date (mode `hash` only).
    pub index: Option<HashIndex>,
    /// How far into the commit log the database has applied.
    pub applied: u64,
    /// Commits known durable were missing and their loss was accepted (`accept_wal_loss`).
    pub lost: bool,
}

impl Recovered {
    /// How far the database is, for the log's base.
    pub fn durable(&self) -> Durable {
        Durable { applied: self.applied, next_id: self.next_id }
    }
}

/// Replays what the commit log holds that partition `id`'s database lacks, then reads its
/// counters through its writer connection and recovers its index: the one recovery path, for
/// serving and for the bulk loader. A database older than the log's base for it lost commits
/// with its WAL: refused, unless `accept_wal_loss`.
pub fn recover(
    conn: &Connection,
    layout: &Layout,
    id: u32,
    config: &Config,
    manifest: &Manifest,
    log: PartitionLog<'_>,
) -> Result<Recovered> {
    let mut applied = sql::log_applied(conn)?;
    let loss = match log.base {
        Some(base) => loss(conn, id, applied, base)?,
        None => None,
    };
    let lost = loss.is_some();
    if let Some(detail) = loss {
        if !config.accept_wal_loss {
            return Err(Error::WalMissing { path: layout.wal(id), detail });
        }
        tracing::error!(partition = id, %detail, "accepted: serving what the database and the log still hold");
    }
    if !log.txs.is_empty() {
        let floor = match manifest.index {
            IndexMode::Hash => HashIndex::open(&layout.index(id), u32::from(manifest.fingerprint_bits))
                .map_or(0, |index| index.watermark()),
            IndexMode::Sqlite | IndexMode::None => 0,
        };
        let (now, replayed) = replay::replay(conn, log.txs, applied, manifest.index, floor)?;
        if replayed > 0 {
            tracing::info!(partition = id, transactions = replayed, "replayed from the commit log");
        }
        applied = now;
    }
    let (next_id, records) = sql::read_meta(conn)?;
    let index = match manifest.index {
        IndexMode::Hash => {
            let bits = u32::from(manifest.fingerprint_bits);
            Some(recover_index(conn, &layout.index(id), &layout.wal(id), config, bits, manifest.hasher(), next_id)?)
        }
        IndexMode::Sqlite | IndexMode::None => None,
    };
    Ok(Recovered { next_id, records, index, applied, lost })
}

/// What partition `id`'s database lost, if it is older than the log's `base` for it: a noted
/// position before the base's, or a next id short of it (inserts since the last note show only
/// in the rows); `applied`: its noted position.
fn loss(conn: &Connection, id: u32, applied: u64, base: Durable) -> Result<Option<String>> {
    let (held_next_id, _) = sql::read_meta(conn)?;
    let older = applied < base.applied || held_next_id < base.next_id;
    Ok(older.then(|| {
        format!(
            "partition {id}'s database has applied the commit log up to position {applied} (next record id \
             {held_next_id}), but it was durable up to {} (next record id {}): the commits in between were lost \
             with its write-ahead log",
            base.applied, base.next_id
        )
    }))
}

/// Opens the index file and brings it up to date with SQLite, or rebuilds it when it is
/// damaged, ahead of SQLite, or so far behind that a rebuild is cheaper (`wal`: the
/// partition's WAL, see [`rebuild_index`]).
pub fn recover_index(
    conn: &Connection,
    path: &Path,
    wal: &Path,
    config: &Config,
    bits: u32,
    hasher: KeyHasher,
    next_id: u64,
) -> Result<HashIndex> {
    let last_id = next_id - 1;
    let reason = match HashIndex::open(path, bits) {
        Ok(index) if index.watermark() > last_id => {
            format!("index watermark {} is ahead of SQLite ({last_id})", index.watermark())
        }
        Ok(index) if last_id - index.watermark() > config.merge_threshold as u64 => {
            "index far behind SQLite".to_owned()
        }
        Ok(index) => {
            let mut recent = Vec::new();
            sql::scan_keys(conn, index.watermark(), |id, key| recent.push(entry(hasher.locate(key).fingerprint, id)))?;
            index.apply(&recent, &[], last_id);
            return Ok(index);
        }
        Err(Error::Corrupt { what, .. }) => what,
        Err(e) => return Err(e),
    };
    tracing::warn!(path = %path.display(), %reason, "rebuilding the index from SQLite");
    let index = HashIndex::empty(path, bits);
    rebuild_index(conn, &index, hasher, next_id, wal)?;
    Ok(index)
}

/// Rebuilds `index` from every record in SQLite and forgets all tombstones. The caller must be
/// the partition's only writer (the writer thread, or recovery before it starts).
///
/// The new file is durable at once and knows nothing of records SQLite shows deleted, so those
/// deletes must be durable first: the partition's WAL (`wal`) is synced before. Without that, a
/// power cut could undo a delete the file already forgot: at `normal`, a delete of the session a
/// kill ended; with the commit log, one replayed from its unflushed tail at open (found by the
/// power-loss test over several sessions: the record back, with no index entry).
pub fn rebuild_index(conn: &Connection, index: &HashIndex, hasher: KeyHasher, next_id: u64, wal: &Path) -> Result<()> {
    layout::sync_file(wal)?;
    let (_, records) = sql::read_meta(conn)?;
    let mut entries = Vec::with_capacity(records as usize);
    sql::scan_keys(conn, 0, |id, key| entries.push(entry(hasher.locate(key).fingerprint, id)))?;
    index.rebuild(entries, next_id - 1)?;
    sql::clear_tombstones(conn, i64::MAX)
}
