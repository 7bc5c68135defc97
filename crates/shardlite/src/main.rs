//! The `shardlite` binary: parses the command line and hands each subcommand to its crate.

mod load;
mod serve;
mod stats;

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand};
use shardlite_bench::engine_bench;
use shardlite_engine::{Config, IndexMode, Store, Synchronous};

/// mimalloc instead of glibc's malloc: buffers allocated on one thread and freed on another
/// (HTTP worker -> lookup or writer thread) are the norm here (see docs/http-api.md, "Performance notes").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An HTTP key-value server on partitioned SQLite.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP key-value API (SPEC §2) from a data directory until SIGTERM or Ctrl-C.
    Serve(Box<serve::ServeArgs>),
    /// Benchmark the storage engine directly (no HTTP): insert, update and get per index mode.
    BenchEngine(BenchEngineArgs),
    /// Bulk-load a deterministic data set into a data directory (offline, at full speed).
    Load(load::LoadArgs),
    /// Records and bytes of a data directory, per partition and in total.
    Stats(stats::StatsArgs),
    /// Verify every partition of a data directory: SQLite integrity and index <-> data.
    Check {
        /// The data directory.
        #[arg(long)]
        data: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, clap::Args)]
struct BenchEngineArgs {
    /// Records preloaded before measuring.
    #[arg(long, default_value_t = 2_000_000)]
    records: u64,
    /// Partitions.
    #[arg(long, default_value_t = 16)]
    partitions: u32,
    /// Caller thread counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    callers: Vec<usize>,
    /// Index modes to compare, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "hash,sqlite,none")]
    modes: Vec<IndexMode>,
    /// Seconds per phase.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// SQLite synchronous setting for the measured phases.
    #[arg(long, default_value = "full")]
    synchronous: Synchronous,
    /// Writer threads.
    #[arg(long, default_value_t = Config::default().writer_threads)]
    writer_threads: usize,
    /// SQLite page cache per connection, KiB.
    #[arg(long, default_value_t = Config::default().cache_size_kib)]
    cache_size_kib: u32,
    /// Any other engine setting, as `name=value` (the TOML key of the engine configuration),
    /// e.g. `--set checkpoint_pages=1000`. Repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    settings: Vec<String>,
    /// Drop the data files from the page cache before each get phase.
    #[arg(long)]
    evict: bool,
    /// Keep the data directories here (DIR/hash, DIR/sqlite, ...) and reuse them on the next run
    /// instead of preloading again. Default: a temporary directory, removed afterwards.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The server logs its start, shutdown and errors at `info`; the tools only warnings.
    let default_filter = if matches!(cli.command, Command::Serve(_)) { "info" } else { "warn" };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Serve(args) => serve::run(&args),
        Command::BenchEngine(args) => bench_engine(args),
        Command::Load(args) => load::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Check { data, json } => check(data, json),
    }
}

fn bench_engine(args: BenchEngineArgs) -> anyhow::Result<()> {
    let opts = engine_bench::Options {
        records: args.records,
        modes: args.modes,
        callers: args.callers,
        phase: Duration::from_secs_f64(args.seconds),
        evict_before_get: args.evict,
        data_dir: args.data,
        config: with_settings(
            Config {
                partitions: args.partitions,
                synchronous: args.synchronous,
                writer_threads: args.writer_threads,
                cache_size_kib: args.cache_size_kib,
                ..Config::default()
            },
            &args.settings,
        )?,
        ..engine_bench::Options::default()
    };
    let reports = engine_bench::run(&opts, |line| eprintln!("{line}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print!("{}", engine_bench::render(&reports));
    }
    Ok(())
}

/// Applies `name=value` settings to a configuration, with the names and value syntax of its
/// TOML form.
fn with_settings(config: Config, settings: &[String]) -> anyhow::Result<Config> {
    let mut table = toml::Table::try_from(&config)?;
    for setting in settings {
        let (name, value) = setting.split_once('=').with_context(|| format!("`{setting}` is not NAME=VALUE"))?;
        let value: toml::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
            .or_else(|_| toml::from_str::<toml::Table>(&format!("v = \"{value}\"")))
            .with_context(|| format!("bad value in `{setting}`"))?
            .remove("v")
            .expect("parsed a table with v");
        table.insert(name.trim().to_owned(), value);
    }
    Ok(table.try_into()?)
}

fn check(data: PathBuf, json: bool) -> anyhow::Result<()> {
    let store =
        Store::open_existing(&data, Config::default()).with_context(|| format!("opening {}", data.display()))?;
    let reports = store.check()?;
    let bad = reports.iter().filter(|r| !r.is_ok()).count();
    if json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        for r in &reports {
            let verdict = if r.is_ok() { "ok" } else { "FAILED" };
            println!(
                "p{:04} {verdict}: {} records, sqlite {}, index {} + {} entries, {} missing, {} extra, {} stale",
                r.partition,
                r.records,
                r.sqlite,
                r.index_file_entries,
                r.index_recent_entries,
                r.missing_entries,
                r.extra_entries,
                r.stale_entries
            );
            for p in &r.problems {
                println!("  {p}");
            }
        }
    }
    anyhow::ensure!(bad == 0, "{bad} of {} partitions failed the check", reports.len());
    Ok(())
}
