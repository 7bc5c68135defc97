//! The `shardlite` binary: parses the command line and hands each subcommand to its crate.

mod backup;
mod check;
mod cluster;
mod compact;
mod export;
mod import;
mod interrupt;
mod litestream;
mod load;
mod logging;
mod progress;
mod records;
mod remote;
mod restore;
mod serve;
mod stats;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc's malloc: buffers allocated on one thread and freed on another
/// (HTTP worker -> lookup or writer thread) are the norm here (see docs/http-api.md, "Performance notes").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An HTTP key-value server on partitioned SQLite, with its bulk loader, import and export,
/// backups and restores, cluster tools and benchmark.
#[derive(Debug, Parser)]
#[command(
    version,
    about = "An HTTP key-value server on partitioned SQLite, with its loader, import and export, backups, cluster \
             tools and benchmark",
    after_help = "Start with:\n  shardlite serve --data /var/lib/shardlite   (then: curl -X PUT --data-binary hi \
                  http://127.0.0.1:8080/kv/6b6579)\n  shardlite bench                            (a demonstration: \
                  spawns a server, loads it, measures it)\n\nEach command's --help has examples; docs/ has the rest."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP key-value API (docs/http-api.md) from a data directory until SIGTERM or Ctrl-C.
    #[command(after_help = "Tuning settings (threads, queues, page and cache sizes, checkpoints, the commit log) \
                            are left out of this list: docs/operations.md, \"Settings\", has them all. Every \
                            setting is also a variable (SHARDLITE_ and its name: SHARDLITE_MAX_BATCH) and a key of \
                            --config FILE.toml.\n\nExamples:\n  shardlite serve --data /var/lib/shardlite\n  \
                            shardlite serve --data /var/lib/shardlite --listen 0.0.0.0:8080 --auth-token-file \
                            /etc/shardlite/tokens\n  shardlite serve --config /etc/shardlite/shardlite.toml")]
    Serve(Box<serve::ServeArgs>),
    /// Benchmark a server over HTTP: workloads, cost and latency (docs/bench.md). With no
    /// arguments: spawn a server, load 200,000 records, run every workload, print the table.
    #[command(after_help = "Examples:\n  shardlite bench\n  shardlite bench --url http://127.0.0.1:8080 --workloads \
                            select,insert --concurrency 100 --duration 10\n  shardlite bench matrix --spawn-postgres")]
    Bench(Box<shardlite_bench::BenchArgs>),
    /// Benchmark the storage engine directly (no HTTP): insert, update and get per index mode.
    #[command(after_help = "Example:\n  shardlite bench-engine --records 100000")]
    BenchEngine(shardlite_bench::BenchEngineArgs),
    /// Bulk-load a deterministic data set into a data directory (offline, at full speed).
    #[command(after_help = "Example:\n  shardlite load --data /tmp/db-a --records 10000000 --shape db-a")]
    Load(load::LoadArgs),
    /// Import records from csv, tsv, jsonl or bin files: all or nothing, at bulk-load speed
    /// (docs/import-export.md). Stop the server first: the import needs the directory to itself.
    #[command(after_help = "Examples:\n  shardlite import --data /var/lib/shardlite records.csv\n  \
                            zstdcat dump.jsonl.zst | shardlite import --data /var/lib/shardlite --format jsonl -\n  \
                            shardlite import --data /var/lib/shardlite --resume     (finish an interrupted import)")]
    Import(import::ImportArgs),
    /// Export every record, with its counter, as csv, tsv, jsonl or bin (docs/import-export.md).
    Export(export::ExportArgs),
    /// Records and bytes of a data directory, per partition and in total.
    Stats(stats::StatsArgs),
    /// Verify every partition of a data directory: SQLite integrity and index <-> data.
    Check(check::CheckArgs),
    /// Give the space deleted records left back to the file system: every partition of a
    /// running server (--url) or of a data directory no server has open (--data)
    /// (docs/operations.md, "Compaction").
    Compact(compact::CompactArgs),
    /// Back up a running server (--url) or a data directory no server has open (--data):
    /// every partition, its index and a checksummed manifest (docs/operations.md).
    Backup(backup::BackupArgs),
    /// Write the Litestream config that replicates every partition of a data directory
    /// (docs/operations.md, "Continuous replication (Litestream)").
    #[command(after_help = "Example:\n  shardlite litestream-config --data /var/lib/shardlite --replica \
                            s3://bucket/shardlite --out /etc/litestream.yml")]
    LitestreamConfig(litestream::LitestreamConfigArgs),
    /// Make a new data directory from a copy, verifying it: a backup (--from) or Litestream's
    /// replicas (--from-litestream) (docs/operations.md).
    Restore(restore::RestoreArgs),
    /// A cluster of nodes whose map is in etcd: create the map, show it, move a partition, fail
    /// a dead node over (docs/cluster.md).
    Cluster(cluster::ClusterArgs),
}

fn main() -> ExitCode {
    // No transparent huge pages: mimalloc asks for them on its arenas, and every 2 MiB region a
    // thread touches then stays resident whole. Measured at 256 partitions under GET load:
    // 143 MB RSS with them, 83 MB without (the same as glibc's malloc), throughput alike.
    let _ = nix::sys::prctl::set_thp_disable(true);
    // rustls's crypto for every TLS client and server of the process (reqwest is built without
    // a provider of its own): ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    // The server installs its logger itself, as its settings say; the tools log warnings.
    let _logs = match &cli.command {
        Command::Serve(_) => None,
        _ => match logging::init("warn", logging::LogFormat::Text, None) {
            Ok(guard) => Some(guard),
            Err(err) => {
                eprintln!("Error: {err:?}");
                return ExitCode::FAILURE;
            }
        },
    };
    // The commands that hold a data directory or write a file themselves stop in order.
    let offline = matches!(
        &cli.command,
        Command::Export(_) | Command::Import(_) | Command::Check(_) | Command::Stats(_) | Command::Load(_)
    );
    if let Err(err) = offline.then(interrupt::catch).transpose() {
        eprintln!("Error: catching Ctrl-C: {err}");
        return ExitCode::FAILURE;
    }
    let done = match cli.command {
        Command::Serve(args) => serve::run(&args),
        Command::Bench(args) => shardlite_bench::command::run(&args),
        Command::BenchEngine(args) => shardlite_bench::engine_bench::command::run(args),
        Command::Load(args) => load::run(args),
        Command::Import(args) => import::run(args),
        Command::Export(args) => export::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Backup(args) => backup::run(args),
        Command::Compact(args) => compact::run(args),
        Command::LitestreamConfig(args) => litestream::run_config(args),
        Command::Restore(args) => restore::run(args),
        Command::Cluster(args) => cluster::run(args),
        // Its exit status says what it found (0 clean, 1 findings, 2 could not run).
        Command::Check(args) => return check::run(args),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if interrupt::caused(&err) => {
            eprintln!("{err:#}");
            ExitCode::from(interrupt::EXIT_STATUS)
        }
        Err(err) => {
            eprintln!("Error: {err:?}");
            ExitCode::FAILURE
        }
    }
}
