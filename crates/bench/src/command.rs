//! `shardlite bench`: the HTTP load generator on the command line (docs/bench.md). With no
//! arguments it is the README's demonstration: spawn a server on a temporary directory, load
//! 200,000 DB-A records, run every workload for a few seconds, then `insert` against a second
//! spawned server with `--index none`, and print the table. `--url` measures any server that
//! speaks `GET/PUT /kv/{key}` instead; when that server is a node of a cluster (`GET /cluster`
//! answers a map), each request goes straight to its key's owner ([`crate::cluster`]), unless
//! `--no-cluster-routing`. `shardlite bench matrix` ([`crate::matrix`]) runs the
//! workloads under each SQLite configuration (and PostgreSQL) side by side.
//!
//! The flags become typed values at once: [`Measure`] (how every workload is measured) and
//! [`Spawn`] (a server to start); everything after works on those ([`crate::measure`]).

use std::{path::PathBuf, sync::Arc, time::Duration};

use shardlite_engine::{layout::Layout, CreateOptions, IndexMode};

use crate::{
    cluster::ClusterRoutes,
    cold::{self, ByteSize},
    cost::Local,
    http::Target,
    matrix::MatrixArgs,
    measure::{new_report, run_workloads, runtime, spawned, write_html, Measure, Spawn},
    report::{self, Report, ServerInfo},
    workload::{KeyDist, Mix, Workload},
};

/// The pseudo-workload `insert` against a second spawned server created with `--index none`.
const INSERT_NO_INDEX: &str = "insert-noindex";

/// Flags of `shardlite bench`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    /// Measure this server (`http://host:port`, or `https://`) instead of spawning one.
    #[arg(long)]
    url: Option<String>,
    /// With a --url that is a node of a cluster: send every request to that node (which forwards
    /// what it does not own), rather than each straight to its key's owner by the map of
    /// `GET /cluster`.
    #[arg(long, requires = "url")]
    no_cluster_routing: bool,
    /// With an `https://` --url: also trust the CAs of this PEM file (besides the system's).
    #[arg(long, value_name = "FILE", requires = "url")]
    tls_ca: Option<PathBuf>,
    /// Spawned server: its data directory (default: a temporary one, removed afterwards).
    /// With `--url`: the server's data directory, for the disk's counters.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Spawned server: records to `shardlite load` first [default: 200000 into a new directory,
    /// 0 into an existing one].
    #[arg(long)]
    load: Option<u64>,
    /// Spawned server: partitions of a new directory.
    #[arg(long, default_value_t = CreateOptions::DEFAULT_PARTITIONS)]
    partitions: u32,
    /// Spawned server: evict its data directory's files from the page cache, measure the
    /// device's random 4 KiB reads/s under them, and run the server with its memory, page cache
    /// included, limited to MEM (`200MiB`; default: an eighth of the directory's size, at least
    /// 64 MiB), so that its data is read from the disk (docs/bench.md, "Cold").
    #[arg(long, value_name = "MEM", num_args = 0..=1, require_equals = true)]
    cold: Option<Option<ByteSize>>,
    /// Spawned server: one more `shardlite serve` flag, e.g. `--serve-arg=--synchronous=normal`.
    /// Repeatable.
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    serve_args: Vec<String>,
    /// With `--url`: the server's process id, for its RSS.
    #[arg(long)]
    pid: Option<u32>,
    /// Workloads, comma separated: noop, select, update, insert, mix, and insert-noindex (insert
    /// against a second spawned server with `--index none`).
    #[arg(long, value_delimiter = ',', default_value = "noop,select,update,insert,mix,insert-noindex")]
    workloads: Vec<String>,
    /// Connections; a list (`1,2,4,8,16,64`) runs each workload at each.
    #[arg(long, value_delimiter = ',', default_value = "64")]
    concurrency: Vec<usize>,
    /// Open loop at this many requests/s in all (latency from each request's intended start);
    /// default: closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Measured seconds per run.
    #[arg(long, default_value_t = Measure::default().duration.as_secs_f64())]
    duration: f64,
    /// Warm-up seconds before each run's measured window.
    #[arg(long, default_value_t = Measure::default().warmup.as_secs_f64())]
    warmup: f64,
    /// Key choice for selects and updates.
    #[arg(long, value_enum, default_value = "uniform")]
    dist: Dist,
    /// The zipfian exponent.
    #[arg(long, default_value_t = 0.99)]
    zipf_theta: f64,
    /// Percent of inserts in `mix`.
    #[arg(long, default_value_t = Mix::default().insert_pct)]
    insert_pct: u8,
    /// Percent of updates in `mix` (the rest are selects).
    #[arg(long, default_value_t = Mix::default().update_pct)]
    update_pct: u8,
    /// Key space `0..records` for selects and updates [default: the server's record count from
    /// `/stats`]. Needed with `--url` for a server without `/stats`.
    #[arg(long)]
    records: Option<u64>,
    /// Seed of the key space (as given to `shardlite load`).
    #[arg(long, default_value_t = Measure::default().seed)]
    seed: u64,
    /// Key bytes.
    #[arg(long, default_value_t = Measure::default().key_size)]
    key_size: usize,
    /// Value bytes of inserts and updates.
    #[arg(long, default_value_t = Measure::default().value_size)]
    value_size: usize,
    /// Threads of the generator.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// A request without an answer after this many ms is a timeout error.
    #[arg(long, default_value_t = Measure::default().timeout.as_millis() as u64)]
    timeout_ms: u64,
    /// Print the report as JSON (schema: docs/bench.md).
    #[arg(long)]
    json: bool,
    /// Also write the report as a self-contained HTML page with charts to this file.
    #[arg(long)]
    html: Option<PathBuf>,
}

/// Subcommands of `shardlite bench`.
#[derive(Debug, clap::Subcommand)]
enum BenchCommand {
    /// Run the workloads against a restarted server per SQLite configuration (rollback journal,
    /// WAL, + IMMEDIATE, + synchronous NORMAL, + mmap, group commit off, index modes), and
    /// PostgreSQL if asked (--with-postgres, --spawn-postgres), and print them side by side.
    Matrix(MatrixArgs),
}

/// Key choice.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Dist {
    Uniform,
    Zipfian,
}

impl From<&BenchArgs> for Measure {
    fn from(args: &BenchArgs) -> Self {
        Self {
            concurrency: args.concurrency.clone(),
            rate: args.rate,
            warmup: Duration::from_secs_f64(args.warmup),
            duration: Duration::from_secs_f64(args.duration),
            timeout: Duration::from_millis(args.timeout_ms),
            mix: Mix { insert_pct: args.insert_pct, update_pct: args.update_pct },
            dist: match args.dist {
                Dist::Uniform => KeyDist::Uniform,
                Dist::Zipfian => KeyDist::Zipfian { theta: args.zipf_theta },
            },
            records: args.records,
            seed: args.seed,
            key_size: args.key_size,
            value_size: args.value_size,
        }
    }
}

/// Runs `shardlite bench`.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    if let Some(BenchCommand::Matrix(m)) = &args.command {
        return crate::matrix::run(m);
    }
    anyhow::ensure!(args.insert_pct as u16 + args.update_pct as u16 <= 100, "--insert-pct + --update-pct > 100");
    anyhow::ensure!(args.concurrency.iter().all(|&c| c > 0), "--concurrency must be positive");
    let report = runtime(args.threads)?.block_on(run_all(args))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report::render_text(&report));
    }
    write_html(&report, args.html.as_deref())
}

async fn run_all(args: &BenchArgs) -> anyhow::Result<Report> {
    let measure = Measure::from(args);
    let (no_index, indexed): (Vec<&str>, Vec<&str>) =
        args.workloads.iter().map(String::as_str).partition(|w| *w == INSERT_NO_INDEX);
    let indexed: Vec<Workload> =
        indexed.iter().map(|w| w.parse()).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    let mut runs = Vec::new();
    if let Some(url) = &args.url {
        anyhow::ensure!(no_index.is_empty(), "{INSERT_NO_INDEX} needs a spawned server (no --url)");
        anyhow::ensure!(args.cold.is_none(), "--cold needs a spawned server (no --url)");
        let target = Target::resolve_trusting(url, args.tls_ca.as_deref()).await?;
        let data_dir = match &args.data {
            Some(d) => Some(d.clone()),
            None if target.is_local() => stats_data_dir(&target).await,
            None => None,
        };
        let server = ServerInfo {
            url: url.clone(),
            spawned: false,
            data_dir: data_dir.as_ref().map(|d| d.display().to_string()),
            serve_args: Vec::new(),
        };
        let local = Local { data_dir, pid: args.pid, cold: None };
        let routes = match args.no_cluster_routing {
            true => None,
            false => ClusterRoutes::discover(&target, args.tls_ca.as_deref()).await?.map(Arc::new),
        };
        if let Some(routes) = &routes {
            let nodes: Vec<&str> = routes.nodes.iter().map(|(id, _)| id.as_str()).collect();
            eprintln!(
                "{url} is a node of a cluster (map version {}): each request goes to its owner among {}",
                routes.version,
                nodes.join(", ")
            );
        }
        run_workloads(&measure, &target, routes.as_ref(), &local, &server, &indexed, "", &mut runs).await?;
    } else {
        let temp = tempfile::tempdir()?;
        let create = CreateOptions { partitions: Some(args.partitions), ..CreateOptions::default() };
        if !indexed.is_empty() {
            let dir = args.data.clone().unwrap_or_else(|| temp.path().join("hash"));
            let fresh_dir = !Layout::new(&dir).exists();
            let load = args.load.unwrap_or(if fresh_dir { 200_000 } else { 0 });
            let cold = args.cold.map(|mem| mem.map_or(cold::Limit::OfData, |ByteSize(b)| cold::Limit::Bytes(b)));
            let spawn = Spawn { dir: &dir, load, create, serve_args: args.serve_args.clone(), cold };
            spawned(&measure, &spawn, &indexed, "", &mut runs).await?;
        }
        if !no_index.is_empty() {
            let dir = temp.path().join("none");
            let create = CreateOptions { index: Some(IndexMode::None), ..create };
            let spawn = Spawn { dir: &dir, load: 0, create, serve_args: args.serve_args.clone(), cold: None };
            spawned(&measure, &spawn, &[Workload::Insert], " (index none)", &mut runs).await?;
        }
    }
    Ok(new_report(args.threads, runs, None))
}

/// The data directory a local shardlite server reports in `/stats`.
async fn stats_data_dir(target: &Target) -> Option<PathBuf> {
    let (status, body) = target.get("/stats", Duration::from_secs(5)).await.ok()?;
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    v.get("store")?.get("data_dir")?.as_str().map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    #[test]
    fn no_arguments_is_the_demonstration() {
        let a = Cli::parse_from(["bench"]).bench;
        assert_eq!(a.workloads, ["noop", "select", "update", "insert", "mix", "insert-noindex"]);
        assert!(a.url.is_none() && a.rate.is_none() && a.load.is_none());
        assert_eq!((a.concurrency.as_slice(), a.duration, a.warmup), (&[64][..], 5.0, 1.0));
        assert_eq!(Measure::from(&a), Measure::default(), "the flags' defaults are the demonstration's");
        assert_eq!(a.partitions, 256, "measured at serve's default partition count");
        let a =
            Cli::parse_from(["bench", "--concurrency", "1,2,4", "--serve-arg=--synchronous=normal", "--rate", "100"])
                .bench;
        assert_eq!(a.concurrency, [1, 2, 4]);
        assert_eq!(a.serve_args, ["--synchronous=normal"]);
        assert_eq!(a.rate, Some(100.0));
        assert!(a.command.is_none() && a.html.is_none() && a.cold.is_none());
        assert_eq!(Cli::parse_from(["bench", "--cold"]).bench.cold, Some(None));
        assert_eq!(Cli::parse_from(["bench", "--cold=200MiB"]).bench.cold, Some(Some(ByteSize(200 << 20))));
        assert!(Cli::try_parse_from(["bench", "--cold=lots"]).is_err());
        assert!(Cli::try_parse_from(["bench", "--json", "matrix"]).is_err(), "bench flags do not apply to matrix");
    }
}
