//! 503s: a server whose write queue is tiny refuses writes (`overloaded`, `Retry-After: 1`);
//! a client with retries writes everything anyway, one without them gets the typed refusal.

use std::time::Duration;

use shardlite_client::{Client, Error, ErrorCode, Retry};
use shardlite_engine::{Config, CreateOptions, Synchronous};
use shardlite_server::ServerOptions;

use crate::common::{fast, TestServer};

/// One writer thread with room for one queued write, an fsync per commit: easy to overload.
async fn overloadable() -> TestServer {
    let (create, config) = fast();
    let tiny = Config { writer_threads: 1, queue_capacity: 1, max_batch: 1, synchronous: Synchronous::Full, ..config };
    TestServer::with(CreateOptions { partitions: Some(1), ..create }, tiny, ServerOptions::default()).await
}

/// Puts 200 keys of `round` at once; each one's result.
async fn put_many(client: &Client, round: u32) -> Vec<(String, Result<(), Error>)> {
    let puts: Vec<_> = (0..200)
        .map(|i| {
            let (client, key) = (client.clone(), format!("{round}/{i}"));
            tokio::spawn(async move {
                let result = client.put(&key, key.clone()).await.map(|_| ());
                (key, result)
            })
        })
        .collect();
    let mut results = Vec::new();
    for put in puts {
        results.push(put.await.unwrap());
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_writes_are_retried_until_written() {
    let server = overloadable().await;
    let retry = Retry { retries: 1000, backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(10) };
    let client = Client::builder(&server.url).retry(retry).build().unwrap();
    // Concurrency makes the overload, not timing; a few rounds make it certain.
    for round in 0..5 {
        for (key, result) in put_many(&client, round).await {
            result.unwrap();
            assert_eq!(client.get(&key).await.unwrap().unwrap().value, key);
        }
        if server.answered("PUT", 503).await > 0 {
            return;
        }
    }
    panic!("the server never refused a write: the retries were not tested");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_retries_the_refusal_is_typed() {
    let server = overloadable().await;
    let client = Client::builder(&server.url).retry(Retry { retries: 0, ..Retry::default() }).build().unwrap();
    for round in 0..5 {
        let refused: Vec<Error> = put_many(&client, round).await.into_iter().filter_map(|(_, r)| r.err()).collect();
        if let Some(first) = refused.first() {
            assert!(refused.iter().all(|e| e.code() == Some(&ErrorCode::Overloaded)), "{first:?}");
            let Error::Server(refusal) = first else { unreachable!() };
            assert_eq!((refusal.status, refusal.retry_after), (503, Some(Duration::from_secs(1))));
            return;
        }
    }
    panic!("the server never refused a write");
}
