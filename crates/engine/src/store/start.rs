//! [`Store::start`]: a data directory opened and its threads started, one named step after
//! another.

use std::{
    sync::{atomic::Ordering, Arc, Mutex, RwLock},
    thread::JoinHandle,
};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use super::{merges_sync_wal, Shared, Store};
use crate::{
    cache::RecordCache,
    checkpointer::{self, Checkpoints},
    commitlog::CommitLog,
    dirlock::Shown,
    index::IndexPages,
    inline_reads::InlineReads,
    layout::Layout,
    lookups::{self, LookupQueue},
    maintenance,
    manifest::Manifest,
    memory::MemoryPlan,
    metrics::Metrics,
    opening::{open_directory, Opened},
    partition::{
        writer::{self, Inline, Job, Load, Maintenance, PartitionWriter, Slot, WriterThread, Writing},
        Epoch, Partition,
    },
    replication, Config, Error, Result,
};

/// A partition as opened: what readers share, its writer, and the epoch it kept (one moved here).
type OpenedPart = (Arc<Partition>, PartitionWriter, Option<Epoch>);

/// A writer thread's handle: it hands its partitions' writers back when it ends.
type WriterHandle = JoinHandle<Vec<PartitionWriter>>;

impl Store {
    /// Opens the directory of `layout` and starts serving it, step by step; a comment says where
    /// a step's place in the order matters. Every thread is started before the store is handed
    /// out, so nothing is served before the last step. `created`: this open created the
    /// directory.
    pub(super) fn start(layout: Layout, config: Config, mut manifest: Manifest, created: bool) -> Result<Self> {
        refuse_unready(&layout, &config)?;
        // Before any file is opened: each connection's cache and the file descriptors depend on it.
        let (config, memory) = sized(&layout, config, manifest.partitions)?;
        let threads = config.writers().min(manifest.partitions as usize);
        let Opened { lock, parts, log } = open_partitions(&layout, &config, &mut manifest, threads)?;
        let positions = replication::positions::take(&layout.replication_positions())?;
        let log = log.map(Arc::new);
        let index_pages = IndexPages::new(memory.index_pages);
        // Once every partition is open (an accepted loss starts a new epoch), before any writer
        // thread runs: every version a writer answers carries the epoch.
        let (partitions, slots, owned) = place(parts, &manifest, threads);
        let (writing, maintenance_jobs, checkpoint_jobs) = writing(slots, &log, &config, manifest.partitions);
        // Before the writers, which queue warming reads in it; its threads start last.
        let reads = Arc::new(InlineReads::new(std::time::Duration::from_micros(config.inline_read_us)));
        let lookups = LookupQueue::new(config.queue_capacity, Arc::clone(&reads));
        let (senders, writer_threads) = start_writers(owned, &writing, &lookups)?;
        let checkpointer = start_checkpointer(checkpoint_jobs, &partitions, &config)?;
        // After the writers: it holds their queues.
        let resident = (memory.index_pages > 0).then(|| Arc::clone(&index_pages));
        let maintenance = start_maintenance(maintenance_jobs, &partitions, &senders, &log, &config, resident)?;
        // Every partition is open, and nothing is served yet (the store is not handed out).
        lock.opened(Shown::by(&config))?;
        let (inline, flusher) = start_inline(&log, &writing, &config, threads)?;
        // Last: the lookup threads read through `Shared`, which holds every writer's queue (a
        // damaged index page is rebuilt by its writer).
        let shared = Arc::new(Shared {
            hasher: manifest.hasher(),
            partitions,
            cache: writing.cache.clone(),
            writers: RwLock::new(senders),
            inline_reads: reads,
        });
        start_lookups(&lookups, &shared, config.lookup_threads)?;
        // Last, before anything is served: the transactions the copies held at the last close are
        // logged again, durable before any frame is answered.
        let sources = replication::Sources::restored(positions, created, log.as_deref(), manifest.partitions)?;
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
            writer_threads: Mutex::new(writer_threads),
            lookups,
            maintenance: Mutex::new(Some((writing.maintenance.clone(), maintenance))),
            checkpointer: Mutex::new(Some((writing.checkpoints.clone(), checkpointer))),
            metrics: Arc::clone(&writing.metrics),
            log,
            lock: Mutex::new(Some(lock)),
            inline,
            flusher: Mutex::new(flusher),
            sources,
        })
    }
}

/// Refuses a bad configuration, and a directory holding an interrupted import: opening it would
/// serve part of the import as if it were all (`shardlite import --resume` finishes it).
fn refuse_unready(layout: &Layout, config: &Config) -> Result<()> {
    config.validate()?;
    if layout.import_staging().exists() {
        return Err(Error::ImportPending { dir: layout.dir().to_owned() });
    }
    Ok(())
}

/// The configuration as the memory budget leaves it, and the budget's plan. The lookup threads
/// are sized first (the plan counts their readers), the file descriptors last (the plan may
/// give partitions fewer readers); all before a file is opened.
fn sized(layout: &Layout, config: Config, partitions: u32) -> Result<(Config, MemoryPlan)> {
    let lookup_threads = lookups::threads_for(layout.dir(), config.lookup_threads);
    let config = Config { lookup_threads, ..config };
    let memory = MemoryPlan::new(&config, partitions)?;
    let config = memory.apply(&config);
    ensure_fd_budget(&config, partitions)?;
    Ok((config, memory))
}

/// Takes the directory's lock, recovers and opens every partition, and starts the commit log
/// ([`open_directory`]). Partitions open with a copy of the manifest as read (they use none of
/// its epoch): `manifest` itself may get a new epoch meanwhile, which [`place`] gives them.
fn open_partitions(
    layout: &Layout,
    config: &Config,
    manifest: &mut Manifest,
    threads: usize,
) -> Result<Opened<OpenedPart>> {
    let hasher = manifest.hasher();
    let created = manifest.clone();
    open_directory(layout, config, manifest, config.uses_commit_log(), threads, |p, log| {
        let (partition, start) = Partition::open(layout, p, config, &created, log)?;
        let (durable, lost, kept) = (partition.durable(), start.lost, start.epoch);
        Ok(((Arc::clone(&partition), PartitionWriter::new(partition, start, hasher), kept), durable, lost))
    })
}

/// Gives each partition the directory's epoch (final now that every partition is open), puts
/// its writer in a slot, and lists the partitions each of `threads` writer threads owns.
fn place(
    parts: Vec<OpenedPart>,
    manifest: &Manifest,
    threads: usize,
) -> (Vec<Arc<Partition>>, Vec<Slot>, Vec<Vec<u32>>) {
    let mut owned: Vec<Vec<u32>> = (0..threads).map(|_| Vec::new()).collect();
    let mut partitions = Vec::with_capacity(manifest.partitions as usize);
    let mut slots = Vec::with_capacity(manifest.partitions as usize);
    for (p, (partition, writer, kept)) in (0..).zip(parts) {
        partition.set_epoch(manifest.epoch, kept);
        partitions.push(partition);
        slots.push(Slot::new(writer));
        owned[writer::owner(p, threads)].push(p);
    }
    (partitions, slots, owned)
}

/// What the writer threads and inline writes share: the writers' slots, the commit log, the
/// counters, the record cache and the queues of the checkpointer and maintenance threads (whose
/// ends are returned, for those threads).
fn writing(
    slots: Vec<Slot>,
    log: &Option<Arc<CommitLog>>,
    config: &Config,
    partitions: u32,
) -> (Arc<Writing>, Receiver<Maintenance>, Receiver<checkpointer::Job>) {
    let (maintenance, maintenance_jobs) = unbounded();
    let (checkpoint_tx, checkpoint_jobs) = unbounded();
    let writing = Writing {
        slots,
        log: log.clone(),
        metrics: Arc::new(Metrics::default()),
        cache: RecordCache::new(config.record_cache_mib << 20, partitions).map(Arc::new),
        checkpoints: Checkpoints::new(checkpoint_tx),
        maintenance,
        config: config.clone(),
    };
    (Arc::new(writing), maintenance_jobs, checkpoint_jobs)
}

/// Starts one writer thread for each list of `owned` partitions, each with a bounded queue (a
/// full one answers `Overloaded`); returns their queues and handles.
fn start_writers(
    owned: Vec<Vec<u32>>,
    writing: &Arc<Writing>,
    lookups: &Arc<LookupQueue>,
) -> Result<(Vec<Sender<Job>>, Vec<WriterHandle>)> {
    let mut senders = Vec::with_capacity(owned.len());
    let mut handles = Vec::with_capacity(owned.len());
    for (number, owned) in owned.into_iter().enumerate() {
        let (tx, rx) = bounded(writing.config.queue_capacity);
        let thread = WriterThread::new(number, rx, owned, Arc::clone(writing), Arc::clone(lookups));
        handles.push(spawn(format!("shardlite-writer-{number}"), move || thread.run())?);
        senders.push(tx);
    }
    Ok((senders, handles))
}

/// Starts the checkpointer thread: checkpoints off the writers' path, and idle partitions' WALs
/// emptied.
fn start_checkpointer(
    jobs: Receiver<checkpointer::Job>,
    partitions: &[Arc<Partition>],
    config: &Config,
) -> Result<JoinHandle<()>> {
    let (parts, config) = (partitions.to_vec(), config.clone());
    spawn("shardlite-checkpointer".into(), move || checkpointer::run(jobs, parts, config))
}

/// Starts the maintenance thread: index merges, commit log trims, and the index files read into
/// `index_pages` (if any). It needs the writers' queues: a merge has the writer clear tombstones.
fn start_maintenance(
    jobs: Receiver<Maintenance>,
    partitions: &[Arc<Partition>],
    writers: &[Sender<Job>],
    log: &Option<Arc<CommitLog>>,
    config: &Config,
    index_pages: Option<Arc<IndexPages>>,
) -> Result<JoinHandle<()>> {
    let work = maintenance::Work {
        partitions: partitions.to_vec(),
        writers: writers.to_vec(),
        log: log.clone(),
        sync_wal_before_merge: merges_sync_wal(config),
        index_pages,
    };
    spawn("shardlite-maintenance".into(), move || maintenance::run(jobs, work))
}

/// With the commit log and `inline_writes_below` > 0: what single writes need to run on their
/// callers' threads, and the log's flusher thread, which runs the flushes they await.
fn start_inline(
    log: &Option<Arc<CommitLog>>,
    writing: &Arc<Writing>,
    config: &Config,
    threads: usize,
) -> Result<(Option<Inline>, Option<JoinHandle<()>>)> {
    let inline = log.as_ref().filter(|_| config.inline_writes_below > 0).map(|log| Inline {
        writing: Arc::clone(writing),
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
    Ok((inline, flusher))
}

/// Starts the lookup threads: they serve `submit_get`'s cache misses and the writers' warming
/// reads, reading through `shared` (a damaged index page is rebuilt by its writer).
fn start_lookups(lookups: &LookupQueue, shared: &Arc<Shared>, threads: usize) -> Result<()> {
    let read = Arc::clone(shared);
    lookups.start(threads, Arc::new(move |key: &[u8]| read.read_through(key, false)), spawn)
}

/// Starts a named thread.
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
