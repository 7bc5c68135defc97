//! Slow and broken clients (`docs/reliability.md`, fault 6), against a `shardlite serve` child with 300 ms
//! header and body timeouts: slowloris connections (headers a byte at a time, never finished),
//! PUTs whose body never finishes (a few bytes, then a trickle), and connections dropped
//! mid-request (in the headers, in the body, right after connecting). Asserted: the server
//! closes every slow connection by itself (a body that does not arrive answers 408
//! `body_timeout` first; unfinished headers get a 408 or a bare close), a well-behaved client
//! is served throughout, nothing of an unfinished PUT is stored, and afterwards the server's
//! open connections (`/stats`) and file descriptors (`/proc/<pid>/fd`) are back to the baseline.
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::Server;
use reqwest::StatusCode;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const SLOWLORIS: usize = 20;
const SLOW_BODIES: usize = 10;
const DROPPED: usize = 10;
/// How long a slow client keeps trying before the test calls the server's timeout broken.
const GIVE_UP: Duration = Duration::from_secs(10);

/// What a slow client saw.
#[derive(Debug)]
struct Seen {
    /// The server closed the connection (EOF or reset) before `GIVE_UP`.
    closed: bool,
    /// What it answered before closing.
    response: String,
}

/// Sends `head` at once, then `trickle` one byte every 50 ms (cycling), while reading; stops
/// when the server closes the connection or after `GIVE_UP`.
async fn slow_client(addr: std::net::SocketAddr, head: Vec<u8>, trickle: &'static [u8]) -> Seen {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(&head).await.unwrap();
    let (mut response, started) = (Vec::new(), Instant::now());
    let mut buf = [0u8; 4096];
    let mut i = 0;
    while started.elapsed() < GIVE_UP {
        // A write error means the server is gone from this connection: it closed.
        if stream.write_all(&trickle[i % trickle.len()..][..1]).await.is_err() {
            return Seen { closed: true, response: String::from_utf8_lossy(&response).into_owned() };
        }
        i += 1;
        match tokio::time::timeout(Duration::from_millis(50), stream.read(&mut buf)).await {
            Err(_) => {} // nothing yet
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Seen { closed: true, response: String::from_utf8_lossy(&response).into_owned() }
            }
            Ok(Ok(n)) => response.extend_from_slice(&buf[..n]),
        }
    }
    Seen { closed: false, response: String::from_utf8_lossy(&response).into_owned() }
}

/// `connections_open` of `/stats`, asked on a fresh connection (which counts itself).
async fn connections_open(server: &Server) -> i64 {
    common::tls_provider();
    let client = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().unwrap();
    let stats: serde_json::Value =
        serde_json::from_slice(&client.get(server.at("/stats")).send().await.unwrap().bytes().await.unwrap()).unwrap();
    stats["connections_open"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_broken_clients_are_cut_off_and_leak_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--partitions",
        "2",
        "--synchronous",
        "normal",
        "--readers-per-partition",
        "1",
        "--header-timeout-ms",
        "300",
        "--body-timeout-ms",
        "300",
    ];
    let server = Server::start(&dir.path().join("data"), &args).await;

    // Warm up: write and read keys of both partitions, so the lazily opened reader connections
    // exist before the baseline; connections that close after each request.
    {
        common::tls_provider();
        let warm = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().unwrap();
        for i in 0..16u32 {
            let url = server.kv(format!("good-{i}").as_bytes());
            assert!(warm.put(&url).body("v").send().await.unwrap().status().is_success());
            assert_eq!(warm.get(&url).send().await.unwrap().status(), StatusCode::OK);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while connections_open(&server).await != 1 {
        assert!(Instant::now() < deadline, "warm-up connections stay open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let baseline = server.open_fds();

    // A well-behaved client keeps writing and reading while the slow ones are connected.
    let attack_over = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let good = {
        let (url, over, served) = (server.url.clone(), Arc::clone(&attack_over), Arc::clone(&served));
        tokio::spawn(async move {
            // A new connection per request, so the 300 ms idle timeout never races a reused one.
            common::tls_provider();
            let client = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().unwrap();
            let mut i = 0u32;
            while !over.load(Ordering::Relaxed) {
                let kv = format!("{url}/kv/{}", hex::encode(format!("good-{}", i % 16)));
                let put = client.put(&kv).body(format!("v{i}")).send().await.unwrap();
                assert_eq!(put.status(), StatusCode::OK, "a good client's PUT during the attack");
                let got = client.get(&kv).send().await.unwrap();
                assert_eq!(got.status(), StatusCode::OK);
                assert_eq!(got.text().await.unwrap(), format!("v{i}"));
                served.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        })
    };

    let addr = server.addr;
    let mut slow = Vec::new();
    for _ in 0..SLOWLORIS {
        // Headers that never end: one more header byte every 50 ms.
        slow.push(tokio::spawn(slow_client(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ".to_vec(), b"a")));
    }
    for i in 0..SLOW_BODIES {
        // A PUT promising 1000 bytes, sending 3 and then a byte every 50 ms.
        let head =
            format!("PUT /kv/{} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc", hex::encode(slow_key(i)));
        slow.push(tokio::spawn(slow_client(addr, head.into_bytes(), b"d")));
    }
    // Connections dropped mid-request: in the headers, in the body, right after connecting.
    let mut dropped = Vec::new();
    for i in 0..DROPPED {
        let request = match i % 3 {
            0 => b"PUT /kv/6b HTTP/1.1\r\nHost: x\r\nContent-Le".to_vec(),
            1 => format!(
                "PUT /kv/{} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhalf",
                hex::encode(dropped_key(i))
            )
            .into_bytes(),
            _ => Vec::new(),
        };
        dropped.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(&request).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(stream);
        }));
    }

    // While the slow clients are connected, the server holds more descriptors: sample the peak.
    let sampler = {
        let (pid, over) = (server.pid(), Arc::clone(&attack_over));
        tokio::spawn(async move {
            let mut peak = 0;
            while !over.load(Ordering::Relaxed) {
                peak = peak.max(std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak
        })
    };

    for (i, task) in slow.into_iter().enumerate() {
        let seen = task.await.unwrap();
        assert!(seen.closed, "slow client {i} was not disconnected within {GIVE_UP:?}: {seen:?}");
        if i < SLOWLORIS {
            assert!(
                seen.response.is_empty() || seen.response.starts_with("HTTP/1.1 408"),
                "slowloris {i} got {seen:?}"
            );
        } else {
            assert!(seen.response.starts_with("HTTP/1.1 408"), "slow body {i}: {seen:?}");
            assert!(seen.response.contains(r#""error":"body_timeout""#), "slow body {i}: {seen:?}");
        }
    }
    for task in dropped {
        task.await.unwrap();
    }
    attack_over.store(true, Ordering::Relaxed);
    good.await.unwrap();
    let during = sampler.await.unwrap();
    assert!(served.load(Ordering::Relaxed) > 0, "the good client was not served during the attack");
    assert!(during > baseline, "the slow connections never showed up: peak {during} fds, baseline {baseline}");

    // Nothing of the unfinished PUTs was stored.
    let client = common::client();
    for key in (0..SLOW_BODIES).map(slow_key).chain((0..DROPPED).map(dropped_key)) {
        assert_eq!(client.get(server.kv(&key)).send().await.unwrap().status(), StatusCode::NOT_FOUND);
    }
    drop(client);

    // Every connection is cleaned up: the gauge and the descriptors return to the baseline.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (open, fds) = (connections_open(&server).await, server.open_fds());
        if open == 1 && fds <= baseline + 2 {
            eprintln!("slow clients: {baseline} fds before, {during} during, {fds} after");
            break;
        }
        assert!(Instant::now() < deadline, "leak: {open} connections open, {fds} fds (baseline {baseline})");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = server.stop();
    assert!(status.success(), "{status}");
}

fn slow_key(i: usize) -> Vec<u8> {
    format!("slow-body-{i}").into_bytes()
}

fn dropped_key(i: usize) -> Vec<u8> {
    format!("dropped-{i}").into_bytes()
}
