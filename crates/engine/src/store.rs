//! [`Store`]: a data directory of partitions, and the only entry point callers use.
//!
//! The store validates input, hashes the key to its partition, and either reads (from the
//! record cache, else through the partition's index and read pool: on the caller's thread, or
//! on a lookup thread for `submit_get`) or hands writes to the partition's writer thread and
//! returns a [`Pending`] that resolves once the write is committed ([`Store::write`] may instead
//! run a single write's transaction on the caller's thread: an inline write). `Pending` is both
//! blockable (`wait`) and a `Future`, so an async server can await commits without blocking its
//! runtime. Opening takes the directory's lock and checks every partition's WAL first
//! ([`crate::dirlock`]); closing (or dropping) the store stops the maintenance thread, lets the
//! writers finish every queued job, checkpoints, closes, and releases the lock.

mod backup;
mod scan;
mod transfer;

pub use scan::Scanned;
pub use transfer::{send_database, Adoption, MovePart};

use std::{
    collections::BTreeMap,
    future::{Future, IntoFuture},
    path::Path,
    pin::Pin,
    sync::{atomic::Ordering, Arc, Mutex, RwLock},
    task::{Context, Poll},
    thread::JoinHandle,
};

use crossbeam_channel::{bounded, unbounded, Sender, TrySendError};
use serde::{Deserialize, Serialize};

use crate::{
    cache::{CacheStats, RecordCache},
    checkpointer::{self, Checkpoints},
    commitlog::{CommitLog, LogStats},
    config::{IndexMode, JournalMode, Synchronous},
    dirlock::{DirLock, Shown},
    index::IndexPages,
    keyhash::{KeyHash, KeyHasher},
    layout::Layout,
    lookups::{self, LookupQueue},
    maintenance,
    manifest::Manifest,
    memory::{self, MemoryPlan},
    metrics::{Metrics, MetricsSnapshot},
    opening::{open_directory, Opened},
    ops::{Condition, Op, Outcome, Record, Version, Written},
    partition::{
        check::PartitionCheck,
        compact::CompactReport,
        writer::{
            self, Inline, Job, Load, Maintenance, PartitionWriter, RequestResult, Slot, WriteRequest, WriterThread,
            Writing,
        },
        Partition,
    },
    Config, CreateOptions, Error, Result, MAX_KEY_LEN,
};

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
}

/// What every thread serving requests shares: the partitions and the queues to their writers.
struct Shared {
    hasher: KeyHasher,
    partitions: Vec<Arc<Partition>>,
    /// Recently read records (`record_cache_mib` > 0).
    cache: Option<Arc<RecordCache>>,
    /// One queue per writer thread; emptied by `close`, which is how writers learn to stop.
    writers: RwLock<Vec<Sender<Job>>>,
}

impl Shared {
    /// Reads a record on the calling thread, from the cache if it holds the key, else from
    /// SQLite (then caching it).
    fn get(&self, key: &[u8]) -> Result<Option<Record>> {
        match self.cached(key) {
            Some(record) => Ok(Some(record)),
            None => self.read_through(key),
        }
    }

    /// Reads a record from SQLite and caches it (the cache missed).
    fn read_through(&self, key: &[u8]) -> Result<Option<Record>> {
        let at = self.hasher.locate(key);
        let Some(cache) = &self.cache else { return self.read(key, at) };
        let generation = cache.generation(at.partition);
        let found = self.read(key, at)?;
        if let Some(record) = &found {
            cache.fill(at.partition, generation, key, record);
        }
        Ok(found)
    }

    /// The cached record of `key`, if the cache holds it.
    fn cached(&self, key: &[u8]) -> Option<Record> {
        self.cache.as_ref().and_then(|cache| cache.get(key))
    }

    /// Reads a record from SQLite; a damaged index page is rebuilt and the read retried.
    fn read(&self, key: &[u8], at: KeyHash) -> Result<Option<Record>> {
        let partition = &self.partitions[at.partition as usize];
        match partition.get(key, at.fingerprint) {
            Err(Error::Corrupt { .. }) => {
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
        Self::start(layout, config, manifest)
    }

    /// Opens the data directory `dir` with `config`, creating it with `create` if it holds none
    /// yet. An existing directory created with other settings than those `create` gives is
    /// refused, naming the first that differs.
    pub fn open_or_create(dir: impl AsRef<Path>, create: CreateOptions, config: Config) -> Result<Self> {
        create.validate()?;
        config.validate()?;
        let layout = Layout::new(dir.as_ref());
        let manifest = if layout.exists() {
            let manifest = Manifest::read(&layout.manifest())?;
            manifest.check_matches(&create, &layout.manifest())?;
            manifest
        } else {
            refuse_foreign(layout.dir())?;
            std::fs::create_dir_all(layout.dir()).map_err(|e| Error::io(layout.dir(), &e))?;
            let manifest = Manifest::new(&create);
            manifest.write(&layout.manifest())?;
            tracing::info!(dir = %layout.dir().display(), partitions = manifest.partitions, "created a new data directory");
            manifest
        };
        Self::start(layout, config, manifest)
    }

    fn start(layout: Layout, config: Config, mut manifest: Manifest) -> Result<Self> {
        config.validate()?;
        if layout.import_staging().exists() {
            return Err(Error::ImportPending { dir: layout.dir().to_owned() });
        }
        let lookup_threads = lookups::threads_for(layout.dir(), config.lookup_threads);
        let config = Config { lookup_threads, ..config };
        let memory = MemoryPlan::new(&config, manifest.partitions)?;
        let config = memory.apply(&config);
        ensure_fd_budget(&config, manifest.partitions)?;
        let hasher = manifest.hasher();
        let threads = config.writer_threads.min(manifest.partitions as usize);
        let created = manifest.clone();
        let Opened { lock, parts, log } =
            open_directory(&layout, &config, &mut manifest, config.uses_commit_log(), threads, |p, log| {
                let (partition, start) = Partition::open(&layout, p, &config, &created, log)?;
                let (durable, lost, kept) = (partition.durable(), start.lost, start.epoch);
                Ok(((Arc::clone(&partition), PartitionWriter::new(partition, start, hasher), kept), durable, lost))
            })?;
        let log = log.map(Arc::new);
        let metrics = Arc::new(Metrics::default());
        let cache = RecordCache::new(config.record_cache_mib << 20, manifest.partitions).map(Arc::new);
        let index_pages = IndexPages::new(memory.index_pages);
        let (maintenance_tx, maintenance_rx) = unbounded();
        let (checkpoint_tx, checkpoint_rx) = unbounded();
        let checkpoints = Checkpoints::new(checkpoint_tx);
        let mut owned: Vec<Vec<u32>> = (0..threads).map(|_| Vec::new()).collect();
        let mut partitions = Vec::with_capacity(manifest.partitions as usize);
        let mut slots = Vec::with_capacity(manifest.partitions as usize);
        for (p, (partition, writer, kept)) in (0..).zip(parts) {
            partition.set_epoch(manifest.epoch, kept);
            partitions.push(partition);
            slots.push(Slot::new(writer));
            owned[writer::owner(p, threads)].push(p);
        }
        let writing = Arc::new(Writing {
            slots,
            log: log.clone(),
            metrics: Arc::clone(&metrics),
            cache: cache.clone(),
            checkpoints: checkpoints.clone(),
            maintenance: maintenance_tx.clone(),
            config: config.clone(),
        });
        let lookups = LookupQueue::new(config.queue_capacity);
        let mut senders = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        for (number, owned) in owned.into_iter().enumerate() {
            let (tx, rx) = bounded(config.queue_capacity);
            let thread = WriterThread {
                number,
                jobs: rx,
                owned,
                out: Vec::new(),
                writing: Arc::clone(&writing),
                lookups: Arc::clone(&lookups),
            };
            handles.push(spawn(format!("shardlite-writer-{number}"), move || thread.run())?);
            senders.push(tx);
        }
        let checkpointer = {
            let (parts, config) = (partitions.clone(), config.clone());
            spawn("shardlite-checkpointer".into(), move || checkpointer::run(checkpoint_rx, parts, config))?
        };
        let maintenance_thread = {
            let work = maintenance::Work {
                partitions: partitions.clone(),
                writers: senders.clone(),
                log: log.clone(),
                sync_wal_before_merge: merges_sync_wal(&config),
                index_pages: (memory.index_pages > 0).then(|| Arc::clone(&index_pages)),
            };
            spawn("shardlite-maintenance".into(), move || maintenance::run(maintenance_rx, work))?
        };
        lock.opened(Shown::by(&config))?;
        let inline = log.as_ref().filter(|_| config.inline_writes_below > 0).map(|log| Inline {
            writing: Arc::clone(&writing),
            log: Arc::clone(log),
            threads,
            load: Load::default(),
        });
        let flusher = match &inline {
            Some(inline) => {
                let log = Arc::clone(&inline.log);
                Some(spawn("shardlite-flusher".into(), move || log.run_flusher())?)
            }
            None => None,
        };
        let shared = Arc::new(Shared { hasher, partitions, cache, writers: RwLock::new(senders) });
        // `submit_get` found no cached record, or a writer asked for a warming read.
        let read = Arc::clone(&shared);
        lookups.start(config.lookup_threads, Arc::new(move |key: &[u8]| read.read_through(key)), |name, f| {
            spawn(name, f)
        })?;
        let records: u64 = shared.partitions.iter().map(|p| p.counters.records.load(Ordering::Relaxed)).sum();
        tracing::info!(
            dir = %layout.dir().display(), partitions = manifest.partitions, index = %manifest.index, records,
            memory_budget_mib = memory.budget >> 20, "store opened"
        );
        Ok(Self {
            layout,
            config,
            memory,
            index_pages,
            manifest,
            shared,
            writer_threads: Mutex::new(handles),
            lookups,
            maintenance: Mutex::new(Some((maintenance_tx, maintenance_thread))),
            checkpointer: Mutex::new(Some((checkpoints, checkpointer))),
            metrics,
            log,
            lock: Mutex::new(Some(lock)),
            inline,
            flusher: Mutex::new(flusher),
        })
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

    /// Reads a record.
    /// Reads a record on the calling thread (which blocks for the SQLite read).
    pub fn get(&self, key: &[u8]) -> Result<Option<Record>> {
        self.validate(&Op::Get { key: Vec::new() }, key)?;
        self.shared.get(key)
    }

    /// Queues a read for the store's lookup threads and returns its pending answer: for
    /// callers that must not block, such as an async server. A key in the record cache is
    /// answered at once, without queueing. Fails at once with `Overloaded` if the lookup queue
    /// is full.
    pub fn submit_get(&self, key: Vec<u8>) -> Result<PendingGet> {
        self.validate(&Op::Get { key: Vec::new() }, &key)?;
        if let Some(record) = self.shared.cached(&key) {
            return Ok(PendingGet(Reply::Ready(Ok(Some(record)))));
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

    /// Sizes, counts and health of every partition, and the writers' counters.
    pub fn stats(&self) -> StoreStats {
        let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len());
        let partitions: Vec<PartitionStats> = self
            .shared
            .partitions
            .iter()
            .map(|p| {
                let index = p.index.as_ref().map(|i| i.sizes()).unwrap_or_default();
                PartitionStats {
                    partition: p.id,
                    records: p.counters.records.load(Ordering::Relaxed),
                    db_bytes: size(&p.db_path),
                    wal_bytes: size(&p.wal_path),
                    index_bytes: index.file_bytes,
                    index_file_entries: index.file_entries,
                    index_recent_entries: index.recent_entries,
                    commits: p.counters.commits.load(Ordering::Relaxed),
                    ops: p.counters.ops.load(Ordering::Relaxed),
                    merges: p.counters.merges.load(Ordering::Relaxed),
                    checkpoints: p.counters.checkpoints.load(Ordering::Relaxed),
                    readers_open: p.readers.open_connections(),
                    poisoned: p.poisoned(),
                }
            })
            .collect();
        let queue_depths =
            self.shared.writers.read().unwrap_or_else(|p| p.into_inner()).iter().map(Sender::len).collect();
        let lookup_queue_depth = self.lookups.queued();
        let record_cache = self.shared.cache.as_ref().map(|c| c.stats());
        let recent_entries: u64 = partitions.iter().map(|p: &PartitionStats| p.index_recent_entries).sum();
        let memory = MemoryStats {
            plan: self.memory,
            record_cache_bytes: record_cache.map_or(0, |c| c.bytes),
            recent_index_bytes: recent_entries * memory::RECENT_ENTRY_BYTES,
            index_pages_bytes: self.index_pages.used(),
        };
        StoreStats {
            memory,
            log: self.log.as_ref().map(|log| log.stats()),
            lookup_queue_depth,
            record_cache,
            data_dir: self.layout.dir().display().to_string(),
            manifest: self.manifest.clone(),
            partitions,
            queue_depths,
            writers: self.metrics.snapshot(),
        }
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

fn spawn<T: Send + 'static>(name: String, f: impl FnOnce() -> T + Send + 'static) -> Result<JoinHandle<T>> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(f)
        .map_err(|e| Error::Io { path: name.into(), message: e.to_string() })
}

/// Raises the soft open-files limit as far as needed (and allowed), and refuses a
/// configuration that would run out of file descriptors under load.
fn ensure_fd_budget(config: &Config, partitions: u32) -> Result<()> {
    // Per partition: the writer's db + wal, the shared shm, the index, two per reader; the
    // checkpointer's one connection and the rest within the 64.
    let per_partition = 4 + 2 * config.readers_per_partition as u64;
    let needed = u64::from(partitions) * per_partition + 64;
    let limit = rlimit::increase_nofile_limit(needed).unwrap_or(0);
    if limit != 0 && limit < needed {
        return Err(Error::Config(format!(
            "{} partitions with {} readers each need about {needed} file descriptors, but the limit is {limit}: \
             raise `ulimit -n`, or lower readers_per_partition",
            partitions, config.readers_per_partition
        )));
    }
    Ok(())
}

/// A reply channel: blocking until first polled, then async; or an answer known at once.
#[derive(Debug)]
enum Reply<T> {
    Ready(T),
    Blocking(oneshot::Receiver<T>),
    Async(oneshot::AsyncReceiver<T>),
    Done,
}

impl<T> Reply<T> {
    /// Blocks for the answer; `Err` if the sender was dropped.
    fn wait(&mut self) -> std::result::Result<T, ()> {
        match std::mem::replace(self, Reply::Done) {
            Reply::Ready(answer) => Ok(answer),
            Reply::Blocking(rx) => rx.recv().map_err(|_| ()),
            Reply::Async(_) | Reply::Done => panic!("a reply is either awaited or waited for, not both"),
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<T, ()>> {
        loop {
            match std::mem::replace(self, Reply::Done) {
                Reply::Ready(answer) => return Poll::Ready(Ok(answer)),
                Reply::Blocking(rx) => *self = Reply::Async(rx.into_future()),
                Reply::Async(mut rx) => {
                    return match Pin::new(&mut rx).poll(cx) {
                        Poll::Ready(result) => Poll::Ready(result.map_err(|_| ())),
                        Poll::Pending => {
                            *self = Reply::Async(rx);
                            Poll::Pending
                        }
                    }
                }
                Reply::Done => panic!("a reply polled after it resolved"),
            }
        }
    }
}

/// The answer to one queued operation, once its transaction commits.
#[derive(Debug)]
#[must_use = "a write is only known to be committed once its Pending resolves"]
pub struct Pending {
    reply: Reply<RequestResult>,
    partition: Arc<Partition>,
}

impl Pending {
    fn new(rx: oneshot::Receiver<RequestResult>, partition: Arc<Partition>) -> Self {
        Self { reply: Reply::Blocking(rx), partition }
    }

    /// Blocks until the transaction holding this operation has committed (or failed).
    pub fn wait(self) -> Result<Outcome> {
        single(self.wait_all())
    }

    fn wait_all(mut self) -> RequestResult {
        let result = self.reply.wait();
        all(result, &self.partition)
    }

    fn poll_all(&mut self, cx: &mut Context<'_>) -> Poll<RequestResult> {
        self.reply.poll(cx).map(|result| all(result, &self.partition))
    }
}

impl Future for Pending {
    type Output = Result<Outcome>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.poll_all(cx).map(single)
    }
}

/// The answer to a queued read.
#[derive(Debug)]
#[must_use = "a read's answer arrives through its PendingGet"]
pub struct PendingGet(Reply<Result<Option<Record>>>);

impl PendingGet {
    /// Blocks for the record.
    pub fn wait(mut self) -> Result<Option<Record>> {
        self.0.wait().unwrap_or(Err(Error::Closed))
    }
}

impl Future for PendingGet {
    type Output = Result<Option<Record>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.poll(cx).map(|r| r.unwrap_or(Err(Error::Closed)))
    }
}

fn all(result: std::result::Result<RequestResult, ()>, partition: &Partition) -> RequestResult {
    // A dropped reply means the writer died: the partition is poisoned, or the store closed.
    result.unwrap_or_else(|()| Err(partition.poison_error().unwrap_or(Error::Closed)))
}

fn single(result: RequestResult) -> Result<Outcome> {
    result?.pop().expect("one operation, one outcome")
}

/// The answers to a queued batch.
#[derive(Debug)]
#[must_use = "a batch is only known to be committed once it resolves"]
pub struct PendingBatch {
    len: usize,
    groups: Vec<(Vec<usize>, Result<Pending>)>,
}

impl PendingBatch {
    /// Blocks until every partition's part has committed; results in the batch's order.
    pub fn wait(self) -> Vec<Result<Outcome>> {
        let mut out: Vec<Result<Outcome>> = (0..self.len).map(|_| Err(Error::Closed)).collect();
        for (slots, pending) in self.groups {
            let results = pending.and_then(Pending::wait_all);
            scatter(&mut out, &slots, results);
        }
        out
    }

    /// Awaits every partition's part; results in the batch's order.
    pub async fn resolve(self) -> Vec<Result<Outcome>> {
        let mut out: Vec<Result<Outcome>> = (0..self.len).map(|_| Err(Error::Closed)).collect();
        for (slots, pending) in self.groups {
            let results = match pending {
                Ok(mut p) => std::future::poll_fn(|cx| p.poll_all(cx)).await,
                Err(e) => Err(e),
            };
            scatter(&mut out, &slots, results);
        }
        out
    }
}

fn scatter(out: &mut [Result<Outcome>], slots: &[usize], results: RequestResult) {
    match results {
        Ok(results) => {
            for (slot, result) in slots.iter().zip(results) {
                out[*slot] = result;
            }
        }
        Err(err) => {
            for slot in slots {
                out[*slot] = Err(err.clone());
            }
        }
    }
}

/// One partition's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartitionStats {
    /// The partition.
    pub partition: u32,
    /// Live records.
    pub records: u64,
    /// Bytes of the SQLite database file.
    pub db_bytes: u64,
    /// Bytes of its WAL.
    pub wal_bytes: u64,
    /// Bytes of the index file.
    pub index_bytes: u64,
    /// Entries in the index file.
    pub index_file_entries: u64,
    /// Index entries in RAM, not yet merged.
    pub index_recent_entries: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Operations committed.
    pub ops: u64,
    /// Index merges completed since open.
    pub merges: u64,
    /// WAL checkpoints run by the writer since open.
    pub checkpoints: u64,
    /// Read connections open.
    pub readers_open: usize,
    /// Why writes are refused, if they are.
    pub poisoned: Option<String>,
}

/// The whole store's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoreStats {
    /// The data directory.
    pub data_dir: String,
    /// Its manifest.
    pub manifest: Manifest,
    /// Each partition.
    pub partitions: Vec<PartitionStats>,
    /// Jobs waiting in each writer thread's queue.
    pub queue_depths: Vec<usize>,
    /// Reads waiting for the lookup threads.
    pub lookup_queue_depth: usize,
    /// The record cache's hits, misses and size (`None`: no cache).
    pub record_cache: Option<CacheStats>,
    /// Commit counters and the requests-per-commit histogram.
    pub writers: MetricsSnapshot,
    /// The commit log's figures (`None`: commits do not go through it).
    pub log: Option<LogStats>,
    /// The memory budget, its parts and what each holds now.
    pub memory: MemoryStats,
}

/// The memory budget's parts and what each holds now, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MemoryStats {
    /// The budget and its parts.
    pub plan: MemoryPlan,
    /// What the record cache's entries are charged for.
    pub record_cache_bytes: u64,
    /// What the recent index entries of all partitions cost.
    pub recent_index_bytes: u64,
    /// Index files' pages held in RAM.
    pub index_pages_bytes: u64,
}

impl StoreStats {
    /// The sum over the partitions of one of their figures.
    pub fn sum(&self, figure: fn(&PartitionStats) -> u64) -> u64 {
        self.partitions.iter().map(figure).sum()
    }
}
