//! The `shardlite` binary: parses the command line and hands each subcommand to its crate.

mod check;
mod export;
mod import;
mod litestream;
mod load;
mod progress;
mod records;
mod restore;
mod serve;
mod stats;

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc's malloc: buffers allocated on one thread and freed on another
/// (HTTP worker -> lookup or writer thread) are the norm here (see docs/http-api.md, "Performance notes").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An HTTP key-value server on partitioned SQLite.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP key-value API (docs/http-api.md) from a data directory until SIGTERM or Ctrl-C.
    Serve(Box<serve::ServeArgs>),
    /// Benchmark a server over HTTP: workloads, cost and latency (docs/bench.md). With no
    /// arguments: spawn a server, load 200,000 records, run every workload, print the table.
    Bench(Box<shardlite_bench::BenchArgs>),
    /// Benchmark the storage engine directly (no HTTP): insert, update and get per index mode.
    BenchEngine(shardlite_bench::BenchEngineArgs),
    /// Bulk-load a deterministic data set into a data directory (offline, at full speed).
    Load(load::LoadArgs),
    /// Import records from csv, tsv, jsonl or bin files: all or nothing, at bulk-load speed
    /// (docs/import-export.md).
    Import(import::ImportArgs),
    /// Export every record, with its counter, as csv, tsv, jsonl or bin (docs/import-export.md).
    Export(export::ExportArgs),
    /// Records and bytes of a data directory, per partition and in total.
    Stats(stats::StatsArgs),
    /// Verify every partition of a data directory: SQLite integrity and index <-> data.
    Check(check::CheckArgs),
    /// Write the Litestream config that replicates every partition of a data directory
    /// (docs/operations.md, "Continuous replication (Litestream)").
    LitestreamConfig(litestream::LitestreamConfigArgs),
    /// Restore a data directory from a copy: Litestream's replicas (--from-litestream).
    Restore(restore::RestoreArgs),
}

fn main() -> anyhow::Result<()> {
    // No transparent huge pages: mimalloc asks for them on its arenas, and every 2 MiB region a
    // thread touches then stays resident whole. Measured at 256 partitions under GET load:
    // 143 MB RSS with them, 83 MB without (the same as glibc's malloc), throughput alike.
    let _ = nix::sys::prctl::set_thp_disable(true);
    let cli = Cli::parse();
    // The server logs its start, shutdown and errors at `info`; the tools only warnings.
    let default_filter = if matches!(cli.command, Command::Serve(_)) { "info" } else { "warn" };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Serve(args) => serve::run(&args),
        Command::Bench(args) => shardlite_bench::command::run(&args),
        Command::BenchEngine(args) => shardlite_bench::engine_bench::command::run(args),
        Command::Load(args) => load::run(args),
        Command::Import(args) => import::run(args),
        Command::Export(args) => export::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Check(args) => check::run(args),
        Command::LitestreamConfig(args) => litestream::run_config(args),
        Command::Restore(args) => restore::run(args),
    }
}
