//! Graceful shutdown: with writes in flight, stopping the server finishes them, closes the
//! store, and loses none that was acknowledged.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use shardlite_engine::{Config, Store, Synchronous};

use crate::common::{config, key, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_loses_no_acknowledged_write() {
    let cfg = Config { synchronous: Synchronous::Normal, ..config() };
    let mut server = TestServer::start(cfg.clone()).await;
    let acked = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..32u32)
        .map(|w| {
            let (client, base, acked) = (server.client.clone(), server.url.clone(), Arc::clone(&acked));
            tokio::spawn(async move {
                let mut ok = Vec::new();
                // Bounded: each writer stops at its first refused or failed request.
                for i in 0..100_000u32 {
                    let n = w * 100_000 + i;
                    let url = format!("{base}/kv/{}", hex::encode(key(n)));
                    match client.put(url).body(n.to_string()).send().await {
                        Ok(resp) if resp.status().is_success() => {
                            ok.push(n);
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => break,
                    }
                }
                ok
            })
        })
        .collect();
    // Stop once writes are flowing on every connection.
    tokio::time::timeout(Duration::from_secs(30), async {
        while acked.load(Ordering::Relaxed) < 500 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    server.stop().await;

    let mut all = Vec::new();
    for writer in writers {
        all.extend(writer.await.unwrap());
    }
    assert!(all.len() >= 500);
    let store = Store::open(server.storage.dir.path(), cfg).unwrap();
    for n in all {
        let record = store.get(&key(n)).unwrap();
        assert_eq!(record.map(|r| r.value), Some(n.to_string().into_bytes()), "acknowledged write {n} was lost");
    }
}
