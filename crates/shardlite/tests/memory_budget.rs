//! The memory budget (docs/design.md, "Resource bounds"): `shardlite serve` on 256 partitions
//! with `--memory-budget-mib 96`, inside a memory group of the budget + 64 MiB (page cache
//! included), under concurrent GETs of existing keys and PUTs of new keys with 1 KiB values for
//! a few seconds: never killed, its resident memory (sampled every 20 ms) within the budget,
//! `/stats` and `/metrics` showing the budget and its parts. And without `--memory-budget-mib`
//! the budget honors the group's limit. Skipped, saying why, where no memory controller can be
//! used. The index files' pages are held in RAM within the budget's part for them.
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use common::{Server, EXE};
use reqwest::StatusCode;
use shardlite_proc::cgroup::MemoryGroup;

const BUDGET_MIB: u64 = 96;
const LOAD_FOR: Duration = Duration::from_secs(4);
const KEYS_BEFORE: u64 = 4_000;
const TASKS: u64 = 16;
const VALUE: [u8; 1024] = [b'v'; 1024];

fn key(n: u64) -> Vec<u8> {
    format!("budget-{n:012}").into_bytes()
}

/// A group of `limit_mib`, or `None` (printed) where none can be made.
fn group(limit_mib: u64) -> Option<MemoryGroup> {
    match MemoryGroup::create(limit_mib << 20) {
        Ok(group) => Some(group),
        Err(err) => {
            eprintln!("skipped: {err}");
            None
        }
    }
}

async fn stats(server: &Server) -> serde_json::Value {
    let body = common::client().get(server.at("/stats")).send().await.unwrap().bytes().await.unwrap();
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_256_partition_server_under_load_stays_up_within_its_budget() {
    let Some(group) = group(BUDGET_MIB + 64) else { return };
    let dir = tempfile::tempdir().unwrap();
    let budget = BUDGET_MIB.to_string();
    let args = ["--partitions", "256", "--memory-budget-mib", &budget];
    let server = Arc::new(Server::start_from(|| group.command(EXE), dir.path(), &args, &[]).await);
    let http = common::client();
    for n in 0..KEYS_BEFORE {
        let status = http.put(server.kv(&key(n))).body(&VALUE[..]).send().await.unwrap().status();
        assert_eq!(status, StatusCode::CREATED);
    }

    let (stop, next_key, peak_kib) =
        (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(KEYS_BEFORE)), Arc::new(AtomicU64::new(0)));
    let sampler = {
        let (server, stop, peak_kib) = (Arc::clone(&server), Arc::clone(&stop), Arc::clone(&peak_kib));
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                peak_kib.fetch_max(server.rss_kib().expect("the server is running"), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (server, stop, next_key, http) =
                (Arc::clone(&server), Arc::clone(&stop), Arc::clone(&next_key), http.clone());
            tokio::spawn(async move {
                let mut rng = common::Rng::new(t + 1);
                while !stop.load(Ordering::Relaxed) {
                    let status = if t % 2 == 0 {
                        let n = next_key.fetch_add(1, Ordering::Relaxed);
                        http.put(server.kv(&key(n))).body(&VALUE[..]).send().await.unwrap().status()
                    } else {
                        let n = rng.below(KEYS_BEFORE);
                        http.get(server.kv(&key(n))).send().await.unwrap().status()
                    };
                    assert!(status.is_success(), "{status}");
                }
            })
        })
        .collect();
    tokio::time::sleep(LOAD_FOR).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    sampler.await.unwrap();

    let stats = stats(&server).await;
    let plan = &stats["store"]["memory"]["plan"];
    assert_eq!(plan["budget"], BUDGET_MIB << 20, "{plan}");
    assert_eq!(plan["source"], "configured");
    let metrics = http.get(server.at("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(&format!("shardlite_memory_budget_bytes {}", BUDGET_MIB << 20)), "{metrics}");
    let mapped = plan["mapped_files"].as_u64().unwrap();
    assert!(mapped >= 256 * (32 << 10), "every partition's WAL-index is set aside: {plan}");
    assert!(metrics.contains(&format!("shardlite_memory_mapped_files_limit_bytes {mapped}")), "{metrics}");
    let peak_mib = peak_kib.load(Ordering::Relaxed) >> 10;
    let writes = next_key.load(Ordering::Relaxed) - KEYS_BEFORE;
    println!("peak RSS {peak_mib} MiB of a {BUDGET_MIB} MiB budget; group peak {:?}; {writes} PUTs", group.peak());
    assert_eq!(group.oom_kills(), Some(0), "the server was killed for want of memory");
    assert!(peak_mib <= BUDGET_MIB, "resident memory {peak_mib} MiB passed the {BUDGET_MIB} MiB budget");
    Arc::into_inner(server).expect("every task is done").stop();
}

#[tokio::test]
async fn the_default_budget_honors_the_groups_limit() {
    let Some(group) = group(1024) else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_from(|| group.command(EXE), dir.path(), &["--partitions", "4"], &[]).await;
    let plan = stats(&server).await["store"]["memory"]["plan"].clone();
    assert_eq!(plan["source"], "container", "{plan}");
    assert_eq!(plan["budget"], (1024u64 << 20) * 7 / 8, "seven eighths of the limit: {plan}");
    server.stop();
}

/// The index files' pages are read into RAM after the start, whole while the budget's part for
/// them has room: `/stats` and `/metrics` count them, within the part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_pages_are_held_in_ram_within_their_part() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let load = std::process::Command::new(EXE)
        .args(["load", "--data", data, "--records", "200000", "--partitions", "4"])
        .output()
        .unwrap();
    assert!(load.status.success(), "{}", String::from_utf8_lossy(&load.stderr));
    let server = Server::start(dir.path(), &["--memory-budget-mib", "64"]).await;
    let opened = stats(&server).await;
    // Each file: a header page, its bucket pages, a few overflow entries and a checksum.
    let pages: u64 = opened["store"]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ((p["index_bytes"].as_u64().unwrap() - 4) / 4096 - 1) * 4096)
        .sum();
    assert!(pages > 0, "{opened}");
    let mut held = 0;
    for _ in 0..200 {
        held = stats(&server).await["store"]["memory"]["index_pages_bytes"].as_u64().unwrap();
        if held == pages {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(held, pages, "every bucket page is held");
    let part = opened["store"]["memory"]["plan"]["index_pages"].as_u64().unwrap();
    assert!(held <= part, "{held} bytes held of a part of {part}");
    let metrics = common::client().get(server.at("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(&format!("shardlite_memory_index_pages_bytes {pages}")), "{metrics}");
    assert!(metrics.contains(&format!("shardlite_memory_index_pages_limit_bytes {part}")), "{metrics}");
    server.stop();
}
