//! `shardlite bench-engine`: the storage engine benchmark (no HTTP) on the command line, and
//! `--set name=value` for any engine setting.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use shardlite_engine::{Config, IndexMode, Synchronous};

use crate::engine_bench;

/// Flags of `shardlite bench-engine`.
#[derive(Debug, clap::Args)]
pub struct BenchEngineArgs {
    /// Records preloaded before measuring.
    #[arg(long, default_value_t = 2_000_000)]
    pub records: u64,
    /// Partitions.
    #[arg(long, default_value_t = 16)]
    pub partitions: u32,
    /// Caller thread counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    pub callers: Vec<usize>,
    /// Index modes to compare, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "hash,sqlite,none")]
    pub modes: Vec<IndexMode>,
    /// Seconds per phase.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// SQLite synchronous setting for the measured phases.
    #[arg(long, default_value = "full")]
    pub synchronous: Synchronous,
    /// Writer threads.
    #[arg(long, default_value_t = Config::default().writer_threads)]
    pub writer_threads: usize,
    /// SQLite page cache per connection, KiB.
    #[arg(long, default_value_t = Config::default().cache_size_kib)]
    pub cache_size_kib: u32,
    /// Any other engine setting, as `name=value` (the TOML key of the engine configuration),
    /// e.g. `--set checkpoint_pages=1000`. Repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub settings: Vec<String>,
    /// Drop the data files from the page cache before each get phase.
    #[arg(long)]
    pub evict: bool,
    /// Keep the data directories here (DIR/hash, DIR/sqlite, ...) and reuse them on the next run
    /// instead of preloading again. Default: a temporary directory, removed afterwards.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `shardlite bench-engine`.
pub fn run(args: BenchEngineArgs) -> anyhow::Result<()> {
    let opts = engine_bench::Options {
        records: args.records,
        modes: args.modes,
        callers: args.callers,
        phase: Duration::from_secs_f64(args.seconds),
        evict_before_get: args.evict,
        data_dir: args.data,
        partitions: args.partitions,
        config: with_settings(
            Config {
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
