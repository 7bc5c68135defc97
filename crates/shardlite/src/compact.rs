//! `shardlite compact --url URL` (a running server compacts its partitions, through
//! `POST /admin/compact`) or `--data DIR` (a directory no server has open): every partition's
//! database rewritten without the space deleted records left (docs/operations.md,
//! "Compaction"). Prints one summary line, or the whole report with `--json`.

use std::path::Path;

use anyhow::Context;
use shardlite_engine::{CompactReport, Config, Store};

use crate::remote::Target;

/// Flags of `shardlite compact`.
#[derive(Debug, clap::Args)]
#[command(after_help = "With --url: POST /admin/compact, a token with the admin role; the writes of a partition \
                        being compacted (and of the others of its writer thread) wait meanwhile.\n\nExamples:\n  \
                        shardlite compact --data /var/lib/shardlite\n  \
                        shardlite compact --url http://127.0.0.1:8080 --token-file admin.token")]
pub struct CompactArgs {
    #[command(flatten)]
    pub target: Target,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `shardlite compact`.
pub fn run(args: CompactArgs) -> anyhow::Result<()> {
    let report = match (&args.target.data, &args.target.remote.url) {
        (Some(data), _) => offline(data)?,
        (None, Some(url)) => {
            args.target.remote.auth.connect(url)?.json(reqwest::Method::POST, "/admin/compact", None)?
        }
        (None, None) => anyhow::bail!("give --url or --data"),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", render(&report));
    }
    Ok(())
}

/// Compacts a directory no server has open: opened here (recovering it as any open does),
/// compacted, closed.
fn offline(data: &Path) -> anyhow::Result<CompactReport> {
    let store = Store::open(data, Config::inspection()).with_context(|| format!("opening {}", data.display()))?;
    let report = store.compact()?;
    store.close();
    Ok(report)
}

/// One line: the space before and after, and the longest a writer waited.
fn render(report: &CompactReport) -> String {
    let mib = |bytes: u64| bytes as f64 / 1048576.0;
    let left: u64 = report.partitions.iter().map(|p| p.frames_left).sum();
    let mut line = format!(
        "compacted {} partitions: {:.1} MiB -> {:.1} MiB; longest writer stall {} µs",
        report.partitions.len(),
        mib(report.bytes_before),
        mib(report.bytes_after),
        report.longest_stall_us
    );
    if left > 0 {
        line.push_str(&format!(
            "; {left} WAL frames wait for readers to finish before the files shrink to their compacted size"
        ));
    }
    line
}
