//! One partition: a SQLite database, its compact index, its read pool and its health.
//!
//! [`Partition`] is shared (behind an `Arc`) by the store, its reader callers and its writer
//! thread; the read-write connection itself lives only on the writer thread
//! ([`writer::PartitionWriter`]). Opening a partition is also its recovery: the commit log's
//! transactions its database lacks are replayed ([`replay`]), then the index file is checked,
//! reloaded with the records committed after its watermark, or rebuilt from SQLite.

pub mod check;
pub mod readers;
pub mod replay;
pub mod sql;
pub mod wal;
pub mod writer;

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use rusqlite::Connection;

use crate::{
    commitlog::LoggedTx,
    config::IndexMode,
    index::{entry, HashIndex},
    keyhash::KeyHasher,
    layout::{self, Layout},
    ops::{Record, Version},
    Config, Error, Manifest, Result,
};
use readers::ReadPool;

/// A partition as every thread sees it.
#[derive(Debug)]
pub struct Partition {
    /// Partition number.
    pub id: u32,
    /// The SQLite database file.
    pub db_path: PathBuf,
    /// Its write-ahead log.
    pub wal_path: PathBuf,
    /// How records are found by key.
    pub mode: IndexMode,
    /// The directory's epoch, part of every version this partition shows (set once the
    /// directory is open: an open may start a new one after the partitions).
    epoch: AtomicU64,
    /// The compact index (mode `hash` only).
    pub index: Option<HashIndex>,
    /// Read-only connections for lookups.
    pub readers: ReadPool,
    /// Why writes are refused, once a commit failed or the writer died.
    poison: Mutex<Option<String>>,
    /// Counters for statistics, updated by the writer.
    pub counters: Counters,
    /// How far into the commit log the partition's `meta` says it has applied, as of its last
    /// committed transaction that noted it (what the log's base may promise for it).
    pub applied: AtomicU64,
    /// Pages in the WAL after the last commit (set by SQLite's WAL hook on the writer).
    wal_pages: Arc<AtomicU32>,
    /// A checkpoint is queued for the checkpointer thread.
    pub checkpoint_queued: AtomicBool,
    /// The checkpointer's last checkpoint left frames behind: the writer finishes it.
    pub checkpoint_unfinished: AtomicBool,
}

/// What the commit log holds for one partition at open.
#[derive(Debug, Clone, Copy, Default)]
pub struct PartitionLog<'a> {
    /// Its logged transactions, in log order.
    pub txs: &'a [LoggedTx],
    /// How far its database was known durable at the log's last trim, if the log keeps a base.
    pub base: Option<u64>,
}

/// A partition's running totals.
#[derive(Debug, Default)]
pub struct Counters {
    /// Live records (as of the last commit).
    pub records: AtomicU64,
    /// Transactions committed.
    pub commits: AtomicU64,
    /// Operations committed.
    pub ops: AtomicU64,
    /// Index merges completed.
    pub merges: AtomicU64,
    /// Checkpoints run by the writer.
    pub checkpoints: AtomicU64,
}

impl Partition {
    /// Opens (creating if needed) partition `id`, replays what `log` holds that its database
    /// lacks and recovers its index. Returns the shared partition and the writer state that the
    /// writer thread will own, and whether a loss of durable commits was accepted. Its WAL must
    /// have been checked first ([`wal::check`]); its epoch is set before it serves.
    pub fn open(
        layout: &Layout,
        id: u32,
        config: &Config,
        manifest: &Manifest,
        log: PartitionLog<'_>,
    ) -> Result<(Arc<Self>, writer::PartitionWriter, bool)> {
        let (db_path, hasher) = (layout.db(id), manifest.hasher());
        let mut conn = sql::open_writer(&db_path, config, manifest.index)?;
        let wal_pages = Arc::new(AtomicU32::new(0));
        if config.journal == crate::JournalMode::Wal {
            sql::watch_wal(&mut conn, Arc::clone(&wal_pages))?;
        }
        let Recovered { next_id, records, index, applied, lost } = recover(&conn, layout, id, config, manifest, log)?;
        let partition = std::sync::Arc::new(Self {
            id,
            readers: ReadPool::new(db_path.clone(), config),
            db_path,
            wal_path: layout.wal(id),
            mode: manifest.index,
            epoch: AtomicU64::new(0),
            index,
            poison: Mutex::new(None),
            counters: Counters::default(),
            applied: AtomicU64::new(applied),
            wal_pages,
            checkpoint_queued: AtomicBool::new(false),
            checkpoint_unfinished: AtomicBool::new(false),
        });
        partition.counters.records.store(records, Ordering::Relaxed);
        let writer = writer::PartitionWriter::new(Arc::clone(&partition), conn, hasher, next_id, records);
        Ok((partition, writer, lost))
    }

    /// Reads a record by key through the partition's index and read pool.
    pub fn get(&self, key: &[u8], fingerprint: u32) -> Result<Option<Record>> {
        match (self.mode, &self.index) {
            (IndexMode::Hash, Some(index)) => {
                let mut ids = Vec::with_capacity(2);
                index.candidates(fingerprint, &mut ids)?;
                if ids.is_empty() {
                    return Ok(None);
                }
                self.readers.with(|conn| {
                    for id in ids {
                        if let Some(row) = sql::row_by_id(conn, id)? {
                            if row.key == key {
                                return Ok(Some(self.record(id, row)));
                            }
                        }
                    }
                    Ok(None)
                })
            }
            (IndexMode::Sqlite, _) => {
                self.readers.with(|conn| Ok(sql::row_by_key(conn, key)?.map(|(id, row)| self.record(id, row))))
            }
            _ => Err(Error::Unsupported { operation: "get" }),
        }
    }

    /// Pages in the WAL after the last commit.
    pub fn wal_pages(&self) -> u32 {
        self.wal_pages.load(Ordering::Relaxed)
    }

    /// Sets the directory's epoch (before the partition serves).
    pub fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::Relaxed);
    }

    /// The version of record `id` at `counter`.
    pub fn version(&self, id: u32, counter: u64) -> Version {
        Version { epoch: self.epoch.load(Ordering::Relaxed), id: u64::from(id), counter }
    }

    /// A row as the record callers see.
    fn record(&self, id: u32, row: sql::Row) -> Record {
        Record { version: self.version(id, row.counter), value: row.value }
    }

    /// The reason writes are refused, if they are.
    pub fn poisoned(&self) -> Option<String> {
        self.poison.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Refuses all later writes, keeping the first reason.
    pub fn poison(&self, reason: String) {
        let mut poison = self.poison.lock().unwrap_or_else(|p| p.into_inner());
        if poison.is_none() {
            tracing::error!(partition = self.id, %reason, "partition poisoned: writes refused");
            *poison = Some(reason);
        }
    }

    /// The error later writes get, if poisoned.
    pub fn poison_error(&self) -> Option<Error> {
        self.poisoned().map(|reason| Error::Poisoned { partition: self.id, reason })
    }
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
    let lost = log.base.is_some_and(|base| applied < base);
    if lost {
        let detail = format!(
            "partition {id}'s database has applied the commit log up to position {applied}, but it was durable up \
             to {}: the commits in between were lost with its write-ahead log",
            log.base.unwrap_or_default()
        );
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

/// Opens the index file and brings it up to date with SQLite, or rebuilds it when it is
/// damaged, ahead of SQLite, or so far behind that a rebuild is cheaper (`wal`: the
/// partition's WAL, see [`rebuild_index`]).
pub fn recover_index(
    conn: &Connection,
    path: &std::path::Path,
    wal: &std::path::Path,
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
pub fn rebuild_index(
    conn: &Connection,
    index: &HashIndex,
    hasher: KeyHasher,
    next_id: u64,
    wal: &std::path::Path,
) -> Result<()> {
    layout::sync_file(wal)?;
    let (_, records) = sql::read_meta(conn)?;
    let mut entries = Vec::with_capacity(records as usize);
    sql::scan_keys(conn, 0, |id, key| entries.push(entry(hasher.locate(key).fingerprint, id)))?;
    index.rebuild(entries, next_id - 1)?;
    sql::clear_tombstones(conn, i64::MAX)
}
