//! `shardlite export`: every record of a stopped data directory (or of one partition), with its
//! counter, in any format `import` reads, so `import(export(d))` reproduces `d`'s keys, values
//! and counters. Each partition is read in one read transaction, in id order.

use std::{path::PathBuf, time::Instant};

use anyhow::Context;
use serde::Serialize;
use shardlite_engine::{Config, Store};

use crate::{
    progress,
    records::{write::RecordWriter, Encoding, Format},
};

/// Flags of `shardlite export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The data directory (no server may be running on it).
    #[arg(long)]
    pub data: PathBuf,
    /// Where to write (default standard output); `.zst` and `.gz` compress.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Format (default: the one `--out`'s name says, else csv).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Encoding of keys and values in csv, tsv and jsonl.
    #[arg(long, value_enum, default_value = "hex")]
    pub encoding: Encoding,
    /// Export this partition only.
    #[arg(long)]
    pub partition: Option<u32>,
    /// Print a one-line JSON summary (on standard error when the records go to standard output).
    #[arg(long)]
    pub json: bool,
}

/// What an export did.
#[derive(Debug, Serialize)]
struct ExportSummary {
    records: u64,
    partitions: u32,
    seconds: f64,
    records_per_sec: f64,
}

/// Runs `shardlite export`.
pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let store =
        Store::open(&args.data, Config::inspection()).with_context(|| format!("opening {}", args.data.display()))?;
    let all = store.manifest().partitions;
    let partitions: Vec<u32> = match args.partition {
        Some(p) => {
            anyhow::ensure!(p < all, "--partition {p}: the directory has partitions 0..{all}");
            vec![p]
        }
        None => (0..all).collect(),
    };
    let total: u64 = partitions.iter().map(|&p| store.stats().partitions[p as usize].records).sum();
    let format = args.format.or_else(|| args.out.as_deref().and_then(Format::of_name)).unwrap_or(Format::Csv);
    let mut out = RecordWriter::create(args.out.as_deref(), format, args.encoding)?;
    let bar = progress::records("exported", total);
    for &p in &partitions {
        store.scan(p, 0, u64::MAX, true, |r| {
            out.record(r.key, r.value, r.version.counter).map_err(|e| shardlite_engine::Error::Io {
                path: args.out.clone().unwrap_or_else(|| "-".into()),
                message: e.to_string(),
            })?;
            bar.inc(1);
            Ok(())
        })?;
    }
    let records = out.finish()?;
    bar.finish_and_clear();
    store.close();
    let seconds = started.elapsed().as_secs_f64();
    let summary = ExportSummary {
        records,
        partitions: partitions.len() as u32,
        seconds,
        records_per_sec: records as f64 / seconds,
    };
    let line = match args.json {
        true => serde_json::to_string(&summary)?,
        false => format!(
            "exported {records} records from {} partitions, {:.0} records/s",
            summary.partitions, summary.records_per_sec
        ),
    };
    // The records may be on standard output: the summary goes to standard error then.
    match args.out {
        Some(_) => println!("{line}"),
        None => eprintln!("{line}"),
    }
    Ok(())
}
