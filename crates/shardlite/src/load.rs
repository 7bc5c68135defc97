//! `shardlite load`: the offline bulk loader on the command line, with a progress bar and a
//! one-line JSON summary.

use std::path::PathBuf;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use shardlite_bench::keyspace;
use shardlite_engine::{
    bulk::{self, Dataset, Plan},
    Config, CreateOptions, IndexMode,
};

/// Record shapes of the data sets shardlite is sized for (`docs/sizing.md`).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Shape {
    /// DB-A: 32-byte keys, 32-byte values.
    DbA,
    /// DB-C: 32-byte keys, 570-byte values.
    DbC,
}

impl Shape {
    fn sizes(self) -> (usize, usize) {
        match self {
            Shape::DbA => (32, 32),
            Shape::DbC => (32, 570),
        }
    }
}

/// Flags of `shardlite load`.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// The data directory (created if missing).
    #[arg(long)]
    pub data: PathBuf,
    /// Record shape.
    #[arg(long, value_enum, default_value = "db-a")]
    pub shape: Shape,
    /// Records to add after those the directory's data set already has.
    #[arg(long)]
    pub records: u64,
    /// Partitions of a new directory (default 256; an existing one keeps its own).
    #[arg(long)]
    pub partitions: Option<u32>,
    /// Index mode of a new directory (default hash; an existing one keeps its own).
    #[arg(long)]
    pub index: Option<IndexMode>,
    /// Seed of the key space.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Key size, overriding the shape's.
    #[arg(long)]
    pub key_size: Option<usize>,
    /// Value size, overriding the shape's.
    #[arg(long)]
    pub value_size: Option<usize>,
    /// Print a one-line JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `shardlite load`.
pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    let (key_size, value_size) = args.shape.sizes();
    let dataset = Dataset {
        seed: args.seed,
        key_size: args.key_size.unwrap_or(key_size),
        value_size: args.value_size.unwrap_or(value_size),
    };
    anyhow::ensure!((1..=shardlite_engine::MAX_KEY_LEN).contains(&dataset.key_size), "--key-size must be 1..=1024");
    let create = CreateOptions { partitions: args.partitions, index: args.index, ..CreateOptions::default() };
    let bar = ProgressBar::new(args.records).with_style(
        ProgressStyle::with_template("{bar:40} {human_pos}/{human_len} records, {per_sec}, eta {eta}")
            .expect("a valid template"),
    );
    let generate = |i: u64, key: &mut Vec<u8>, value: &mut Vec<u8>| {
        key.extend_from_slice(&keyspace::key(dataset.seed, i, dataset.key_size));
        value.extend_from_slice(&keyspace::value(dataset.seed, i, dataset.value_size));
    };
    let summary = bulk::load(
        &args.data,
        &create,
        &Config::default(),
        &Plan::new(dataset, args.records),
        &generate,
        &|done, _| bar.set_position(done),
    )
    .with_context(|| format!("loading into {}", args.data.display()))?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        println!(
            "loaded records {}..{} ({} appended) into {}: {} records in all, {:.0} records/s \
             ({:.1} s appending, {:.1} s writing indexes and checkpointing)",
            summary.start,
            summary.end,
            summary.appended,
            args.data.display(),
            summary.records,
            summary.records_per_sec,
            summary.append_seconds,
            summary.finish_seconds
        );
    }
    Ok(())
}
