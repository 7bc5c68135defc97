//! `GET /export` and `shardlite export --url`: a running server's records, each partition from
//! one snapshot, are exactly what was written (keys, values, counters), also while other keys
//! are being written; bad queries are 400; PostgreSQL answers 501.

use std::{collections::BTreeMap, path::Path, process::Command};

use reqwest::StatusCode;
use shardlite_engine::{Condition, CreateOptions, Op, Outcome};

use crate::common::{config, error_of, on_both_backends, Kind, TestServer};

/// key -> (value, counter).
type Records = BTreeMap<Vec<u8>, (Vec<u8>, u64)>;

async fn put_all(server: &TestServer, records: &[(Vec<u8>, Vec<u8>)], written: &mut Records) {
    let ops =
        records.iter().map(|(k, v)| Op::Put { key: k.clone(), value: v.clone(), condition: Condition::default() });
    let outcomes = server.storage.backend.batch(ops.collect()).await.unwrap();
    for ((key, value), outcome) in records.iter().zip(outcomes) {
        let Ok(Outcome::Written(w)) = outcome else { panic!("{outcome:?}") };
        written.insert(key.clone(), (value.clone(), w.version.counter));
    }
}

/// Runs `shardlite export --url` into `out` (jsonl) and reads the file back.
fn export(url: &str, out: &Path) -> Records {
    let status = Command::new(env!("CARGO_BIN_EXE_shardlite"))
        .args(["export", "--url", url, "--format", "jsonl", "--out"])
        .arg(out)
        .status()
        .unwrap();
    assert!(status.success());
    let hex_field = |record: &serde_json::Value, name: &str| hex::decode(record[name].as_str().unwrap()).unwrap();
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .map(|r| (hex_field(&r, "key"), (hex_field(&r, "value"), r["counter"].as_u64().unwrap())))
        .collect()
}

#[tokio::test]
async fn exporting_a_running_server_gives_every_record_with_its_counter() {
    let server =
        TestServer::start_created(CreateOptions { partitions: Some(16), ..CreateOptions::default() }, config()).await;
    let mut written = Records::new();
    let records: Vec<_> =
        (0..3000u32).map(|i| (format!("key-{i}").into_bytes(), format!("value {i}").into_bytes())).collect();
    put_all(&server, &records, &mut written).await;
    put_all(&server, &records[..100], &mut written).await; // counters 2
    let odd = vec![(vec![0xab; 1024], Vec::new()), (vec![7], vec![0; 4096])];
    put_all(&server, &odd, &mut written).await;
    for i in 0..50 {
        let key = format!("key-{}", i * 7).into_bytes();
        server.client.delete(server.at(&format!("/kv/{}", hex::encode(&key)))).send().await.unwrap();
        written.remove(&key);
    }
    let dir = tempfile::tempdir().unwrap();

    // While the export runs, new keys keep arriving: every record written before it is there,
    // unchanged; any newer one seen has its value.
    let writer = {
        let (url, client) = (server.url.clone(), server.client.clone());
        tokio::spawn(async move {
            for i in 0..400u32 {
                let key = hex::encode(format!("new-{i}"));
                let resp = client.put(format!("{url}/kv/{key}")).body(format!("new {i}")).send().await.unwrap();
                assert_eq!(resp.status(), StatusCode::CREATED);
            }
        })
    };
    let url = server.url.clone();
    let out = dir.path().join("all.csv");
    let exported = tokio::task::spawn_blocking(move || export(&url, &out)).await.unwrap();
    writer.await.unwrap();
    for (key, value) in &written {
        assert_eq!(exported.get(key), Some(value), "{}", String::from_utf8_lossy(key));
    }
    for (key, (value, counter)) in exported.iter().filter(|(k, _)| !written.contains_key(*k)) {
        let n = String::from_utf8_lossy(key).strip_prefix("new-").unwrap().to_owned();
        assert_eq!((value.as_slice(), *counter), (format!("new {n}").as_bytes(), 1));
    }

    // Once the writes are done, a second export is exactly the server's contents.
    for i in 0..400u32 {
        written.insert(format!("new-{i}").into_bytes(), (format!("new {i}").into_bytes(), 1));
    }
    let url = server.url.clone();
    let out = dir.path().join("again.csv");
    assert_eq!(tokio::task::spawn_blocking(move || export(&url, &out)).await.unwrap(), written);
    assert!(!dir.path().join("again.csv.partial").exists());
}

#[tokio::test]
async fn a_stream_is_a_bin_stream_ending_with_its_count() {
    let server =
        TestServer::start_created(CreateOptions { partitions: Some(1), ..CreateOptions::default() }, config()).await;
    put_all(&server, &[(b"k".to_vec(), b"v".to_vec())], &mut Records::new()).await;
    let resp = server.client.get(server.at("/export?partition=0")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["shardlite-partitions"], "1");
    let body = resp.bytes().await.unwrap();
    let mut expected = b"SHLTKV1\n".to_vec();
    expected.extend_from_slice(&[1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, b'k', b'v']);
    expected.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(body.as_ref(), expected.as_slice());
}

#[tokio::test]
async fn bad_export_queries_are_refused() {
    let server = TestServer::start(config()).await;
    for (query, message) in [
        ("", "`partition` is required"),
        ("?partition=4", "partition 4 does not exist: the partitions are 0..4"),
        ("?partition=0&after=3", "unknown parameter `after`: /export takes partition"),
    ] {
        let resp = server.client.get(server.at(&format!("/export{query}"))).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(error_of(resp).await, ("bad_query".to_owned(), message.to_owned()), "{query}");
    }
    let resp = server.client.post(server.at("/export?partition=0")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
}

on_both_backends!(exporting_is_the_engines_alone);

/// The SQLite backend streams a partition; PostgreSQL answers 501 `not_implemented`.
async fn exporting_is_the_engines_alone(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let resp = server.client.get(server.at("/export?partition=0")).send().await.unwrap();
    match kind {
        Kind::Sqlite => assert_eq!(resp.status(), StatusCode::OK),
        Kind::Postgres => {
            assert_eq!(resp.status(), StatusCode::NOT_IMPLEMENTED);
            let (code, message) = error_of(resp).await;
            assert_eq!(
                (code.as_str(), message.as_str()),
                ("not_implemented", "the postgres backend does not export partitions")
            );
        }
    }
}
