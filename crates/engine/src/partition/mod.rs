//! One partition: a SQLite database, its compact index, its read pool and its health.
//!
//! [`Partition`] is shared (behind an `Arc`) by the store, its reader callers and its writer
//! thread; the read-write connection itself lives only on the writer thread
//! ([`writer::PartitionWriter`]). Opening a partition is also its recovery ([`recovery`]).
//!
//! - [`sql`]: every SQL statement and PRAGMA; [`readers`]: the pool of read connections, which
//!   keep read transactions while the writer's [`commits`] allow
//! - [`writer`]: writer threads and group commit
//! - [`wal`], [`recovery`], [`replay`]: at open, the WAL checked, the commit log replayed, the index caught up
//! - [`check`], [`compact`], [`snapshot`]: work run on the writer thread between two rounds
//! - [`fresh`]: a partition built anew by an import; [`departure`]: a partition leaving this node
//! - [`held`]: writes answered whose transaction has not committed yet

pub mod check;
pub mod commits;
pub mod compact;
pub mod departure;
pub mod fresh;
pub mod held;
pub mod readers;
pub mod recovery;
pub mod replay;
pub mod snapshot;
pub mod sql;
pub mod wal;
pub mod writer;

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use rusqlite::Connection;

use crate::{
    commitlog::Durable,
    config::IndexMode,
    index::HashIndex,
    layout::Layout,
    ops::{Record, Version},
    Config, Error, Manifest, Result,
};
use commits::Commits;
use departure::Departure;
use held::Held;
use readers::ReadPool;
use recovery::{recover, PartitionLog, Recovered};

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
    /// The epoch of every version this partition shows: the directory's, or the one it kept
    /// when it moved here ([`Epoch`]); set once the directory is open (an open may start a new
    /// one after the partitions).
    epoch: AtomicU64,
    /// The directory's epoch.
    directory_epoch: AtomicU64,
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
    /// The next record id as of its last committed transaction (what the log's base may
    /// promise for it: `meta` may not note it, but the rows show it).
    pub next_id: AtomicU64,
    /// Pages in the WAL after the last commit (set by SQLite's WAL hook on the writer).
    wal_pages: Arc<AtomicU32>,
    /// A checkpoint is queued for the checkpointer thread.
    pub checkpoint_queued: AtomicBool,
    /// The checkpointer's last checkpoint left frames behind: the writer finishes it.
    pub checkpoint_unfinished: AtomicBool,
    /// WAL pages past which a long read waits for the WAL to start over ([`Self::long_read`]);
    /// 0: never (no WAL of ours to bound: rollback journal, or Litestream checkpoints).
    long_read_bound: u32,
    /// Long reads under way ([`Self::long_read`]).
    long_reads: AtomicU32,
    /// Whether a move is taking the partition away, and what changed meanwhile.
    pub departure: Departure,
    /// Writes answered whose transaction has not committed yet: reads by key ask here first.
    pub held: Held,
}

/// A long read under way: counted until dropped.
#[derive(Debug)]
pub struct LongRead<'p>(&'p Partition);

impl Drop for LongRead<'_> {
    fn drop(&mut self) {
        self.0.long_reads.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long a long read waits at most for the WAL to start over once no other is under way.
const LONG_READ_WAIT: Duration = Duration::from_secs(1);
/// A partition with no commit for this long is not being written: its WAL cannot grow.
const WRITES_PAUSED: Duration = Duration::from_millis(20);
/// How often a waiting long read looks at the WAL again.
const LONG_READ_POLL: Duration = Duration::from_millis(1);
/// The WAL size, in checkpoint thresholds, past which a long read waits.
const LONG_READ_BOUND: u32 = 4;

/// What an open hands to the partition's writer thread.
#[derive(Debug)]
pub struct WriterStart {
    /// The read-write connection.
    pub conn: Connection,
    /// The next record id to assign.
    pub next_id: u64,
    /// Live records.
    pub records: u64,
    /// Commits known durable were missing and their loss was accepted (`accept_wal_loss`).
    pub lost: bool,
    /// The epoch it kept when it moved here, if its `meta` holds one.
    pub epoch: Option<Epoch>,
}

/// An epoch a partition kept when it moved here from another node, as its `meta` holds it:
/// its versions carry it for as long as the directory stays at the epoch it had then. Once the
/// directory starts a new one (states it showed may be lost), the partition takes that one too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch {
    /// The epoch the partition's versions carry.
    pub kept: u64,
    /// The directory's epoch when it was kept.
    pub directory: u64,
}

impl Epoch {
    /// The epoch a partition shows: the one it kept while the directory is still at `directory`.
    pub fn shown(kept: Option<Epoch>, directory: u64) -> u64 {
        kept.filter(|k| k.directory == directory).map_or(directory, |k| k.kept)
    }
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
    /// lacks and recovers its index. Returns the shared partition and what its writer thread
    /// takes over. Its WAL must have been checked first ([`wal::check`]); its epoch is set before
    /// it serves.
    pub fn open(
        layout: &Layout,
        id: u32,
        config: &Config,
        manifest: &Manifest,
        log: PartitionLog<'_>,
    ) -> Result<(Arc<Self>, WriterStart)> {
        let db_path = layout.db(id);
        let mut conn = sql::open_writer(&db_path, config, manifest.index)?;
        let wal_pages = Arc::new(AtomicU32::new(0));
        let commits = (config.journal == crate::JournalMode::Wal).then(|| Arc::new(Commits::default()));
        if let Some(commits) = &commits {
            sql::watch_wal(&mut conn, Arc::clone(&wal_pages), Arc::clone(commits))?;
        }
        let Recovered { next_id, records, index, applied, lost } = recover(&conn, layout, id, config, manifest, log)?;
        if let Some(commits) = &commits {
            // Recovery's commits have all returned, also one that wrote no frame.
            commits.settle();
        }
        let partition = std::sync::Arc::new(Self {
            id,
            // With Litestream no read transaction is kept: its checkpoints, which know nothing of
            // ours, would wait for one (`ReadPool`).
            readers: ReadPool::new(db_path.clone(), config, commits.filter(|_| !config.litestream)),
            db_path,
            wal_path: layout.wal(id),
            mode: manifest.index,
            epoch: AtomicU64::new(0),
            directory_epoch: AtomicU64::new(0),
            index,
            poison: Mutex::new(None),
            counters: Counters::default(),
            applied: AtomicU64::new(applied),
            next_id: AtomicU64::new(next_id),
            wal_pages,
            checkpoint_queued: AtomicBool::new(false),
            checkpoint_unfinished: AtomicBool::new(false),
            // Without Litestream the checkpoint threshold is `checkpoint_pages` itself.
            long_read_bound: match config.journal == crate::JournalMode::Wal && !config.litestream {
                true => config.checkpoint_pages.max(1).saturating_mul(LONG_READ_BOUND),
                false => 0,
            },
            long_reads: AtomicU32::new(0),
            departure: Departure::default(),
            held: Held::default(),
        });
        partition.counters.records.store(records, Ordering::Relaxed);
        let epoch = sql::kept_epoch(&conn)?;
        Ok((partition, WriterStart { conn, next_id, records, lost, epoch }))
    }

    /// The record of `key` as a held write left it (`Some(None)`: deleted), if one did
    /// ([`Held`]).
    pub fn held_record(&self, key: &[u8]) -> Option<Option<Record>> {
        let held = self.held.get(key)?;
        Some(held.map(|(id, counter, value)| Record { version: self.version(id, counter), value }))
    }

    /// `COMMIT`s the writer's transaction on `conn` (the partition's writer connection), then
    /// tells the read pool that the commit has taken place.
    pub fn commit(&self, conn: &Connection) -> Result<()> {
        let committed = sql::commit(conn);
        self.readers.commit_returned();
        committed
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
                self.readers.lookup(|conn| {
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
                self.readers.lookup(|conn| Ok(sql::row_by_key(conn, key)?.map(|(id, row)| self.record(id, row))))
            }
            _ => Err(Error::Unsupported { operation: "get" }),
        }
    }

    /// A PASSIVE checkpoint of the partition through `conn` ([`sql::checkpoint_passive`]), the
    /// lookup connections' read transactions ended first so that it can copy every frame
    /// ([`ReadPool::end_idle_reads`]). Every checkpoint of a serving partition comes here or
    /// to [`Partition::checkpoint_at_close`].
    pub fn checkpoint_passive(&self, conn: &Connection) -> Result<bool> {
        self.readers.end_idle_reads();
        sql::checkpoint_passive(conn)
    }

    /// A checkpoint through `conn` waiting at most `wait` ([`sql::checkpoint_at_close`]), the
    /// lookup connections' read transactions ended first.
    pub fn checkpoint_at_close(&self, conn: &Connection, truncate: bool, wait: Duration) -> Result<sql::Checkpointed> {
        self.readers.end_idle_reads();
        sql::checkpoint_at_close(conn, truncate, wait)
    }

    /// Pages in the WAL after the last commit.
    pub fn wal_pages(&self) -> u32 {
        self.wal_pages.load(Ordering::Relaxed)
    }

    /// Call before a long read transaction (an export), and hold what it returns until the
    /// transaction ends: while the WAL is past its bound, waits for the long reads under way to
    /// end and then, while the partition is being written, at most [`LONG_READ_WAIT`] more for
    /// the WAL to start over.
    ///
    /// A checkpoint copies WAL frames only up to the oldest reader's snapshot, and the writer
    /// starts the WAL over only once every frame is copied and no reader holds any: long reads
    /// following each other so that one is always under way (exports on two connections) would
    /// let the WAL grow without end (tested: 48 MiB against a 64 KiB threshold). Held here, a
    /// new one lets the running ones end, the checkpoint finish and the writer restart the WAL
    /// first; so the WAL grows by at most what is committed during one long read.
    pub fn long_read(&self) -> LongRead<'_> {
        if self.long_read_bound > 0 {
            self.await_wal_restart();
        }
        self.long_reads.fetch_add(1, Ordering::AcqRel);
        LongRead(self)
    }

    fn await_wal_restart(&self) {
        let mut commits = self.counters.commits.load(Ordering::Relaxed);
        let (mut alone, mut written) = (Instant::now(), Instant::now());
        while self.wal_pages() >= self.long_read_bound {
            std::thread::sleep(LONG_READ_POLL);
            if self.long_reads.load(Ordering::Acquire) > 0 {
                alone = Instant::now();
                continue;
            }
            let now = self.counters.commits.load(Ordering::Relaxed);
            if now != commits {
                (commits, written) = (now, Instant::now());
            }
            if alone.elapsed() >= LONG_READ_WAIT || written.elapsed() >= WRITES_PAUSED {
                return;
            }
        }
    }

    /// Sets the partition's epoch from the directory's and what its `meta` holds (before the
    /// partition serves, and when a partition moves here).
    pub fn set_epoch(&self, directory: u64, kept: Option<Epoch>) {
        self.directory_epoch.store(directory, Ordering::Relaxed);
        self.epoch.store(Epoch::shown(kept, directory), Ordering::Relaxed);
    }

    /// The epoch of every version this partition shows.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// The directory's epoch.
    pub fn directory_epoch(&self) -> u64 {
        self.directory_epoch.load(Ordering::Relaxed)
    }

    /// The version of record `id` at `counter`.
    pub fn version(&self, id: u32, counter: u64) -> Version {
        Version { epoch: self.epoch(), id: u64::from(id), counter }
    }

    /// A row as the record callers see.
    fn record(&self, id: u32, row: sql::Row) -> Record {
        Record { version: self.version(id, row.counter), value: row.value }
    }

    /// How far the partition's committed transactions went, for the commit log's base.
    pub fn durable(&self) -> Durable {
        Durable { applied: self.applied.load(Ordering::Relaxed), next_id: self.next_id.load(Ordering::Relaxed) }
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
