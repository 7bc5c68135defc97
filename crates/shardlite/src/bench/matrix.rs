//! `shardlite bench matrix`: for each configuration of [`shardlite_bench::matrix::CONFIGS`] (or
//! those chosen), `shardlite load` a fresh directory of its index mode, spawn a server with its
//! flags, run the workloads, stop it, remove the directory; then print one table with a row per
//! configuration and a column per workload (docs/bench.md). With `--with-postgres URL` or
//! `--spawn-postgres` (a throwaway cluster), one more row: `shardlite serve --backend` on a fresh
//! table, loaded with the same records through `POST /batch`, measured the same way.

#[cfg(feature = "postgres")]
use std::{path::Path, time::Duration};

#[cfg(feature = "postgres")]
use shardlite_bench::{
    cost::{Local, ServerStats},
    http::Target,
    preload::{self, DataSet},
    report::{RunReport, ServerInfo},
    server_process::ServerProcess,
};
use shardlite_bench::{
    matrix::{self, Config, Matrix, MatrixRow},
    workload::Workload,
};
#[cfg(feature = "postgres")]
use shardlite_postgres::{cluster::BENCH_TUNING, Cluster};

#[cfg(feature = "postgres")]
use super::run_workloads;
use super::{new_report, spawned, write_html, BenchArgs, Dist};

/// How long PostgreSQL's statistics may take to count the loaded records (`/stats` records).
#[cfg(feature = "postgres")]
const COUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// Flags of `shardlite bench matrix`.
#[derive(Debug, clap::Args)]
pub struct MatrixArgs {
    /// Configurations, comma separated: rollback, wal, immediate, normal, mmap, no-group-commit,
    /// index-sqlite, index-none (inserts only).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "rollback,wal,immediate,normal,mmap,no-group-commit,index-sqlite,index-none"
    )]
    configs: Vec<String>,
    /// Workloads, comma separated: noop, select, update, insert, mix.
    #[arg(long, value_delimiter = ',', default_value = "select,update,insert,mix")]
    workloads: Vec<String>,
    /// Records loaded into each configuration's fresh directory.
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Partitions of each directory.
    #[arg(long, default_value_t = 16)]
    partitions: u32,
    /// Connections; a list (`10,100`) runs every configuration at each (a table row each).
    #[arg(long, visible_alias = "connections", value_delimiter = ',', default_value = "64")]
    concurrency: Vec<usize>,
    /// Also measure PostgreSQL at this URL (postgres://USER[:PASSWORD]@HOST:PORT/DB) behind the
    /// same HTTP server (`serve --backend`), in a fresh table that is dropped afterwards.
    #[cfg(feature = "postgres")]
    #[arg(long, value_name = "URL", conflicts_with = "spawn_postgres")]
    with_postgres: Option<String>,
    /// Also measure PostgreSQL on a throwaway cluster made from the system's binaries (initdb,
    /// pg_ctl), tuned for the benchmark and removed afterwards (docs/bench.md).
    #[cfg(feature = "postgres")]
    #[arg(long)]
    spawn_postgres: bool,
    /// Connections of the PostgreSQL server's pool [default: one per core].
    #[cfg(feature = "postgres")]
    #[arg(long)]
    pg_pool_size: Option<usize>,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Warm-up seconds before each run's measured window.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Threads of the generator.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Print the report as JSON (with a top-level `matrix`); the table goes to stderr.
    #[arg(long)]
    json: bool,
    /// Also write the report as a self-contained HTML page with charts to this file.
    #[arg(long)]
    html: Option<std::path::PathBuf>,
}

/// Runs `shardlite bench matrix`.
pub fn run(m: &MatrixArgs) -> anyhow::Result<()> {
    let configs: Vec<Config> =
        m.configs.iter().map(|c| matrix::find(c)).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    let workloads: Vec<Workload> =
        m.workloads.iter().map(|w| w.parse()).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    anyhow::ensure!(m.concurrency.iter().all(|&c| c > 0), "--concurrency must be positive");
    #[cfg(feature = "postgres")]
    anyhow::ensure!(m.pg_pool_size != Some(0), "--pg-pool-size must be positive");
    anyhow::ensure!(
        m.records > 0 || !workloads.iter().any(|w| w.reads_existing()),
        "{} read existing records: give --records > 0",
        m.workloads.join(",")
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(m.threads.max(1))
        .thread_name("shardlite-bench")
        .enable_all()
        .build()?;
    // Started before anything is measured, stopped and removed when dropped (also on errors).
    #[cfg(feature = "postgres")]
    let cluster = if m.spawn_postgres { Some(Cluster::start(BENCH_TUNING)?) } else { None };
    #[cfg(feature = "postgres")]
    let pg_url = m.with_postgres.clone().or_else(|| cluster.as_ref().map(|c| c.url.clone()));
    let (runs, rows) = runtime.block_on(async {
        let exe = std::env::current_exe()?;
        let temp = tempfile::tempdir()?;
        let mut runs = Vec::new();
        let mut rows = Vec::new();
        for config in &configs {
            let chosen: Vec<Workload> =
                workloads.iter().copied().filter(|&w| !config.inserts_only || w == Workload::Insert).collect();
            let first = runs.len();
            if !chosen.is_empty() {
                eprintln!("configuration {}: {}", config.label, config.serve_args.join(" "));
                let serve_args: Vec<String> = config.serve_args.iter().map(|s| (*s).to_owned()).collect();
                let dir = temp.path().join(config.key);
                let extra = ["--index".to_owned(), config.index.to_owned()];
                let suffix = format!(" [{}]", config.key);
                spawned(&bench_args(m, &serve_args), &exe, &dir, m.records, &extra, &chosen, &suffix, &mut runs)
                    .await?;
                std::fs::remove_dir_all(&dir)?;
            }
            rows.push(MatrixRow::new(config, (first..runs.len()).collect()));
        }
        #[cfg(feature = "postgres")]
        if let Some(url) = &pg_url {
            let first = runs.len();
            let pg_data = cluster.as_ref().map(Cluster::data);
            let serve_args = measure_postgres(m, &exe, url, pg_data.as_deref(), &workloads, &mut runs).await?;
            rows.push(MatrixRow::postgres(serve_args, (first..runs.len()).collect()));
        }
        anyhow::Ok((runs, rows))
    })?;
    #[cfg(feature = "postgres")]
    drop(cluster);
    let matrix = Matrix { workloads, concurrency: m.concurrency.clone(), configurations: rows };
    let mut report = new_report(m.threads, runs, None);
    let table = matrix::render_text(&report, &matrix);
    report.matrix = Some(matrix);
    if m.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        eprint!("{table}");
    } else {
        print!("{table}");
    }
    write_html(&report, m.html.as_deref())
}

/// The `bench` flags of one configuration's server: its `serve` flags, everything else default.
fn bench_args(m: &MatrixArgs, serve_args: &[String]) -> BenchArgs {
    BenchArgs {
        command: None,
        url: None,
        data: None,
        load: Some(m.records),
        partitions: m.partitions,
        serve_args: serve_args.to_vec(),
        pid: None,
        workloads: Vec::new(),
        concurrency: m.concurrency.clone(),
        rate: None,
        duration: m.duration,
        warmup: m.warmup,
        dist: Dist::Uniform,
        zipf_theta: 0.99,
        insert_pct: 10,
        update_pct: 10,
        records: None,
        seed: 1,
        key_size: 32,
        value_size: 32,
        threads: m.threads,
        timeout_ms: 5000,
        json: m.json,
        html: None,
    }
}

#[cfg(feature = "postgres")]
/// The `serve` flags of the PostgreSQL row: `url`, a fresh `table`, the matrix's partitions, a
/// pool of `--pg-pool-size` connections or one per core.
fn postgres_serve_args(m: &MatrixArgs, url: &str, table: &str) -> Vec<String> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let pool = m.pg_pool_size.unwrap_or(cores);
    [("--backend", url), ("--pg-table", table)]
        .into_iter()
        .map(|(flag, value)| [flag.to_owned(), value.to_owned()])
        .chain([["--partitions".to_owned(), m.partitions.to_string()], ["--pg-pool-size".to_owned(), pool.to_string()]])
        .flatten()
        .collect()
}

#[cfg(feature = "postgres")]
/// The PostgreSQL row: spawns `serve --backend url` on a fresh table, loads it through `POST
/// /batch`, runs the workloads, stops the server and drops the table. Returns the server's
/// flags as reported (no password). `data_dir`: the cluster's, if spawned (for its disk).
async fn measure_postgres(
    m: &MatrixArgs,
    exe: &Path,
    url: &str,
    data_dir: Option<&Path>,
    workloads: &[Workload],
    runs: &mut Vec<RunReport>,
) -> anyhow::Result<Vec<String>> {
    let table = shardlite_postgres::fresh_table();
    let shown = postgres_serve_args(m, &shardlite_postgres::redact(url), &table);
    eprintln!("configuration {}: {}", matrix::POSTGRES.1, shown.join(" "));
    let server = ServerProcess::start(exe, None, &postgres_serve_args(m, url, &table)).await?;
    let args = bench_args(m, &shown);
    let info = ServerInfo {
        url: server.url.clone(),
        spawned: true,
        data_dir: data_dir.map(|d| d.display().to_string()),
        serve_args: shown.clone(),
    };
    let local = Local { data_dir: data_dir.map(Path::to_owned), pid: Some(server.pid()) };
    let measured = async {
        let target = Target::resolve(&server.url).await?;
        let data =
            DataSet { records: m.records, seed: args.seed, key_size: args.key_size, value_size: args.value_size };
        eprintln!("loading {} records through POST /batch", m.records);
        preload::load(&target, data).await?;
        wait_for_count(&target, m.records).await?;
        let suffix = format!(" [{}]", matrix::POSTGRES.0);
        run_workloads(&args, &target, &local, &info, workloads, &suffix, runs).await
    }
    .await;
    let stopped = server.stop();
    let dropped = shardlite_postgres::drop_table(url, &table).await;
    measured?;
    stopped?;
    dropped?;
    Ok(shown)
}

#[cfg(feature = "postgres")]
/// Waits until `/stats` counts `records` (PostgreSQL's statistics trail its commits a little),
/// so that the first run's key space and fresh keys start from the loaded count.
async fn wait_for_count(target: &Target, records: u64) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + COUNT_TIMEOUT;
    loop {
        let counted = ServerStats::fetch(target).await.map(|s| s.records);
        if counted.is_some_and(|n| n >= records) {
            return Ok(());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "/stats counted {counted:?} records, not the {records} loaded, after {COUNT_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        matrix: MatrixArgs,
    }

    fn parse(argv: &[&str]) -> Result<MatrixArgs, clap::Error> {
        Cli::try_parse_from(["matrix"].iter().chain(argv)).map(|c| c.matrix)
    }

    #[test]
    fn postgres_joins_the_matrix_at_each_connection_count() {
        let m = parse(&[]).unwrap();
        assert_eq!(m.concurrency, [64]);
        assert!(m.with_postgres.is_none() && !m.spawn_postgres && m.pg_pool_size.is_none());
        let m = parse(&["--configs", "immediate,mmap", "--concurrency", "10,100", "--spawn-postgres"]).unwrap();
        assert_eq!((m.configs, m.concurrency), (vec!["immediate".to_owned(), "mmap".to_owned()], vec![10, 100]));
        assert!(m.spawn_postgres);
        let m = parse(&["--connections", "4", "--with-postgres", "postgres://me:pw@127.0.0.1:5432/db"]).unwrap();
        assert_eq!(m.concurrency, [4]);
        assert_eq!(bench_args(&m, &[]).concurrency, [4]);
        let err = parse(&["--with-postgres", "postgres://x", "--spawn-postgres"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn the_postgres_server_gets_its_own_table_the_partitions_and_a_pool() {
        let m = parse(&["--partitions", "8", "--pg-pool-size", "3"]).unwrap();
        let args = postgres_serve_args(&m, "postgres://u@h:1/db", "bench_1");
        let want =
            ["--backend", "postgres://u@h:1/db", "--pg-table", "bench_1", "--partitions", "8", "--pg-pool-size", "3"];
        assert_eq!(args, want);
        let cores = std::thread::available_parallelism().unwrap().get().to_string();
        let args = postgres_serve_args(&parse(&[]).unwrap(), "postgres://u@h:1/db", "t");
        assert_eq!(args[6..], ["--pg-pool-size".to_owned(), cores], "one connection per core by default");
    }
}
