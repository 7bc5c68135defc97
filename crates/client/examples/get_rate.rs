//! GETs per second through `shardlite_client::Client`: CONNECTIONS tasks sharing one client
//! (so one pooled connection each) read random keys of a loaded server for SECONDS after a
//! warm-up, on a runtime of THREADS worker threads — `shardlite bench --url URL --workloads
//! select --concurrency C` does the same with its own hand-driven connections, so the ratio
//! of the two rates is the client's overhead (docs/clients.md, "Overhead").
//!
//! The keys are the server's own, listed through `GET /keys` (up to `--keys`).
//!
//! ```sh
//! cargo run --release -p shardlite-client --example get_rate -- --url http://127.0.0.1:8080
//! ```

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use clap::Parser;
use shardlite_client::Client;
use shardlite_proc::ProcessStats;

/// The allocator of the `shardlite` binary, whose `bench` generator this is compared with: the
/// two are measured alike, and the difference is the client's (a program using the client
/// chooses its own allocator).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
struct Args {
    /// The server.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Bearer token.
    #[arg(long, env = "SHARDLITE_TOKEN")]
    token: Option<String>,
    /// Tasks, each with one request in flight.
    #[arg(long, default_value_t = 100)]
    connections: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of GETs before the measured window.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Worker threads of the runtime (`shardlite bench` uses 2).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Keys to read from (listed from the server).
    #[arg(long, default_value_t = 200_000)]
    keys: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(args.threads).enable_all().build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let mut builder = Client::builder(&args.url).timeout(Duration::from_secs(10));
    if let Some(token) = &args.token {
        builder = builder.token(token);
    }
    let client = builder.build()?;
    let keys = Arc::new(list_keys(&client, args.keys).await?);
    anyhow::ensure!(!keys.is_empty(), "the server holds no keys: load some first");
    let measuring = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.warmup + args.duration);
    let tasks: Vec<_> = (0..args.connections)
        .map(|task| {
            let (client, keys, measuring) = (client.clone(), Arc::clone(&keys), Arc::clone(&measuring));
            tokio::spawn(async move {
                let mut random = 0x9e37_79b9_7f4a_7c15_u64 ^ (task as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                // Counted by each task, as `bench` records per connection: no counter shared
                // between the runtime's threads.
                let (mut ok, mut errors) = (0_u64, 0_u64);
                while Instant::now() < end {
                    random ^= random << 13;
                    random ^= random >> 7;
                    random ^= random << 17;
                    let key = &keys[(random % keys.len() as u64) as usize];
                    let answered = matches!(client.get(key).await, Ok(Some(_)));
                    if measuring.load(Ordering::Relaxed) {
                        *(if answered { &mut ok } else { &mut errors }) += 1;
                    }
                }
                (ok, errors)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    measuring.store(true, Ordering::Relaxed);
    let (measured, cpu_before) = (Instant::now(), ProcessStats::read().cpu_seconds());
    let (mut ok, mut errors) = (0, 0);
    for task in tasks {
        let (task_ok, task_errors) = task.await?;
        (ok, errors) = (ok + task_ok, errors + task_errors);
    }
    let (elapsed, cpu) = (measured.elapsed().as_secs_f64(), ProcessStats::read().cpu_seconds() - cpu_before);
    println!(
        "client GET: {:.0} requests/s ({ok} in {elapsed:.2} s, {errors} errors; {} connections, {} keys; \
         this process's CPU {:.1} us a request)",
        ok as f64 / elapsed,
        args.connections,
        keys.len(),
        cpu * 1e6 / ok.max(1) as f64
    );
    Ok(())
}

/// Up to `max` of the server's keys, partition by partition.
async fn list_keys(client: &Client, max: usize) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    let partitions = client.keys(0, None, 1).await?.partitions;
    for partition in 0..partitions {
        let mut after = None;
        while keys.len() < max {
            let page = client.keys(partition, after.as_deref(), 10_000).await?;
            keys.extend(page.keys.into_iter().map(|(key, _)| key).take(max - keys.len()));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    Ok(keys)
}
