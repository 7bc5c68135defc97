//! A full write queue answers 503 with `Retry-After` at once, and every write that was
//! acknowledged is readable afterwards.

use reqwest::{header, StatusCode};
use shardlite_engine::{Config, CreateOptions, Synchronous};

use crate::common::{config, directory, error_of, key, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_503_and_loses_no_acknowledged_write() {
    // One writer with room for one queued job, committing with an fsync each time.
    let tiny =
        Config { writer_threads: 1, queue_capacity: 1, max_batch: 1, synchronous: Synchronous::Full, ..config() };
    let one = CreateOptions { partitions: Some(1), ..directory() };
    let server = TestServer::start_created(one, tiny).await;
    let (mut created, mut refused) = (Vec::new(), 0);
    // Concurrency makes the overload, not timing; a few rounds make it certain.
    for round in 0..5u32 {
        let tasks: Vec<_> = (0..200u32)
            .map(|i| {
                let (client, url, n) = (server.client.clone(), server.kv(&key(round * 1000 + i)), round * 1000 + i);
                tokio::spawn(async move { (n, client.put(url).body(n.to_string()).send().await.unwrap()) })
            })
            .collect();
        for task in tasks {
            let (n, resp) = task.await.unwrap();
            match resp.status() {
                StatusCode::CREATED => created.push(n),
                StatusCode::SERVICE_UNAVAILABLE => {
                    refused += 1;
                    assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
                    assert_eq!(error_of(resp).await.0, "overloaded");
                }
                other => panic!("unexpected {other}"),
            }
        }
        if refused > 0 {
            break;
        }
    }
    assert!(refused > 0, "no request was refused");
    assert!(!created.is_empty(), "no request got through");
    for n in created {
        let resp = server.client.get(server.kv(&key(n))).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "acknowledged write {n} is missing");
        assert_eq!(resp.text().await.unwrap(), n.to_string());
    }
}
