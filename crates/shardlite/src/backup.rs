//! `shardlite backup --url URL --to DIR` (a running server writes the backup into DIR on its
//! machine, through `POST /admin/backup`, watched until done) or `--data DIR --to DEST` (a
//! directory no server has open), with a progress bar of bytes and rate.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use shardlite_engine::{
    backup::{BackupOptions, Progress},
    Config, Store,
};
use shardlite_server::backup_status::{BackupResult, BackupState, BackupStatus};

use crate::progress;

/// How often the progress bar asks the server how far the backup is.
const POLL: Duration = Duration::from_millis(200);

/// Flags of `shardlite backup`.
#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// A running server, e.g. http://127.0.0.1:8080: it writes the backup on its own machine.
    #[arg(long, conflicts_with = "data", required_unless_present = "data")]
    pub url: Option<String>,
    /// A data directory no server has open (offline backup).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The backup directory: new or empty (with --url: an absolute path on the server's machine).
    #[arg(long)]
    pub to: PathBuf,
    /// Bearer token for a server started with --auth-token.
    #[arg(long, requires = "url")]
    pub auth_token: Option<String>,
    /// MiB per second to write at most (default: as fast as the disk goes, yielding to durable writes).
    #[arg(long, value_name = "MIB_PER_S")]
    pub max_rate: Option<f64>,
}

/// Runs `shardlite backup`.
pub fn run(args: BackupArgs) -> anyhow::Result<()> {
    if let Some(rate) = args.max_rate {
        anyhow::ensure!(rate > 0.0 && rate.is_finite(), "--max-rate must be a positive number of MiB/s, not {rate}");
    }
    let result = match (&args.data, &args.url) {
        (Some(data), _) => offline(data, &args)?,
        (None, Some(url)) => online(url, &args)?,
        (None, None) => anyhow::bail!("give --url or --data"),
    };
    println!("{}", render(&result, &args.to));
    Ok(())
}

/// A backup of a directory no server has open: the store is opened here (recovering it as any
/// open does), backed up, and closed.
fn offline(data: &std::path::Path, args: &BackupArgs) -> anyhow::Result<(BackupResult, f64)> {
    let store = Store::open(data, Config::inspection()).with_context(|| format!("opening {}", data.display()))?;
    let options = BackupOptions { max_rate: args.max_rate.map(mib_to_bytes) };
    let progress = Progress::default();
    let bar = progress::bytes("written", 0);
    let report = || {
        let r = progress.report();
        (r.bytes_done, r.bytes_total)
    };
    let summary = progress::watch(&bar, report, || store.backup(&args.to, &options, &progress))?;
    let result = BackupResult {
        records: summary.manifest.records(),
        partitions: summary.manifest.partitions.len(),
        bytes: summary.bytes,
        longest_stall_us: summary.longest_stall_us,
    };
    Ok((result, summary.seconds))
}

/// A backup written by a running server: started, then watched until it ends.
fn online(url: &str, args: &BackupArgs) -> anyhow::Result<(BackupResult, f64)> {
    let url = format!("{}/admin/backup", url.trim_end_matches('/'));
    let to = args.to.to_str().context("--to must be valid UTF-8")?;
    let body = match args.max_rate {
        Some(rate) => serde_json::json!({ "to": to, "max_rate_mib": rate }),
        None => serde_json::json!({ "to": to }),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let request = |r: reqwest::RequestBuilder| match &args.auth_token {
            Some(token) => r.bearer_auth(token),
            None => r,
        };
        let mut status = send(request(client.post(&url).body(body.to_string())), "POST", &url).await?;
        let bar = progress::bytes("written", 0);
        while status.state == BackupState::Running {
            bar.set_length(status.progress.bytes_total.max(status.progress.bytes_done));
            bar.set_position(status.progress.bytes_done);
            tokio::time::sleep(POLL).await;
            status = send(request(client.get(&url)), "GET", &url).await?;
        }
        bar.finish_and_clear();
        match (status.state, status.result) {
            (BackupState::Done, Some(result)) => Ok((result, status.seconds)),
            _ => anyhow::bail!("the backup failed: {}", status.error.unwrap_or_else(|| "no reason given".into())),
        }
    })
}

async fn send(request: reqwest::RequestBuilder, method: &str, url: &str) -> anyhow::Result<BackupStatus> {
    let response = request.send().await.with_context(|| format!("{method} {url}"))?;
    let status = response.status();
    let body = response.text().await?;
    anyhow::ensure!(status.is_success(), "{method} {url}: {status}: {body}");
    serde_json::from_str(&body).with_context(|| format!("reading the answer of {method} {url}"))
}

fn mib_to_bytes(mib: f64) -> u64 {
    (mib * 1048576.0) as u64
}

/// One line: what was written, how fast, where, and how long a writer waited at most.
fn render((result, seconds): &(BackupResult, f64), to: &std::path::Path) -> String {
    let mib = result.bytes as f64 / 1048576.0;
    format!(
        "backup of {} records in {} partitions written to {}: {mib:.1} MiB in {seconds:.1} s ({:.1} MiB/s); \
         longest writer stall {} µs",
        result.records,
        result.partitions,
        to.display(),
        mib / seconds.max(1e-9),
        result.longest_stall_us
    )
}
