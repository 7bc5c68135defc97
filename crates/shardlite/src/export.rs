//! `shardlite export`: every record of a stopped data directory or of a running server (or of
//! one partition), with its counter, in any format `import` reads, so `import(export(d))`
//! reproduces `d`'s keys, values and counters. Each partition is read in one read transaction,
//! in id order: from the directory, or by the server (`GET /export`) as a `bin` stream.

use std::{
    io::{BufReader, Read},
    path::PathBuf,
    time::Instant,
};

use anyhow::Context;
use bytes::{Buf, Bytes};
use indicatif::ProgressBar;
use serde::Serialize;
use shardlite_engine::{Config, Store, StoreStats};

use crate::{
    interrupt, progress,
    records::{
        read::{self, Bad},
        write::RecordWriter,
        Encoding, Format,
    },
    remote::{Connection, Target},
};

/// Flags of `shardlite export`.
#[derive(Debug, clap::Args)]
#[command(after_help = "With --url: GET /export of each partition, from one snapshot each, its writers never \
                        held up; a token with the read role.\n\nExamples:\n  shardlite export --data \
                        /var/lib/shardlite --out all.bin.zst\n  \
                        shardlite export --url http://127.0.0.1:8080 --token-file read.token --out all.csv")]
pub struct ExportArgs {
    #[command(flatten)]
    pub target: Target,
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

/// Runs `shardlite export`. Standard output closed early by its reader (`export | head`) ends
/// the export quietly, as it does any Unix filter.
pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let to_stdout = args.out.is_none();
    match export(args) {
        Err(e) if to_stdout && broken_pipe(&e) => Ok(()),
        result => result,
    }
}

/// Whether `e` comes from writing to a pipe nobody reads any more.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn export(args: ExportArgs) -> anyhow::Result<()> {
    let out = args.out.clone();
    export_to(args).map_err(|err| match interrupt::caused(&err) {
        true => err.context(match out {
            Some(out) => format!("the export stopped: {} was not written (its partial file removed)", out.display()),
            None => "the export stopped: what was written to standard output is incomplete".to_owned(),
        }),
        false => err,
    })
}

fn export_to(args: ExportArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let format = args.format.or_else(|| args.out.as_deref().and_then(Format::of_name)).unwrap_or(Format::Csv);
    let mut out = RecordWriter::create(args.out.as_deref(), format, args.encoding)?;
    let partitions = match (&args.target.data, &args.target.remote.url) {
        (Some(data), _) => {
            let store =
                Store::open(data, Config::inspection()).with_context(|| format!("opening {}", data.display()))?;
            let partitions = chosen(args.partition, &store.stats())?;
            let bar = progress::records("exported", total(&store.stats(), &partitions));
            for &p in &partitions {
                // The writer's own error, kept whole (the scan only hears that it must stop).
                let mut failed = None;
                let scanned = store.scan(p, 0, u64::MAX, true, |r| {
                    let written = interrupt::check().map_err(anyhow::Error::new);
                    match written.and_then(|()| out.record(r.key, r.value, r.version.counter)) {
                        Ok(()) => {
                            bar.inc(1);
                            Ok(())
                        }
                        Err(e) => {
                            failed = Some(e);
                            Err(shardlite_engine::Error::Closed)
                        }
                    }
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                scanned?;
            }
            bar.finish_and_clear();
            store.close();
            partitions
        }
        (None, Some(url)) => download(&args.target.remote.auth.connect(url)?, args.partition, &mut out)?,
        (None, None) => anyhow::bail!("give --data or --url"),
    };
    let records = out.finish()?;
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

/// The partitions to export: `only`, or all of them.
fn chosen(only: Option<u32>, stats: &StoreStats) -> anyhow::Result<Vec<u32>> {
    let all = stats.manifest.partitions;
    match only {
        Some(p) => {
            anyhow::ensure!(p < all, "--partition {p}: the directory has partitions 0..{all}");
            Ok(vec![p])
        }
        None => Ok((0..all).collect()),
    }
}

/// Records in `partitions`, as the stats counted them.
fn total(stats: &StoreStats, partitions: &[u32]) -> u64 {
    partitions.iter().map(|&p| stats.partitions[p as usize].records).sum()
}

/// Exports the partitions of a server (all, or `only`), each through `GET /export`: the first
/// answer's `Shardlite-Partitions` says how many there are (a `read` token is all it takes).
fn download(server: &Connection, only: Option<u32>, out: &mut RecordWriter) -> anyhow::Result<Vec<u32>> {
    let bar = progress::count("exported");
    let first = only.unwrap_or(0);
    let partitions = download_partition(server, first, out, &bar)?;
    let chosen = match only {
        Some(p) => vec![p],
        None => (0..partitions).collect(),
    };
    for &p in chosen.iter().skip(1) {
        download_partition(server, p, out, &bar)?;
    }
    bar.finish_and_clear();
    Ok(chosen)
}

/// Writes the records of partition `p`'s `GET /export` stream to `out`; refuses a stream
/// without its end. The server's partition count.
fn download_partition(server: &Connection, p: u32, out: &mut RecordWriter, bar: &ProgressBar) -> anyhow::Result<u32> {
    let path = format!("/export?partition={p}");
    let response = server.stream(&path)?;
    let partitions = response.headers().get("shardlite-partitions").and_then(|v| v.to_str().ok()?.parse().ok());
    let partitions = partitions.with_context(|| format!("GET {path}: no Shardlite-Partitions header"))?;
    let runtime = server.runtime();
    let mut stream = BufReader::with_capacity(256 << 10, Download { runtime, response, chunk: Bytes::new() });
    read::read(Format::Bin, Encoding::Hex, &mut stream, &mut |record| match record {
        Ok(r) => {
            interrupt::check()?;
            out.record(r.key, r.value, r.counter.unwrap_or(1))?;
            bar.inc(1);
            Ok(())
        }
        Err(Bad { position, what, .. }) => anyhow::bail!("the server's stream, byte {position}: {what}"),
    })
    .with_context(|| format!("GET {path}"))?;
    Ok(partitions)
}

/// A response body read as it arrives.
struct Download<'a> {
    runtime: &'a tokio::runtime::Runtime,
    response: reqwest::Response,
    chunk: Bytes,
}

impl Read for Download<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.runtime.block_on(self.response.chunk()) {
                Ok(Some(chunk)) => self.chunk = chunk,
                Ok(None) => return Ok(0),
                Err(e) => return Err(std::io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk.advance(n);
        Ok(n)
    }
}
