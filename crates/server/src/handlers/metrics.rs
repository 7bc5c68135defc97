//! `GET /metrics` in the OpenMetrics text format (which Prometheus scrapes): the HTTP layer's
//! own [`Metrics`] (request latency, open connections, the build), and, from the backend's
//! [`Figures`] and `/proc` at each scrape, the engine's commits, requests per commit, durable
//! commits, records, file sizes (WAL included), index merges, queue depth and the process's CPU
//! time, I/O, memory, file descriptors, threads and start time (the Prometheus process
//! collector's set) — or, on PostgreSQL, its own figures; on a cluster node whose partitions
//! have copies, its replication: flushes acknowledged and refused, partitions short of copies,
//! and per copy node how far behind it is, since when a frame waits, and whether it streams.

use std::{sync::Arc, time::Duration};

use hyper::{header::HeaderValue, StatusCode};
use prometheus_client::{
    collector::Collector,
    encoding::{text, DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet},
    metrics::{counter::ConstCounter, gauge::ConstGauge, MetricType, TypedMetric},
    registry::Registry,
};
use shardlite_engine::{JournalMode, Synchronous};
use shardlite_proc::{ProcessFacts, ProcessStats};

use crate::{
    backend::figures::{Figures, PostgresFigures, SqliteFigures},
    cluster::{
        replication::{CopyReport, LinkState},
        ReplicationReport,
    },
    http::{
        error::ApiError,
        metrics::Metrics,
        response::{self, Response},
        state::State,
    },
};

/// How long a scrape waits for the backend's figures before going without them (PostgreSQL's
/// may be out of reach).
const FIGURES_WAIT: Duration = Duration::from_secs(2);

/// Answers `/metrics`: the backend's figures (if they come within [`FIGURES_WAIT`]), rendered
/// with the server's own on a blocking thread (it reads `/proc`).
pub async fn handle(state: &Arc<State>) -> Result<Response, ApiError> {
    let figures = match tokio::time::timeout(FIGURES_WAIT, state.backend.figures()).await {
        Ok(Ok(figures)) => Some(figures),
        Ok(Err(err)) => {
            // The scrape still carries the HTTP layer's and the process's metrics.
            tracing::warn!(%err, "reading the backend's figures for /metrics failed");
            None
        }
        Err(_) => {
            tracing::warn!(wait = ?FIGURES_WAIT, "the backend's figures for /metrics did not come in time");
            None
        }
    };
    let replication = state.cluster.as_ref().and_then(|c| c.replication_report());
    let state = Arc::clone(state);
    let internal = |message: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message);
    let text = tokio::task::spawn_blocking(move || render(&state.metrics, figures, replication))
        .await
        .map_err(|e| internal(format!("metrics failed: {e}")))?
        .map_err(|e| internal(format!("metrics failed: {e}")))?;
    Ok(response::with_body(
        StatusCode::OK,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        text,
    ))
}

/// Renders every metric: the server's, the backend's `figures` (none if they could not be had),
/// the `replication` report (if the node replicates) and the process's, read now.
fn render(
    metrics: &Metrics,
    figures: Option<Figures>,
    replication: Option<ReplicationReport>,
) -> Result<String, std::fmt::Error> {
    let mut out = String::with_capacity(16 << 10);
    metrics.encode(&mut out)?;
    let mut scrape = Registry::default();
    scrape.register_collector(Box::new(Scrape {
        figures,
        replication,
        process: ProcessStats::read(),
        facts: ProcessFacts::read(),
    }));
    text::encode_registry(&mut out, &scrape)?;
    text::encode_eof(&mut out)?;
    Ok(out)
}

/// The figures of one scrape, so nothing is counted twice.
#[derive(Debug)]
struct Scrape {
    figures: Option<Figures>,
    replication: Option<ReplicationReport>,
    process: ProcessStats,
    facts: ProcessFacts,
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        match &self.figures {
            Some(Figures::Sqlite(figures)) => encode_sqlite(figures, &mut enc)?,
            Some(Figures::Postgres(figures)) => encode_postgres(figures, &mut enc)?,
            None => {}
        }
        if let Some(report) = &self.replication {
            encode_replication(report, &mut enc)?;
        }
        let (p, f) = (&self.process, &self.facts);
        encode(
            &mut enc,
            [
                Seconds("process_cpu_seconds", "User and system CPU time", p.cpu_seconds()),
                Counter("process_io_read_bytes", "Bytes the process caused to be read from storage", p.read_bytes),
                Counter("process_io_write_bytes", "Bytes the process caused to be written to storage", p.write_bytes),
                Counter("process_io_read_syscalls", "Read system calls", p.syscr),
                Counter("process_io_write_syscalls", "Write system calls", p.syscw),
                Gauge("process_resident_memory_bytes", "Resident memory (VmRSS)", f.resident_memory_bytes),
                Gauge("process_virtual_memory_bytes", "Virtual memory size", f.virtual_memory_bytes),
                Gauge("process_open_fds", "Open file descriptors", f.open_fds),
                Gauge("process_max_fds", "The limit on open file descriptors (soft)", f.max_fds),
                Gauge("process_threads", "Threads", f.threads),
                Gauge(
                    "process_start_time_seconds",
                    "When the process started, seconds since the Unix epoch",
                    f.start_time_seconds as u64,
                ),
            ],
        )
    }
}

/// A gauge per copy node: its name, its help, and its value of a copy's report.
type PerCopy = (&'static str, &'static str, fn(&CopyReport) -> f64);

/// The owner's side of replication: flushes acknowledged and refused, partitions short of
/// copies, and per copy node (label `node`) its lag and link.
fn encode_replication(report: &ReplicationReport, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    encode(
        enc,
        [
            Counter("shardlite_replication_flushes_acked", "Log flushes held by enough copies", report.flushes_acked),
            Counter(
                "shardlite_replication_flushes_refused",
                "Log flushes refused (503 unreplicated): too few copies held them in time",
                report.flushes_refused,
            ),
            Counter(
                "shardlite_replication_flushes_degraded",
                "Log flushes acknowledged held by fewer than acks copies (--degrade-to-async)",
                report.flushes_degraded,
            ),
            Gauge(
                "shardlite_replication_short_partitions",
                "This node's partitions fewer than acks copies can hold writes of now",
                report.short.len() as u64,
            ),
        ],
    )?;
    let per_copy: [PerCopy; 4] = [
        (
            "shardlite_replication_copy_behind_positions",
            "Log positions shipped that the copy node does not hold yet",
            |c| c.behind_by as f64,
        ),
        (
            "shardlite_replication_copy_waiting_seconds",
            "How long the oldest frame the copy node does not hold has waited",
            |c| c.waiting_ms as f64 / 1e3,
        ),
        (
            "shardlite_replication_copy_streaming",
            "1 while the copy node holds the frames it is sent; 0 while retrying or behind",
            |c| f64::from(u8::from(c.state == LinkState::Streaming)),
        ),
        (
            "shardlite_replication_copy_resyncing_partitions",
            "The copy node's copies being brought up to date from snapshots",
            |c| c.resyncing.len() as f64,
        ),
    ];
    for (name, help, value) in per_copy {
        let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for copy in &report.copies {
            let metric = ConstGauge::new(value(copy));
            metric.encode(family.encode_family(&[("node", copy.node.as_str())])?)?;
        }
    }
    Ok(())
}

/// The engine's figures: commits, requests per commit, durable commits, records, file sizes
/// (WAL included), index merges, queue depth, record cache hits and misses.
fn encode_sqlite(figures: &SqliteFigures, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let (stats, config) = (&figures.stats, &figures.config);
    let sum = |figure| stats.sum(figure);
    let w = &stats.writers;
    let poisoned = stats.partitions.iter().filter(|p| p.poisoned.is_some()).count() as u64;
    let mut metrics = vec![
        Gauge("shardlite_records", "Live records, all partitions", sum(|p| p.records)),
        Gauge("shardlite_db_bytes", "Bytes of the SQLite database files", sum(|p| p.db_bytes)),
        Gauge("shardlite_wal_bytes", "Bytes of the SQLite WAL files", sum(|p| p.wal_bytes)),
        Gauge("shardlite_index_bytes", "Bytes of the compact index files", sum(|p| p.index_bytes)),
        Gauge(
            "shardlite_index_recent_entries",
            "Index entries in RAM, not yet merged into the index files",
            sum(|p| p.index_recent_entries),
        ),
        Counter("shardlite_index_merges", "Index merges completed since start", sum(|p| p.merges)),
        Counter("shardlite_checkpoints", "WAL checkpoints run by the writers since start", sum(|p| p.checkpoints)),
        Gauge("shardlite_partitions_poisoned", "Partitions refusing writes after a failed commit", poisoned),
        Gauge(
            "shardlite_writer_queue_jobs",
            "Write jobs waiting in the writer threads' queues",
            stats.queue_depths.iter().sum::<usize>() as u64,
        ),
        Counter(
            "shardlite_reads_inline",
            "Reads that missed the record cache and ran on the request's own thread, not a lookup thread",
            stats.inline_reads,
        ),
    ];
    if let Some(cache) = &stats.record_cache {
        metrics.extend([
            Counter("shardlite_record_cache_hits", "Reads answered from the record cache", cache.hits),
            Counter("shardlite_record_cache_misses", "Reads that missed the record cache", cache.misses),
            Gauge("shardlite_record_cache_bytes", "Bytes the record cache's entries are charged for", cache.bytes),
        ]);
    }
    let memory = &stats.memory;
    metrics.extend([
        Gauge("shardlite_memory_budget_bytes", "RAM the store may hold (memory_budget_mib)", memory.plan.budget),
        Gauge(
            "shardlite_memory_mapped_files_limit_bytes",
            "The budget's part set aside for the process's mapped files: executable, WAL-indexes",
            memory.plan.mapped_files,
        ),
        Gauge(
            "shardlite_memory_index_pages_limit_bytes",
            "The budget's part for index files' pages held in RAM",
            memory.plan.index_pages,
        ),
        Gauge("shardlite_memory_index_pages_bytes", "Index files' pages held in RAM now", memory.index_pages_bytes),
        Gauge("shardlite_memory_sqlite_limit_bytes", "The budget's part for SQLite's connections", memory.plan.sqlite),
        Gauge(
            "shardlite_memory_record_cache_limit_bytes",
            "The budget's part for the record cache",
            memory.plan.record_cache,
        ),
        Gauge(
            "shardlite_memory_recent_index_limit_bytes",
            "The budget's part for index entries not yet merged",
            memory.plan.recent_index,
        ),
        Gauge(
            "shardlite_memory_held_writes_limit_bytes",
            "The budget's part for writes answered before their COMMIT (held writes)",
            memory.plan.held_writes,
        ),
        Gauge(
            "shardlite_memory_recent_index_bytes",
            "What index entries not yet merged cost now",
            memory.recent_index_bytes,
        ),
    ]);
    metrics.extend([
        Counter(
            "shardlite_commits",
            "Groups of writes the writers committed (answered groups may share a COMMIT)",
            w.commits,
        ),
        Counter(
            "shardlite_inline_commits",
            "Of those, the single writes their caller ran itself (inline writes, with the commit log)",
            w.inline_commits,
        ),
    ]);
    // What made acknowledged writes durable: with the commit log, its flushes (each one
    // fdatasync, whatever the number of partitions whose commits it covers); without it, with
    // synchronous=full, every commit's own sync of its partition's WAL (several in delete
    // mode); at normal or off, none. Checkpoints' syncs are not on the acknowledgement path.
    let (flushes, help) = match &stats.log {
        Some(log) => (log.flushes, "Flushes of the commit log, each making a round of commits durable"),
        None if config.synchronous == Synchronous::Full => (
            w.commits,
            match config.journal {
                JournalMode::Wal => "Commits that synced their partition's WAL (no commit log)",
                JournalMode::Delete => "Commits that waited for syncs of their partition's files (several each)",
            },
        ),
        None => (0, "Flushes on the acknowledgement path (none: synchronous is not full)"),
    };
    metrics.push(Counter("shardlite_flushes", help, flushes));
    if let Some(log) = &stats.log {
        let flushing = log.flush_nanos as f64 / 1e9;
        metrics.extend([
            Counter("shardlite_log_records", "Records appended to the commit log", log.records),
            Counter("shardlite_log_bytes", "Bytes appended to the commit log", log.bytes),
            Seconds("shardlite_log_flush_seconds", "Time spent writing and syncing the commit log", flushing),
            Counter("shardlite_log_segments_dropped", "Commit log segments dropped once durable elsewhere", log.trims),
        ]);
    }
    metrics.extend([
        Counter("shardlite_commit_requests", "Write requests carried by those commits", w.requests),
        Seconds("shardlite_commit_seconds", "Time spent in write transactions", w.commit_nanos as f64 / 1e9),
    ]);
    encode(enc, metrics)?;
    let mut buckets: Vec<(f64, u64)> = w
        .batch_sizes
        .iter()
        .map(|&(bound, n)| (if bound == u64::MAX { f64::INFINITY } else { bound as f64 }, n))
        .collect();
    if buckets.last().is_none_or(|(bound, _)| bound.is_finite()) {
        buckets.push((f64::INFINITY, 0));
    }
    let batches = ConstHistogram { sum: w.requests as f64, count: w.commits, buckets };
    batches.encode(enc.encode_descriptor(
        "shardlite_commit_batch_size",
        "Requests per commit: how well group commit batches",
        None,
        batches.metric_type(),
    )?)?;
    Ok(())
}

/// PostgreSQL's figures: `shardlite_records` and `shardlite_db_bytes` (the table, as for the
/// engine), then `shardlite_pg_*` (the database, the server's WAL) and the pool's.
fn encode_postgres(figures: &PostgresFigures, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let (t, db, pool) = (&figures.table, &figures.database, &figures.pool);
    let pg = |name, help, value: i64| Counter(name, help, value.unsigned_abs());
    let mut metrics = vec![
        Gauge("shardlite_records", "Live records: the table's n_live_tup (an estimate)", t.live.unsigned_abs()),
        Gauge("shardlite_db_bytes", "Bytes of the table, its partitions and indexes", t.bytes.unsigned_abs()),
        Gauge("shardlite_pg_database_bytes", "Bytes of the whole database", db.database_bytes.unsigned_abs()),
    ];
    // pg_stat_database's counters.
    let database = [
        ("shardlite_pg_xact_commit", "Transactions committed in the database (pg_stat_database)", db.xact_commit),
        ("shardlite_pg_xact_rollback", "Transactions rolled back in the database", db.xact_rollback),
        ("shardlite_pg_blks_read", "Blocks the database read from the kernel (not in shared buffers)", db.blks_read),
        ("shardlite_pg_blks_hit", "Blocks found in shared buffers", db.blks_hit),
        ("shardlite_pg_tup_inserted", "Rows inserted in the database", db.tup_inserted),
        ("shardlite_pg_tup_updated", "Rows updated in the database", db.tup_updated),
        ("shardlite_pg_tup_deleted", "Rows deleted in the database", db.tup_deleted),
    ];
    metrics.extend(database.map(|(name, help, value)| pg(name, help, value)));
    if let Some(w) = &figures.wal {
        metrics.extend([
            pg("shardlite_pg_wal_records", "WAL records the server wrote (pg_stat_wal)", w.wal_records),
            pg("shardlite_pg_wal_bytes", "WAL bytes the server wrote", w.wal_bytes),
            pg("shardlite_pg_wal_syncs", "WAL syncs to disk the server made", w.wal_sync),
        ]);
    }
    metrics.extend([
        Gauge("shardlite_pg_pool_connections", "Connections open in the pool", pool.size as u64),
        Gauge("shardlite_pg_pool_waiting", "Requests waiting for a pooled connection", pool.waiting as u64),
    ]);
    encode(enc, metrics)
}

/// One figure of a scrape, read elsewhere: its name, its help, its value.
enum Metric {
    /// A value that goes up and down.
    Gauge(&'static str, &'static str, u64),
    /// A count that only grows (its name gains `_total`).
    Counter(&'static str, &'static str, u64),
    /// Seconds that only grow (its name gains `_total`).
    Seconds(&'static str, &'static str, f64),
}
use Metric::{Counter, Gauge, Seconds};

/// Encodes `metrics`, in order.
fn encode(enc: &mut DescriptorEncoder, metrics: impl IntoIterator<Item = Metric>) -> Result<(), std::fmt::Error> {
    for metric in metrics {
        match metric {
            Gauge(name, help, value) => {
                let metric = ConstGauge::new(value);
                metric.encode(enc.encode_descriptor(name, help, None, metric.metric_type())?)?;
            }
            Counter(name, help, value) => {
                let metric = ConstCounter::new(value);
                metric.encode(enc.encode_descriptor(name, help, None, metric.metric_type())?)?;
            }
            Seconds(name, help, value) => {
                let metric = ConstCounter::new(value);
                metric.encode(enc.encode_descriptor(name, help, None, metric.metric_type())?)?;
            }
        }
    }
    Ok(())
}

/// A histogram read from someone else's counters (the crate's `Histogram` only observes).
struct ConstHistogram {
    sum: f64,
    count: u64,
    /// `(upper bound, observations in this bucket only)`, ending with `+Inf`.
    buckets: Vec<(f64, u64)>,
}

impl TypedMetric for ConstHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for ConstHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
