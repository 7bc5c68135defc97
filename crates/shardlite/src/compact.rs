//! `shardlite compact --url URL` (a running server compacts its partitions, through
//! `POST /admin/compact`) or `--data DIR` (a directory no server has open): every partition's
//! database rewritten without the space deleted records left (docs/operations.md,
//! "Compaction"). Prints one summary line, or the whole report with `--json`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use shardlite_engine::{CompactReport, Config, Store};

/// Flags of `shardlite compact`.
#[derive(Debug, clap::Args)]
pub struct CompactArgs {
    /// A running server, e.g. http://127.0.0.1:8080; the writes of a partition being compacted
    /// (and of the others of its writer thread) wait meanwhile.
    #[arg(long, conflicts_with = "data", required_unless_present = "data")]
    pub url: Option<String>,
    /// A data directory no server has open.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The admin token for --url; better in the variable.
    #[arg(long, requires = "url", env = "SHARDLITE_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// With an `https://` --url: also trust the CAs of this PEM file (besides the system's).
    #[arg(long, value_name = "FILE", requires = "url")]
    pub tls_ca: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `shardlite compact`.
pub fn run(args: CompactArgs) -> anyhow::Result<()> {
    let report = match (&args.data, &args.url) {
        (Some(data), _) => offline(data)?,
        (None, Some(url)) => online(url, args.auth_token.as_deref(), args.tls_ca.as_deref())?,
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

/// Asks the server at `url` to compact its partitions and waits for its answer.
fn online(url: &str, token: Option<&str>, ca: Option<&Path>) -> anyhow::Result<CompactReport> {
    let url = format!("{}/admin/compact", url.trim_end_matches('/'));
    let client = crate::stats::client(ca)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let mut request = client.post(&url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.with_context(|| format!("POST {url}"))?;
        let status = response.status();
        let body = response.text().await?;
        anyhow::ensure!(status.is_success(), "POST {url}: {status}: {body}");
        serde_json::from_str(&body).with_context(|| format!("reading the answer of POST {url}"))
    })
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
