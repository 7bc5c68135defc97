//! `shardlite backup --url URL --to DIR` (a running server writes the backup into DIR on its
//! machine, through `POST /admin/backup`, watched until done) or `--data DIR --to DEST` (a
//! directory no server has open), with a progress bar of bytes and rate.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use reqwest::Method;
use shardlite_engine::{
    backup::{BackupOptions, Progress},
    Config, Store,
};
use shardlite_server::backup_status::{BackupResult, BackupState, BackupStatus};

use crate::{
    progress,
    remote::{Connection, Target},
};

/// How often the progress bar asks the server how far the backup is.
const POLL: Duration = Duration::from_millis(200);

/// Flags of `shardlite backup`.
#[derive(Debug, clap::Args)]
#[command(after_help = "With --url: POST /admin/backup, a token with the admin role; the server writes the \
                        backup on its own machine.\n\nExamples:\n  shardlite backup --data /var/lib/shardlite --to \
                        /backups/today\n  \
                        shardlite backup --url http://127.0.0.1:8080 --token-file admin.token --to /backups/today")]
pub struct BackupArgs {
    #[command(flatten)]
    pub target: Target,
    /// The backup directory: new or empty (with --url: an absolute path on the server's machine).
    #[arg(long)]
    pub to: PathBuf,
    /// MiB per second to write at most (default: as fast as the disk goes, yielding to durable writes).
    #[arg(long, value_name = "MIB_PER_S")]
    pub max_rate: Option<f64>,
}

/// Runs `shardlite backup`.
pub fn run(args: BackupArgs) -> anyhow::Result<()> {
    if let Some(rate) = args.max_rate {
        anyhow::ensure!(rate > 0.0 && rate.is_finite(), "--max-rate must be a positive number of MiB/s, not {rate}");
    }
    let result = match (&args.target.data, &args.target.remote.url) {
        (Some(data), _) => offline(data, &args)?,
        (None, Some(url)) => online(&args.target.remote.auth.connect(url)?, &args)?,
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
fn online(server: &Connection, args: &BackupArgs) -> anyhow::Result<(BackupResult, f64)> {
    let to = args.to.to_str().context("--to must be valid UTF-8")?;
    let body = match args.max_rate {
        Some(rate) => serde_json::json!({ "to": to, "max_rate_mib": rate }),
        None => serde_json::json!({ "to": to }),
    };
    let mut status: BackupStatus = server.json(Method::POST, "/admin/backup", Some(body.to_string()))?;
    let bar = progress::bytes("written", 0);
    while status.state == BackupState::Running {
        bar.set_length(status.progress.bytes_total.max(status.progress.bytes_done));
        bar.set_position(status.progress.bytes_done);
        std::thread::sleep(POLL);
        status = server.json(Method::GET, "/admin/backup", None)?;
    }
    bar.finish_and_clear();
    match (status.state, status.result) {
        (BackupState::Done, Some(result)) => Ok((result, status.seconds)),
        _ => anyhow::bail!("the backup failed: {}", status.error.unwrap_or_else(|| "no reason given".into())),
    }
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
