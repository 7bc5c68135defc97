//! `shardlite bench matrix`: for each configuration of [`shardlite_bench::matrix::CONFIGS`] (or
//! those chosen), `shardlite load` a fresh directory of its index mode, spawn a server with its
//! flags, run the workloads, stop it, remove the directory; then print one table with a row per
//! configuration and a column per workload (docs/bench.md).

use shardlite_bench::{
    matrix::{self, Config, Matrix, MatrixRow},
    workload::Workload,
};

use super::{new_report, spawned, write_html, BenchArgs, Dist};

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
    /// Connections.
    #[arg(long, visible_alias = "connections", default_value_t = 64)]
    concurrency: usize,
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
    anyhow::ensure!(m.concurrency > 0, "--concurrency must be positive");
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
                let dir = temp.path().join(config.key);
                let extra = ["--index".to_owned(), config.index.to_owned()];
                let suffix = format!(" [{}]", config.key);
                spawned(&bench_args(m, config), &exe, &dir, m.records, &extra, &chosen, &suffix, &mut runs).await?;
                std::fs::remove_dir_all(&dir)?;
            }
            rows.push(MatrixRow::new(config, (first..runs.len()).collect()));
        }
        anyhow::Ok((runs, rows))
    })?;
    let matrix = Matrix { workloads, configurations: rows };
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
fn bench_args(m: &MatrixArgs, config: &Config) -> BenchArgs {
    BenchArgs {
        command: None,
        url: None,
        data: None,
        load: Some(m.records),
        partitions: m.partitions,
        serve_args: config.serve_args.iter().map(|s| (*s).to_owned()).collect(),
        pid: None,
        workloads: Vec::new(),
        concurrency: vec![m.concurrency],
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
