//! Overload (`docs/reliability.md`, fault 5): a `shardlite serve` child with one partition, one writer thread,
//! a write queue of one job, no group commit, `synchronous=full` and 8 connection slots, under
//! 64 concurrent writers of 16 KiB values, each on a new connection per request, for about two
//! seconds. Asserted: some writes are refused with 503 `overloaded` and `Retry-After: 1`, some
//! are acknowledged, every request gets an answer (the excess connections wait in the accept
//! backlog, none is dropped), every acknowledged write is readable afterwards with its value,
//! the server's resident memory (`VmRSS`, sampled every 10 ms) stays under 300 MB, and it stops
//! cleanly. The peak RSS and the answers' latencies are printed (`--nocapture`), not asserted.
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::Server;
use reqwest::{header, StatusCode};

const WRITERS: usize = 64;
const VALUE_LEN: usize = 16 << 10;
const LOAD_FOR: Duration = Duration::from_secs(2);
const RSS_BOUND_KIB: u64 = 300 << 10;

fn value(t: usize, seq: u64) -> Vec<u8> {
    format!("{t}-{seq};").into_bytes().into_iter().cycle().take(VALUE_LEN).collect()
}

fn key(t: usize, seq: u64) -> Vec<u8> {
    format!("overload-{t}-{seq}").into_bytes()
}

/// What one writer saw: acknowledged (task, seq), refused count, and latencies (µs) of each.
#[derive(Default)]
struct Tally {
    acked: Vec<(usize, u64)>,
    refused: usize,
    acked_micros: Vec<u64>,
    refused_micros: Vec<u64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_answers_503_keeps_acknowledged_writes_and_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--partitions",
        "1",
        "--writer-threads",
        "1",
        "--queue-capacity",
        "1",
        "--max-batch",
        "1",
        "--max-connections",
        "8",
        "--synchronous",
        "full",
    ];
    let server = Server::start(&dir.path().join("data"), &args).await;
    let idle_rss = server.rss_kib().unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(idle_rss));
    let sampler = {
        let (pid, done, peak) = (server.pid(), Arc::clone(&done), Arc::clone(&peak));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(rss) = common::rss_kib(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };

    // A new connection per request: the connection cap, not keep-alive, decides who is served.
    common::tls_provider();
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let until = Instant::now() + LOAD_FOR;
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (client, url) = (client.clone(), server.url.clone());
            tokio::spawn(async move {
                let mut tally = Tally::default();
                for seq in 0u64.. {
                    if Instant::now() >= until {
                        break;
                    }
                    let kv = format!("{url}/kv/{}", hex::encode(key(t, seq)));
                    let sent = Instant::now();
                    let resp = client.put(&kv).body(value(t, seq)).send().await.unwrap();
                    let micros = sent.elapsed().as_micros() as u64;
                    match resp.status() {
                        StatusCode::CREATED => {
                            tally.acked.push((t, seq));
                            tally.acked_micros.push(micros);
                        }
                        StatusCode::SERVICE_UNAVAILABLE => {
                            assert_eq!(resp.headers().get(header::RETRY_AFTER).unwrap(), "1");
                            let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
                            assert_eq!(body["error"], "overloaded", "{body}");
                            tally.refused += 1;
                            tally.refused_micros.push(micros);
                        }
                        other => panic!("writer {t}: unexpected {other}"),
                    }
                }
                tally
            })
        })
        .collect();
    let mut all = Tally::default();
    for writer in writers {
        let tally = writer.await.unwrap();
        all.acked.extend(tally.acked);
        all.refused += tally.refused;
        all.acked_micros.extend(tally.acked_micros);
        all.refused_micros.extend(tally.refused_micros);
    }
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak_kib = peak.load(Ordering::Relaxed);

    let pct = |v: &mut Vec<u64>, q: f64| {
        v.sort_unstable();
        v.get(((v.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(0) as f64 / 1000.0
    };
    eprintln!(
        "overload: {} acknowledged, {} refused (503); peak RSS {:.1} MiB (idle {:.1} MiB); latency ms p50/p99/max: \
         2xx {:.1}/{:.1}/{:.1}, 503 {:.1}/{:.1}/{:.1}",
        all.acked.len(),
        all.refused,
        peak_kib as f64 / 1024.0,
        idle_rss as f64 / 1024.0,
        pct(&mut all.acked_micros, 0.5),
        pct(&mut all.acked_micros, 0.99),
        pct(&mut all.acked_micros, 1.0),
        pct(&mut all.refused_micros, 0.5),
        pct(&mut all.refused_micros, 0.99),
        pct(&mut all.refused_micros, 1.0),
    );
    assert!(all.refused > 0, "no write was refused: the server was not overloaded");
    assert!(!all.acked.is_empty(), "no write was acknowledged");
    assert!(peak_kib < RSS_BOUND_KIB, "peak RSS {peak_kib} KiB over the bound of {RSS_BOUND_KIB} KiB");

    // Every acknowledged write is there, with its value.
    let reader = common::client();
    for (t, seq) in all.acked {
        let resp = reader.get(server.kv(&key(t, seq))).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "acknowledged write {t}/{seq} is missing");
        assert!(resp.bytes().await.unwrap() == value(t, seq), "acknowledged write {t}/{seq} has another value");
    }
    let status = server.stop();
    assert!(status.success(), "{status}");
}
