//! The storage engine benchmark: caller threads drive a [`Store`] directly (no HTTP), the way
//! the server's handlers will, to measure what the engine itself can do.
//!
//! For each index mode: preload `records` DB-A shaped records (fast settings, then reopened
//! with the measured ones, index merged: the steady state), then for each caller count run
//! `insert` (fresh keys), `update` and `get` (uniformly random existing keys) for a fixed time.
//! Each phase reports operations/s, latency percentiles, errors, and what it cost: bytes and
//! requests read from the disk per operation, bytes written per operation. `shardlite
//! bench-engine` is [`command`].

pub mod command;

use std::{
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use serde::Serialize;
use shardlite_engine::{layout::Layout, Condition, Config, CreateOptions, IndexMode, Op, Store, Synchronous};
use shardlite_proc::{DiskStats, ProcessStats};

use crate::keyspace;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Records loaded before measuring.
    pub records: u64,
    /// Key length, bytes.
    pub key_size: usize,
    /// Value length, bytes.
    pub value_size: usize,
    /// Index modes to compare.
    pub modes: Vec<IndexMode>,
    /// Caller thread counts to run each phase with.
    pub callers: Vec<usize>,
    /// Length of each phase.
    pub phase: Duration,
    /// Drop the data files from the page cache before each get phase.
    pub evict_before_get: bool,
    /// Where the data directories (one per mode) live. `None`: a temporary directory, removed
    /// afterwards. `Some`: kept, and a mode whose directory already holds the records is not
    /// preloaded again (so a run under a memory limit can reuse a load made without one).
    pub data_dir: Option<PathBuf>,
    /// Partitions of each data directory.
    pub partitions: u32,
    /// Engine settings for the measured phases (synchronous, writer threads, ...).
    pub config: Config,
    /// Key-space seed.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            records: 2_000_000,
            key_size: 32,
            value_size: 32,
            modes: vec![IndexMode::Hash, IndexMode::Sqlite, IndexMode::None],
            callers: vec![16, 64],
            phase: Duration::from_secs(5),
            evict_before_get: false,
            data_dir: None,
            partitions: 16,
            config: Config::default(),
            seed: 1,
        }
    }
}

/// One measured phase.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// Index mode.
    pub mode: String,
    /// `insert`, `update` or `get`.
    pub phase: String,
    /// Caller threads.
    pub callers: usize,
    /// Operations completed.
    pub ops: u64,
    /// Operations that failed.
    pub errors: u64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Latency percentiles, microseconds.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Slowest.
    pub max_us: u64,
    /// Disk read requests per operation (`/proc/diskstats`).
    pub disk_reads_per_op: f64,
    /// Bytes read from storage per operation (`/proc/self/io`).
    pub read_bytes_per_op: f64,
    /// Bytes written to storage per operation (`/proc/self/io`).
    pub write_bytes_per_op: f64,
    /// CPU seconds used per second of the phase (2.0 = both cores of this machine).
    pub cpu_busy: f64,
}

/// One index mode's results.
#[derive(Debug, Clone, Serialize)]
pub struct ModeReport {
    /// Index mode.
    pub mode: String,
    /// Preload rate, records/s.
    pub preload_per_sec: f64,
    /// Records after all phases.
    pub records: u64,
    /// SQLite database bytes per record (without the WAL).
    pub db_bytes_per_record: f64,
    /// WAL bytes at the end, all partitions.
    pub wal_bytes: u64,
    /// Index file bytes per record, after the preload's merge (0 without a hash index).
    pub index_bytes_per_record: f64,
    /// The phases.
    pub phases: Vec<Phase>,
}

/// Runs the benchmark; `progress` hears a line per step.
pub fn run(opts: &Options, mut progress: impl FnMut(&str)) -> anyhow::Result<Vec<ModeReport>> {
    let temp = match &opts.data_dir {
        Some(_) => None,
        None => Some(tempfile::tempdir()?),
    };
    let base = opts.data_dir.as_deref().or(temp.as_ref().map(|t| t.path())).expect("one of the two");
    let mut reports = Vec::new();
    for &mode in &opts.modes {
        let dir = base.join(mode.as_str());
        let create = CreateOptions { partitions: Some(opts.partitions), index: Some(mode), ..CreateOptions::default() };
        let config = opts.config.clone();
        let preload_per_sec = if Layout::new(&dir).exists() {
            progress(&format!("{mode}: reusing {}", dir.display()));
            0.0
        } else {
            progress(&format!("{mode}: preloading {} records", opts.records));
            preload(&dir, create, &config, opts)?
        };
        let store = Store::open_or_create(&dir, create, config)?;
        store.merge_indexes()?;
        let stats = store.stats();
        let records = stats.sum(|p| p.records).max(1);
        let index_bytes = stats.sum(|p| p.index_bytes);
        // A reused directory may hold keys inserted by earlier runs: continue after them.
        let next_insert = AtomicU64::new(opts.records.max(records));
        let mut phases = Vec::new();
        for &callers in &opts.callers {
            for &phase in phase_names(mode) {
                if phase == "get" && opts.evict_before_get {
                    shardlite_proc::evict_page_cache(&dir)?;
                }
                progress(&format!("{mode}: {phase} with {callers} callers"));
                let result = run_phase(&store, &dir, mode, phase, callers, opts, &next_insert);
                progress(&format!("  {:.0} ops/s, p99 {} us", result.ops_per_sec, result.p99_us));
                phases.push(result);
            }
        }
        let stats = store.stats();
        let db_bytes: u64 = stats.partitions.iter().map(|p| p.db_bytes).sum();
        let wal_bytes: u64 = stats.partitions.iter().map(|p| p.wal_bytes).sum();
        let final_records: u64 = stats.partitions.iter().map(|p| p.records).sum();
        reports.push(ModeReport {
            mode: mode.to_string(),
            preload_per_sec,
            records: final_records,
            db_bytes_per_record: db_bytes as f64 / final_records.max(1) as f64,
            wal_bytes,
            index_bytes_per_record: index_bytes as f64 / records as f64,
            phases,
        });
        drop(store);
        if temp.is_some() {
            std::fs::remove_dir_all(&dir)?;
        }
    }
    Ok(reports)
}

fn phase_names(mode: IndexMode) -> &'static [&'static str] {
    match mode {
        IndexMode::None => &["insert"],
        _ => &["insert", "update", "get"],
    }
}

/// Loads records `0..records` with fsync off and big batches, then closes (checkpointing).
fn preload(dir: &Path, create: CreateOptions, config: &Config, opts: &Options) -> anyhow::Result<f64> {
    let fast = Config { synchronous: Synchronous::Off, ..config.clone() };
    let store = Store::create(dir, create, fast)?;
    let started = Instant::now();
    let next = AtomicU64::new(0);
    const CHUNK: u64 = 20_000;
    std::thread::scope(|s| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| -> anyhow::Result<()> {
                    loop {
                        let from = next.fetch_add(CHUNK, Ordering::Relaxed);
                        if from >= opts.records {
                            return Ok(());
                        }
                        let ops = (from..(from + CHUNK).min(opts.records))
                            .map(|i| Op::Put {
                                key: keyspace::key(opts.seed, i, opts.key_size),
                                value: keyspace::value(opts.seed, i, opts.value_size),
                                condition: Condition::None,
                            })
                            .collect();
                        for r in store.batch(ops)? {
                            r?;
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("preload thread panicked")?;
        }
        Ok(())
    })?;
    let rate = opts.records as f64 / started.elapsed().as_secs_f64();
    store.close();
    Ok(rate)
}

fn run_phase(
    store: &Store,
    dir: &Path,
    mode: IndexMode,
    phase: &str,
    callers: usize,
    opts: &Options,
    next_insert: &AtomicU64,
) -> Phase {
    let (process0, disk0) = (ProcessStats::read(), DiskStats::for_path(dir));
    let started = Instant::now();
    let deadline = started + opts.phase;
    let results: Vec<(Histogram<u64>, u64)> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..callers)
            .map(|t| {
                s.spawn(move || {
                    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
                    let mut errors = 0;
                    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    while Instant::now() < deadline {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let existing = rng % opts.records;
                        let op_started = Instant::now();
                        let ok = match phase {
                            "insert" => {
                                let i = next_insert.fetch_add(1, Ordering::Relaxed);
                                let key = keyspace::key(opts.seed, i, opts.key_size);
                                let value = keyspace::value(opts.seed, i, opts.value_size);
                                store.put(&key, value, Condition::None).is_ok()
                            }
                            "update" => {
                                let key = keyspace::key(opts.seed, existing, opts.key_size);
                                let value = keyspace::value(opts.seed ^ rng, existing, opts.value_size);
                                store.put(&key, value, Condition::Present).is_ok()
                            }
                            _ => {
                                let key = keyspace::key(opts.seed, existing, opts.key_size);
                                matches!(store.get(&key), Ok(Some(_)))
                            }
                        };
                        let _ = hist.record(op_started.elapsed().as_micros() as u64);
                        errors += u64::from(!ok);
                    }
                    (hist, errors)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("caller thread panicked")).collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let process = ProcessStats::read().since(&process0);
    let disk = DiskStats::for_path(dir).since(&disk0);
    let cpu = process.cpu_seconds();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut errors = 0;
    for (h, e) in &results {
        hist.add(h).expect("same bounds");
        errors += e;
    }
    let ops = hist.len();
    let per_op = |x: u64| x as f64 / ops.max(1) as f64;
    Phase {
        mode: mode.to_string(),
        phase: phase.to_string(),
        callers,
        ops,
        errors,
        ops_per_sec: ops as f64 / elapsed,
        p50_us: hist.value_at_quantile(0.5),
        p99_us: hist.value_at_quantile(0.99),
        p999_us: hist.value_at_quantile(0.999),
        max_us: hist.max(),
        disk_reads_per_op: per_op(disk.reads),
        read_bytes_per_op: per_op(process.read_bytes),
        write_bytes_per_op: per_op(process.write_bytes),
        cpu_busy: cpu / elapsed,
    }
}

/// The results as a text table, one line per phase, as the first prototype's results are
/// written (`docs/sizing.md`).
pub fn render(reports: &[ModeReport]) -> String {
    let mut out = String::new();
    for r in reports {
        out.push_str(&format!(
            "index {:<6} preload {:>9.0} rec/s  {} records  db {:.1} B/rec  index {:.2} B/rec  wal {:.1} MiB\n",
            r.mode,
            r.preload_per_sec,
            r.records,
            r.db_bytes_per_record,
            r.index_bytes_per_record,
            r.wal_bytes as f64 / 1048576.0
        ));
        for p in &r.phases {
            out.push_str(&format!(
                "  {:<6} callers {:>3} {:>9.0} ops/s  p50 {:>6} us  p99 {:>7} us  max {:>8} us  \
                 disk reads/op {:>5.2}  rd {:>7.0} B/op  wr {:>7.0} B/op  cpu {:.2}  errors {}\n",
                p.phase,
                p.callers,
                p.ops_per_sec,
                p.p50_us,
                p.p99_us,
                p.max_us,
                p.disk_reads_per_op,
                p.read_bytes_per_op,
                p.write_bytes_per_op,
                p.cpu_busy,
                p.errors
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tiny_run_measures_every_phase() {
        let opts = Options {
            records: 2_000,
            callers: vec![2],
            phase: Duration::from_millis(100),
            partitions: 2,
            config: Config { synchronous: Synchronous::Off, ..Config::default() },
            ..Options::default()
        };
        let reports = run(&opts, |_| {}).unwrap();
        assert_eq!(reports.len(), 3);
        let hash = &reports[0];
        assert_eq!(hash.phases.len(), 3);
        assert!(hash.index_bytes_per_record > 0.0);
        let inserted = hash.phases[0].ops;
        assert_eq!(hash.records, 2_000 + inserted, "every acknowledged insert is a new record");
        assert!(hash.phases.iter().all(|p| p.ops > 0 && p.errors == 0), "{:?}", hash.phases);
        assert_eq!(reports[2].phases.len(), 1, "index none only inserts");
        assert!(render(&reports).contains("index hash"));
    }
}
