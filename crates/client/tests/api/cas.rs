//! `compare_and_set` under contention: no increment is lost; and its bound.

use shardlite_client::{Client, Error};

use crate::common::TestServer;

fn increment(current: Option<&[u8]>) -> String {
    let n: u64 = current.map_or(0, |v| std::str::from_utf8(v).unwrap().parse().unwrap());
    (n + 1).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_increments_are_all_counted() {
    let server = TestServer::start().await;
    let client = Client::builder(&server.url).cas_attempts(1000).build().unwrap();
    let (tasks, increments) = (16, 20);
    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                for _ in 0..increments {
                    client.compare_and_set(b"counter", increment).await.unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let total = client.get(b"counter").await.unwrap().unwrap().value;
    assert_eq!(total, (tasks * increments).to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_gives_up_after_its_attempts() {
    let server = TestServer::start().await;
    let client = Client::builder(&server.url).cas_attempts(3).build().unwrap();
    client.put(b"k", "0").await.unwrap();
    let meddler = client.clone();
    let mut calls = 0;
    let update = |current: Option<&[u8]>| {
        calls += 1;
        // Another writer changes the record between each read and write.
        tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(meddler.put(b"k", "changed")))
            .unwrap();
        increment(current.filter(|v| *v != b"changed"))
    };
    let err = client.compare_and_set(b"k", update).await.unwrap_err();
    assert!(matches!(err, Error::Contention { attempts: 3 }), "{err:?}");
    assert_eq!(calls, 3);
}
