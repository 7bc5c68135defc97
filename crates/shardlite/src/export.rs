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
    stats,
};

/// Flags of `shardlite export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The data directory (no server may be running on it).
    #[arg(long, conflicts_with = "url", required_unless_present = "url")]
    pub data: Option<PathBuf>,
    /// A running server instead, e.g. http://127.0.0.1:8080: each partition from one snapshot
    /// (`GET /export`), its writers never held up.
    #[arg(long)]
    pub url: Option<String>,
    /// Bearer token for a server started with --auth-token.
    #[arg(long, requires = "url")]
    pub auth_token: Option<String>,
    /// With an `https://` --url: also trust the CAs of this PEM file (besides the system's).
    #[arg(long, value_name = "FILE", requires = "url")]
    pub tls_ca: Option<PathBuf>,
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
    let partitions = match (&args.data, &args.url) {
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
        (None, Some(url)) => {
            let client = stats::client(args.tls_ca.as_deref())?;
            download(&client, url, args.auth_token.as_deref(), args.partition, &mut out)?
        }
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

/// Exports the partitions of the server at `url` (all, or `only`), each through `GET /export`.
fn download(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    only: Option<u32>,
    out: &mut RecordWriter,
) -> anyhow::Result<Vec<u32>> {
    let stats = stats::fetch(client, url, token)?;
    let partitions = chosen(only, &stats)?;
    let bar = progress::records("exported", total(&stats, &partitions));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    for &p in &partitions {
        let url = format!("{}/export?partition={p}", url.trim_end_matches('/'));
        download_partition(&runtime, client, &url, token, out, &bar).with_context(|| format!("GET {url}"))?;
    }
    bar.finish_and_clear();
    Ok(partitions)
}

/// Writes the records of one `GET /export` stream to `out`; refuses a stream without its end.
fn download_partition(
    runtime: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    out: &mut RecordWriter,
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    let mut request = client.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = runtime.block_on(request.send())?;
    let status = response.status();
    if !status.is_success() {
        let body = runtime.block_on(response.text()).unwrap_or_default();
        anyhow::bail!("{status}: {body}");
    }
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
