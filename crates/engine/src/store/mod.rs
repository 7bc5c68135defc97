//! [`Store`]: a data directory of partitions, and the only entry point callers use.
//!
//! The store validates input, hashes the key to its partition, and either reads (from the
//! record cache, else through the partition's index and read pool: on the caller's thread, or,
//! for `submit_get` while reads are slow, on a lookup thread) or hands writes to the partition's
//! writer thread and returns a [`Pending`] that resolves once the write is committed
//! ([`Store::write`] may instead run a single write's transaction on the caller's thread: an
//! inline write). Closing (or dropping) stops the background threads, lets the writers finish
//! every queued job, checkpoints, closes and releases the directory's lock.
//!
//! - `start`: opening the directory (its lock, the WALs' check, recovery) and starting the threads
//! - `pending`: the answers callers wait for ([`Pending`], [`PendingGet`], [`PendingBatch`])
//! - `stats`: [`Store::stats`] and its figures ([`StoreStats`], [`PartitionStats`], [`MemoryStats`])
//! - `backup`, `scan`, `transfer`: backups, a partition read in id order, a partition moving

mod backup;
mod pending;
mod replica;
mod scan;
mod start;
mod stats;
mod transfer;

pub use pending::{Pending, PendingBatch, PendingGet};
pub use scan::Scanned;
pub use stats::{MemoryStats, PartitionStats, StoreStats};
pub use transfer::{send_database, Adoption, MovePart};

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{Arc, Mutex, RwLock},
    thread::JoinHandle,
    time::Instant,
};

use crossbeam_channel::{Sender, TrySendError};

use crate::{
    cache::RecordCache,
    checkpointer::Checkpoints,
    commitlog::CommitLog,
    config::{IndexMode, JournalMode, Synchronous},
    dirlock::DirLock,
    index::IndexPages,
    inline_reads::InlineReads,
    keyhash::{KeyHash, KeyHasher},
    layout::Layout,
    lookups::LookupQueue,
    maintenance,
    manifest::Manifest,
    memory::MemoryPlan,
    metrics::Metrics,
    ops::{Condition, Op, Outcome, Record, Version, Written},
    partition::{
        check::PartitionCheck,
        compact::CompactReport,
        writer::{self, Inline, Job, Maintenance, PartitionWriter, WriteRequest},
        Partition,
    },
    Config, CreateOptions, Error, Result, MAX_KEY_LEN,
};
use pending::{single, Reply};

/// One partition's share of a batch: the operations' places in the batch, and the operations
/// with their fingerprints.
type BatchGroup = (Vec<usize>, Vec<(Op, u32)>);

/// A data directory opened for serving.
pub struct Store {
    layout: Layout,
    config: Config,
    /// The memory budget and its parts (`config` holds what each part was given).
    memory: MemoryPlan,
    /// The index pages held in RAM, charged to the budget's part for them.
    index_pages: Arc<IndexPages>,
    manifest: Manifest,
    shared: Arc<Shared>,
    writer_threads: Mutex<Vec<JoinHandle<Vec<PartitionWriter>>>>,
    /// The lookup threads and their queue, which writers also warm records through.
    lookups: Arc<LookupQueue>,
    maintenance: Mutex<Option<(Sender<Maintenance>, JoinHandle<()>)>>,
    /// The checkpointer thread; stopped by `close` before the writers' final checkpoints.
    checkpointer: Mutex<Option<(Checkpoints, JoinHandle<()>)>>,
    metrics: Arc<Metrics>,
    /// The shared commit log, when commits are made durable by it.
    log: Option<Arc<CommitLog>>,
    /// The directory's lock; released by `close` once every writer has closed its partitions.
    lock: Mutex<Option<DirLock>>,
    /// What single writes need to run on their caller's thread (with the commit log).
    inline: Option<Inline>,
    /// The commit log's flusher thread, for inline writes.
    flusher: Mutex<Option<JoinHandle<()>>>,
    /// What this node holds of the logs of the owners it keeps copies for.
    sources: crate::replication::Sources,
}

/// What every thread serving requests shares: the partitions and the queues to their writers.
struct Shared {
    hasher: KeyHasher,
    partitions: Vec<Arc<Partition>>,
    /// Recently read records (`record_cache_mib` > 0).
    cache: Option<Arc<RecordCache>>,
    /// One queue per writer thread; emptied by `close`, which is how writers learn to stop.
    writers: RwLock<Vec<Sender<Job>>>,
    /// Whether reads run on their caller's thread, from how long reads take (the lookup
    /// queue's too: it warms nothing while they do).
    inline_reads: Arc<InlineReads>,
}

impl Shared {
    /// Reads a record on the calling thread, from the cache if it holds the key, else from
    /// SQLite (then caching it).
    fn get(&self, key: &[u8]) -> Result<Option<Record>> {
        match self.cached(key) {
            Some(record) => Ok(Some(record)),
            None => self.read_through(key, false),
        }
    }

    /// Reads a record from SQLite and caches it (the cache missed). `inline`: on a caller's
    /// thread that must not wait for a writer, so a damaged index page is not rebuilt here (the
    /// error is returned, and the lookup threads read the key).
    fn read_through(&self, key: &[u8], inline: bool) -> Result<Option<Record>> {
        let at = self.hasher.locate(key);
        let Some(cache) = &self.cache else { return self.read(key, at, inline) };
        let generation = cache.generation(at.partition);
        let found = self.read(key, at, inline)?;
        if let Some(record) = &found {
            cache.fill(at.partition, generation, key, record);
        }
        Ok(found)
    }

    /// The cached record of `key`, if the cache holds it.
    fn cached(&self, key: &[u8]) -> Option<Record> {
        self.cache.as_ref().and_then(|cache| cache.get(key))
    }

    /// Reads a record: as a write answered but not yet committed left it, if one did, else from
    /// SQLite, timed for [`InlineReads`]; unless `inline`, a damaged index page is rebuilt and
    /// the read retried.
    fn read(&self, key: &[u8], at: KeyHash, inline: bool) -> Result<Option<Record>> {
        let partition = &self.partitions[at.partition as usize];
        if let Some(held) = partition.held_record(key) {
            return Ok(held);
        }
        let started = Instant::now();
        let found = partition.get(key, at.fingerprint);
        self.inline_reads.record(started.elapsed(), inline);
        match found {
            Err(Error::Corrupt { .. }) if !inline => {
                self.control(at.partition, |reply| Job::Rebuild { partition: at.partition, reply })??;
                partition.get(key, at.fingerprint)
            }
            other => other,
        }
    }

    /// The queue of the writer thread owning `partition`.
    fn queue(&self, partition: u32) -> Result<Sender<Job>> {
        let writers = self.writers.read().unwrap_or_else(|p| p.into_inner());
        writers.get(writer::owner(partition, writers.len())).cloned().ok_or(Error::Closed)
    }

    /// Has the writer of `partition` commit the writes it answered but holds, if any: before a
    /// read that does not ask by key.
    fn settle(&self, partition: &Partition) -> Result<()> {
        match partition.held.any() {
            true => self.control(partition.id, |reply| Job::Settle { partition: partition.id, reply })?,
            false => Ok(()),
        }
    }

    /// Sends a control job to a partition's writer and waits for its answer.
    fn control<T>(&self, partition: u32, job: impl FnOnce(oneshot::Sender<T>) -> Job) -> Result<T> {
        let (reply, rx) = oneshot::channel();
        self.queue(partition)?.send(job(reply)).map_err(|_| Error::Closed)?;
        rx.recv().map_err(|_| Error::Closed)
    }
}

/// Refuses to create a store at `dir` if it is a file, or a directory that holds other files
/// (but `lost+found`, which a file system's root has): a wrong `--data` must not turn a folder
/// of something else into a data directory.
fn refuse_foreign(dir: &Path) -> Result<()> {
    let refused = |why: String| Err(Error::NotADataDirectory { path: dir.to_owned(), why });
    match std::fs::metadata(dir) {
        Err(_) => Ok(()),
        Ok(meta) if !meta.is_dir() => {
            refused("is a file, not a directory: give a directory (a new one is created)".into())
        }
        Ok(_) => {
            let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, &e))?;
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .filter(|name| name != "lost+found")
                .collect();
            names.sort();
            match names.first() {
                None => Ok(()),
                Some(first) => refused(format!(
                    "holds other files ({first}{}) and no shardlite.toml: it is not a shardlite data directory; \
                     give a new or empty directory, or the one that holds shardlite.toml",
                    match names.len() {
                        1 => String::new(),
                        n => format!(" and {} more", n - 1),
                    }
                )),
            }
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.layout.dir()).field("manifest", &self.manifest).finish()
    }
}

impl Store {
    /// Creates a new data directory with `create` (which must not hold a manifest yet) and
    /// opens it with `config`.
    pub fn create(dir: impl AsRef<Path>, create: CreateOptions, config: Config) -> Result<Self> {
        let layout = Layout::new(dir.as_ref());
        if layout.exists() {
            return Err(Error::Manifest {
                path: layout.manifest(),
                message: "a data directory already exists here; open it instead".into(),
            });
        }
        Self::open_or_create(dir, create, config)
    }

    /// Opens an existing data directory with `config`; it is what its manifest says it is.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Self> {
        let layout = Layout::new(dir.as_ref());
        if !layout.exists() {
            let why = match dir.as_ref().is_dir() {
                true => "holds no shardlite.toml: it is not a shardlite data directory (a typo?)",
                false => "does not exist, or is not a directory (a typo?)",
            };
            return Err(Error::NotADataDirectory { path: dir.as_ref().to_owned(), why: why.into() });
        }
        let manifest = Manifest::read(&layout.manifest())?;
        Self::start(layout, config, manifest, false)
    }

    /// Opens the data directory `dir` with `config`, creating it with `create` if it holds none
    /// yet. An existing directory created with other settings than those `create` gives is
    /// refused, naming the first that differs.
    pub fn open_or_create(dir: impl AsRef<Path>, create: CreateOptions, config: Config) -> Result<Self> {
        create.validate()?;
        config.validate()?;
        let layout = Layout::new(dir.as_ref());
        let created = !layout.exists();
        let manifest = if !created {
            let manifest = Manifest::read(&layout.manifest())?;
            manifest.check_matches(&create, &layout.manifest())?;
            manifest
        } else {
            refuse_foreign(layout.dir())?;
            std::fs::create_dir_all(layout.dir()).map_err(|e| Error::io(layout.dir(), &e))?;
            let manifest = Manifest::new(&create);
            manifest.write(&layout.manifest())?;
            tracing::info!(
                dir = %layout.dir().display(), partitions = manifest.partitions,
                "created a new data directory"
            );
            manifest
        };
        Self::start(layout, config, manifest, created)
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The directory's manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The partition a key belongs to.
    pub fn partition_of(&self, key: &[u8]) -> u32 {
        self.shared.hasher.locate(key).partition
    }

    /// Reads a record on the calling thread (which blocks for the SQLite read).
    pub fn get(&self, key: &[u8]) -> Result<Option<Record>> {
        self.validate(&Op::Get { key: Vec::new() }, key)?;
        self.shared.get(key)
    }

    /// Queues a read for the store's lookup threads and returns its pending answer: for
    /// callers that must not block, such as an async server. A key in the record cache is
    /// answered at once, without queueing, and so is one read from SQLite on the caller's thread
    /// while reads find their pages in memory (`crate::inline_reads`). Fails at once with
    /// `Overloaded` if the lookup queue is full.
    pub fn submit_get(&self, key: Vec<u8>) -> Result<PendingGet> {
        self.validate(&Op::Get { key: Vec::new() }, &key)?;
        if let Some(record) = self.shared.cached(&key) {
            return Ok(PendingGet(Reply::Ready(Ok(Some(record)))));
        }
        if self.shared.inline_reads.allowed() {
            match self.shared.read_through(&key, true) {
                // A damaged index page: read again by a lookup thread, which has it rebuilt.
                Err(Error::Corrupt { .. }) => {}
                answer => return Ok(PendingGet(Reply::Ready(answer))),
            }
        }
        // Hashed here only for the error; the lookup thread hashes the key it reads.
        let rx = self.lookups.submit(key, |key| self.partition_of(key))?;
        Ok(PendingGet(Reply::Blocking(rx)))
    }

    /// Inserts or replaces a record if `condition` holds; blocks until committed.
    pub fn put(&self, key: &[u8], value: Vec<u8>, condition: Condition) -> Result<Written> {
        match self.submit(Op::Put { key: key.to_vec(), value, condition })?.wait()? {
            Outcome::Written(w) => Ok(w),
            other => unreachable!("a put answered {other:?}"),
        }
    }

    /// Deletes a record if `condition` holds; blocks until committed. Returns its last version.
    pub fn delete(&self, key: &[u8], condition: Condition) -> Result<Version> {
        match self.submit(Op::Delete { key: key.to_vec(), condition })?.wait()? {
            Outcome::Deleted { version } => Ok(version),
            other => unreachable!("a delete answered {other:?}"),
        }
    }

    /// Queues one operation for its partition's writer. Fails at once with `Overloaded` if the
    /// queue is full, `Poisoned` if the partition refuses writes, or the input's error.
    pub fn submit(&self, op: Op) -> Result<Pending> {
        let at = self.locate(&op)?;
        self.enqueue(at.partition, vec![(op, at.fingerprint)])
    }

    /// Where a valid operation's key lies.
    fn locate(&self, op: &Op) -> Result<KeyHash> {
        self.validate(op, op.key())?;
        Ok(self.shared.hasher.locate(op.key()))
    }

    /// Runs one operation and awaits its answer: on the calling thread when few writes are
    /// under way and its partition's writer is free (inline writes, with the commit log), else
    /// through the writer's queue as [`Store::submit`].
    pub async fn write(&self, op: Op) -> Result<Outcome> {
        let Some(inline) = &self.inline else { return self.submit(op)?.await };
        let under_way = inline.enter();
        if !under_way.may_inline {
            return self.submit(op)?.await;
        }
        let at = self.locate(&op)?;
        match inline.write(at.partition, vec![(op, at.fingerprint)]).await {
            Ok(result) => single(result),
            Err(ops) => self.enqueue(at.partition, ops)?.await,
        }
    }

    /// Runs many operations: those of one partition commit in one transaction, in order.
    /// Validation errors fail the whole call before anything is queued; everything after that
    /// (conditions, a full queue, a failed commit) is reported per operation.
    pub fn batch(&self, ops: Vec<Op>) -> Result<Vec<Result<Outcome>>> {
        Ok(self.submit_batch(ops)?.wait())
    }

    /// Queues a batch (see [`Store::batch`]) and returns its pending answers.
    pub fn submit_batch(&self, ops: Vec<Op>) -> Result<PendingBatch> {
        for op in &ops {
            self.validate(op, op.key())?;
        }
        let len = ops.len();
        let mut groups: BTreeMap<u32, BatchGroup> = BTreeMap::new();
        for (i, op) in ops.into_iter().enumerate() {
            let at = self.shared.hasher.locate(op.key());
            let group = groups.entry(at.partition).or_default();
            group.0.push(i);
            group.1.push((op, at.fingerprint));
        }
        let groups = groups.into_iter().map(|(p, (slots, ops))| (slots, self.enqueue(p, ops))).collect();
        Ok(PendingBatch { len, groups })
    }

    fn validate(&self, op: &Op, key: &[u8]) -> Result<()> {
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return Err(Error::InvalidKey { len: key.len(), max: MAX_KEY_LEN });
        }
        if let Op::Put { value, .. } = op {
            if value.len() > self.config.max_value {
                return Err(Error::ValueTooLarge { len: value.len(), max: self.config.max_value });
            }
        }
        if self.manifest.index == IndexMode::None {
            match op {
                Op::Get { .. } => return Err(Error::Unsupported { operation: "get" }),
                Op::Delete { .. } => return Err(Error::Unsupported { operation: "delete" }),
                Op::Put { condition, .. } if *condition != Condition::None => {
                    return Err(Error::Unsupported { operation: "a conditional put" })
                }
                Op::Put { .. } => {}
            }
        }
        Ok(())
    }

    fn enqueue(&self, partition: u32, ops: Vec<(Op, u32)>) -> Result<Pending> {
        let part = &self.shared.partitions[partition as usize];
        if let Some(err) = part.poison_error() {
            return Err(err);
        }
        let (reply, rx) = oneshot::channel();
        match self.shared.queue(partition)?.try_send(Job::Write(WriteRequest { partition, ops, reply })) {
            Ok(()) => Ok(Pending::new(rx, Arc::clone(part))),
            Err(TrySendError::Full(_)) => Err(Error::Overloaded { partition }),
            Err(TrySendError::Disconnected(_)) => Err(Error::Closed),
        }
    }

    /// Rebuilds one partition's compact index from its SQLite data.
    pub fn rebuild_index(&self, partition: u32) -> Result<()> {
        self.shared.control(partition, |reply| Job::Rebuild { partition, reply })?
    }

    /// Merges every partition's recent index entries into its index file now, waiting for
    /// the merges (normally they happen in the background at `merge_threshold`).
    pub fn merge_indexes(&self) -> Result<()> {
        let writers = self.shared.writers.read().unwrap_or_else(|p| p.into_inner()).clone();
        let sync_wal = merges_sync_wal(&self.config);
        for partition in self.shared.partitions.iter().filter(|p| p.index.is_some()) {
            // First what is frozen already (waiting for the background merge of it, if one is
            // under way: nothing more can be frozen until it is merged), then the rest.
            maintenance::merge(partition, &writers, sync_wal)?;
            if self.shared.control(partition.id, |reply| Job::Freeze { partition: partition.id, reply })? {
                maintenance::merge(partition, &writers, sync_wal)?;
            }
        }
        Ok(())
    }

    /// Checks one partition: SQLite's `quick_check`, the record count, index <-> data.
    pub fn check_partition(&self, partition: u32) -> Result<PartitionCheck> {
        if partition >= self.manifest.partitions {
            return Err(Error::Config(format!("no partition {partition}")));
        }
        self.shared.control(partition, |reply| Job::Check { partition, reply })?
    }

    /// Checks every partition.
    pub fn check(&self) -> Result<Vec<PartitionCheck>> {
        (0..self.manifest.partitions).map(|p| self.check_partition(p)).collect()
    }

    /// Compacts every partition's database, one after the other, each on its writer thread
    /// between two rounds of commits ([`crate::partition::compact`]).
    pub fn compact(&self) -> Result<CompactReport> {
        let partitions = (0..self.manifest.partitions)
            .map(|partition| self.shared.control(partition, |reply| Job::Compact { partition, reply })?)
            .collect::<Result<Vec<_>>>()?;
        Ok(CompactReport::of(partitions))
    }

    /// What keeps the store from serving everything, one line each: poisoned partitions
    /// (their writes refused until a restart) and a failed commit log (every write refused).
    /// Empty when healthy. Cheap: no file is read.
    pub fn faults(&self) -> Vec<String> {
        let mut faults: Vec<String> = self
            .shared
            .partitions
            .iter()
            .filter_map(|p| p.poisoned().map(|reason| format!("partition {} is poisoned: {reason}", p.id)))
            .collect();
        if let Some(why) = self.log.as_ref().and_then(|log| log.failure()) {
            faults.push(format!("the commit log failed: {why}"));
        }
        faults
    }

    /// Stops background work, lets the writers commit everything queued, checkpoints and
    /// closes. Idempotent; dropping the store does the same.
    pub fn close(&self) {
        // Before the writers stop: they apply what the copies hold of their owners' logs.
        let positions = self.close_copies();
        self.lookups.close();
        if let Some((stop, thread)) = self.maintenance.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = stop.send(Maintenance::Stop);
            let _ = thread.join();
        }
        if let Some((checkpoints, thread)) = self.checkpointer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            checkpoints.stop();
            let _ = thread.join();
        }
        self.shared.writers.write().unwrap_or_else(|p| p.into_inner()).clear();
        let threads: Vec<_> = self.writer_threads.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
        let closing = !threads.is_empty();
        // Each writer thread checkpoints its partitions and hands them back open (once the inline
        // writes under way have put them back).
        let writers: Vec<PartitionWriter> = threads.into_iter().filter_map(|t| t.join().ok()).flatten().collect();
        if let Some((log, flusher)) =
            self.log.as_ref().zip(self.flusher.lock().unwrap_or_else(|p| p.into_inner()).take())
        {
            log.stop_flusher();
            let _ = flusher.join();
        }
        if let Some(lock) = self.lock.lock().unwrap_or_else(|p| p.into_inner()).as_mut().filter(|_| closing) {
            if let Err(err) = lock.end_session() {
                tracing::warn!(%err, "could not end the session; the next open will think it crashed");
            }
        }
        drop(writers);
        if let Some(log) = self.log.as_ref().filter(|_| closing) {
            // Every partition is checkpointed: the log is no longer needed, unless a partition's
            // files or the log itself failed (then the next open replays what it holds).
            let poisoned = self.shared.partitions.iter().any(|p| p.poisoned().is_some());
            let durable: Vec<_> = self.shared.partitions.iter().map(|p| p.durable()).collect();
            if poisoned || log.has_failed() {
                tracing::warn!("keeping the commit log: a partition or the log failed; the next open replays it");
            } else if let Err(err) = log.close(&durable) {
                tracing::warn!(%err, "could not remove the commit log at close; the next open replays it");
            } else if let Some(Err(err)) =
                positions.map(|p| crate::replication::positions::write(&self.layout.replication_positions(), &p))
            {
                tracing::warn!(%err, "could not record where the copies stand; after the restart they come from snapshots");
            }
        }
        // Every partition is closed now: the session ends cleanly.
        drop(self.lock.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.close();
    }
}

/// Whether an index merge must sync the partition's WAL first: only at `synchronous = normal` in
/// WAL mode are commits visible (and merged) before they are durable ([`maintenance`]).
fn merges_sync_wal(config: &Config) -> bool {
    config.synchronous == Synchronous::Normal && config.journal == JournalMode::Wal
}
