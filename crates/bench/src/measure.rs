//! Measuring servers, for `shardlite bench` and `bench matrix` alike: how every workload is
//! measured ([`Measure`]), a server to spawn ([`Spawn`]), the runs against one server
//! ([`run_workloads`], [`spawned`]), and the report they make.

use std::{path::Path, sync::Arc, time::Duration};

use anyhow::Context;
use shardlite_engine::{layout::Layout, CreateOptions};

use crate::{
    cluster::ClusterRoutes,
    cold::{self, ColdServer},
    cost::{Local, ServerStats},
    html,
    http::Target,
    preload::DataSet,
    report::{self, Generator, Matrix, Report, RunReport, ServerInfo},
    runner::{self, RunOptions},
    schedule::Schedule,
    server_process::{self, ServerProcess},
    workload::{FreshKeys, KeyDist, Mix, Workload},
};

/// How every workload of an invocation is measured, whatever the server.
#[derive(Debug, Clone, PartialEq)]
pub struct Measure {
    /// Connection counts: each workload runs at each.
    pub concurrency: Vec<usize>,
    /// Open loop at this many requests/s in all; `None`: closed loop.
    pub rate: Option<f64>,
    /// Requests before each measured window.
    pub warmup: Duration,
    /// Each measured window.
    pub duration: Duration,
    /// A request without an answer after this long is a timeout error.
    pub timeout: Duration,
    /// Proportions of `mix`.
    pub mix: Mix,
    /// Key choice for selects and updates.
    pub dist: KeyDist,
    /// Key space `0..records` for selects and updates; `None`: the server's record count.
    pub records: Option<u64>,
    /// Seed of the key space.
    pub seed: u64,
    /// Key bytes.
    pub key_size: usize,
    /// Value bytes of inserts and updates.
    pub value_size: usize,
}

impl Default for Measure {
    /// The demonstration's: 64 connections, closed loop, 1 s of warm-up and 5 s measured, the
    /// sizing's mix (`docs/sizing.md`), uniform keys, DB-A's 32-byte keys and values of key space 1.
    fn default() -> Self {
        Self {
            concurrency: vec![64],
            rate: None,
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
            mix: Mix::default(),
            dist: KeyDist::Uniform,
            records: None,
            seed: 1,
            key_size: 32,
            value_size: 32,
        }
    }
}

/// A server to start on a data directory, loaded first.
#[derive(Debug, Clone)]
pub struct Spawn<'a> {
    /// Its data directory.
    pub dir: &'a Path,
    /// Records to `shardlite load` into it first (0: none).
    pub load: u64,
    /// What a new directory is created with; an existing one keeps its own.
    pub create: CreateOptions,
    /// Its other `shardlite serve` flags.
    pub serve_args: Vec<String>,
    /// `--cold`: started with its files evicted from the page cache, under this memory limit.
    pub cold: Option<cold::Limit>,
}

/// The generator's runtime, on `threads` threads.
pub fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name("shardlite-bench")
        .enable_all()
        .build()
}

/// Writes the HTML report to `path`, if given.
pub fn write_html(report: &Report, path: Option<&Path>) -> anyhow::Result<()> {
    if let Some(path) = path {
        std::fs::write(path, html::render(report)).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The report of `runs` made by this generator.
pub fn new_report(threads: usize, runs: Vec<RunReport>, matrix: Option<Matrix>) -> Report {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Report {
        schema_version: report::SCHEMA_VERSION,
        generator: Generator { version: env!("CARGO_PKG_VERSION").to_owned(), threads, cores },
        runs,
        matrix,
    }
}

/// Loads (if asked), starts the server of `spawn`, runs `workloads` against it, stops it.
pub async fn spawned(
    measure: &Measure,
    spawn: &Spawn<'_>,
    workloads: &[Workload],
    suffix: &str,
    runs: &mut Vec<RunReport>,
) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let dir = spawn.dir;
    if spawn.load > 0 {
        eprintln!("loading {} records into {}", spawn.load, dir.display());
        let data = DataSet {
            records: spawn.load,
            seed: measure.seed,
            key_size: measure.key_size,
            value_size: measure.value_size,
        };
        server_process::load(&exe, dir, &spawn.create, data)?;
    }
    // A new directory gets our settings of a new directory; an existing one keeps its own (the
    // server refuses ones that differ from the directory's).
    let mut serve_args = Vec::new();
    if !Layout::new(dir).exists() {
        serve_args.extend(server_process::create_args(&spawn.create));
    }
    serve_args.extend(spawn.serve_args.iter().cloned());
    let cold = match spawn.cold {
        Some(limit) => Some(Arc::new(ColdServer::prepare(dir, limit, &measure.concurrency)?)),
        None => None,
    };
    let command = cold.as_ref().map_or_else(|| std::process::Command::new(&exe), |c| c.command(&exe));
    let server = match ServerProcess::start_from(command, Some(dir), &serve_args).await {
        Ok(server) => server,
        Err(e) => match cold.and_then(|c| c.explain_failed_start()) {
            Some(why) => return Err(e.context(why)),
            None => return Err(e),
        },
    };
    let target = Target::resolve(&server.url).await?;
    if let Some(cold) = &cold {
        cold.settle(&target).await;
    }
    let info = ServerInfo {
        url: server.url.clone(),
        spawned: true,
        data_dir: Some(dir.display().to_string()),
        serve_args: serve_args.clone(),
    };
    let local = Local { data_dir: Some(dir.to_owned()), pid: Some(server.pid()), cold };
    let result = run_workloads(measure, &target, None, &local, &info, workloads, suffix, runs).await;
    let stopped = server.stop();
    result?;
    stopped
}

/// Each workload at each concurrency against one server, or against the cluster `routes`
/// describes (each request to its key's owner; `target` is one of its nodes). Inserts of later
/// runs continue where earlier ones stopped.
#[allow(clippy::too_many_arguments)]
pub async fn run_workloads(
    measure: &Measure,
    target: &Target,
    routes: Option<&Arc<ClusterRoutes>>,
    local: &Local,
    server: &ServerInfo,
    workloads: &[Workload],
    suffix: &str,
    runs: &mut Vec<RunReport>,
) -> anyhow::Result<()> {
    let mut next_fresh = 0;
    for &workload in workloads {
        for &connections in &measure.concurrency {
            // A node's /stats counts only its own partitions' records.
            let stats = match routes {
                None => ServerStats::fetch(target).await,
                Some(_) => None,
            };
            let records = match (measure.records, stats) {
                (Some(r), _) => r,
                (None, Some(s)) => s.records,
                (None, None) if workload.reads_existing() => match routes {
                    Some(_) => {
                        anyhow::bail!("{} is a node of a cluster: give --records (the whole key space)", server.url)
                    }
                    None => anyhow::bail!("{} has no /stats: give --records", server.url),
                },
                (None, None) => 0,
            };
            if workload.reads_existing() {
                anyhow::ensure!(records > 0, "{workload} needs loaded records (the key space is empty)");
            }
            // Above the record count and above every index this invocation already inserted.
            let first_fresh = next_fresh.max(stats.map_or(records, |s| s.records));
            let fresh = Arc::new(FreshKeys::starting_at(first_fresh));
            let opts = RunOptions {
                workload,
                mix: measure.mix,
                dist: measure.dist,
                schedule: match measure.rate {
                    Some(rate) => Schedule::Open { connections, rate },
                    None => Schedule::Closed { connections },
                },
                warmup: measure.warmup,
                duration: measure.duration,
                timeout: measure.timeout,
                records,
                seed: measure.seed,
                key_size: measure.key_size,
                value_size: measure.value_size,
            };
            let mut name = format!("{workload}{suffix}");
            if measure.concurrency.len() > 1 {
                name.push_str(&format!(" c={connections}"));
            }
            eprintln!(
                "running {name}: {connections} connections, {:.1} s + {:.1} s warm-up",
                measure.duration.as_secs_f64(),
                measure.warmup.as_secs_f64()
            );
            let result = runner::run(target, routes, local, &opts, &fresh).await;
            next_fresh = fresh.next();
            let mut run = RunReport::new(name, server.clone(), opts, &result, first_fresh, next_fresh);
            run.cold = local.cold.as_ref().map(|c| c.report(connections, run.cost.disk_reads_per_sec));
            eprintln!("{}", report::summary_line(&run));
            for node in &run.nodes {
                let share = 100.0 * node.direct as f64 / node.sent.max(1) as f64;
                eprintln!("  node {}: {} requests, {} direct ({share:.1}%)", node.node, node.sent, node.direct);
            }
            if let Some(line) = report::cold_line(&run) {
                eprintln!("{line}");
            }
            runs.push(run);
        }
    }
    Ok(())
}
