//! `GET /keys`: every key of a 256-partition directory, listed page by page over HTTP, is
//! exactly what was written, each with the entity tag its write answered; bad queries are 400.

use std::collections::BTreeMap;

use reqwest::StatusCode;
use serde_json::Value;
use shardlite_engine::{CreateOptions, Op, Outcome};

use crate::common::{config, error_of, TestServer};

#[tokio::test]
async fn listing_every_key_of_256_partitions_through_the_pages_finds_what_was_written() {
    let create = CreateOptions { partitions: Some(256), ..CreateOptions::default() };
    let server = TestServer::start_created(create, config()).await;
    let mut written = BTreeMap::new();
    for batch in 0..3u32 {
        let keys: Vec<Vec<u8>> = (0..1000u32).map(|i| format!("key-{batch}-{i}").into_bytes()).collect();
        let ops = keys.iter().map(|k| Op::Put { key: k.clone(), value: b"v".to_vec(), condition: Default::default() });
        let outcomes = server.storage.backend.batch(ops.collect()).await.unwrap();
        for (key, outcome) in keys.into_iter().zip(outcomes) {
            let Ok(Outcome::Written(w)) = outcome else { panic!("{outcome:?}") };
            written.insert(hex::encode(key), format!("\"{}\"", w.version));
        }
    }
    let gone = hex::encode("key-0-0");
    server.client.delete(server.at(&format!("/kv/{gone}"))).send().await.unwrap();
    written.remove(&gone);

    let mut listed = BTreeMap::new();
    let (mut partition, mut partitions, mut pages) = (0, 1, 0);
    while partition < partitions {
        let mut after = "0".to_owned();
        loop {
            let url = server.at(&format!("/keys?partition={partition}&after={after}&limit=7"));
            let resp = server.client.get(url).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            let page: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
            partitions = page["partitions"].as_u64().unwrap();
            let keys = page["keys"].as_array().unwrap();
            assert!(keys.len() <= 7);
            pages += 1;
            for k in keys {
                let fresh =
                    listed.insert(k["key"].as_str().unwrap().to_owned(), k["etag"].as_str().unwrap().to_owned());
                assert!(fresh.is_none(), "a key listed twice: {k}");
            }
            match page["next"].as_str() {
                Some(next) => after = next.to_owned(),
                None => break,
            }
        }
        partition += 1;
    }
    assert_eq!(partitions, 256);
    assert!(pages > 256);
    assert_eq!(listed, written);
}

#[tokio::test]
async fn bad_queries_are_refused() {
    let server = TestServer::start(config()).await;
    for (query, message) in [
        ("", "`partition` is required"),
        ("?partition=4", "partition 4 does not exist: the partitions are 0..4"),
        ("?partition=0&limit=0", "`limit` must be 1..=10000, not 0"),
    ] {
        let resp = server.client.get(server.at(&format!("/keys{query}"))).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(error_of(resp).await, ("bad_query".to_owned(), message.to_owned()), "{query}");
    }
}
