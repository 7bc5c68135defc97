//! Backup and restore with real processes (`docs/operations.md`): a `shardlite serve` child
//! under concurrent PUT, DELETE and batch load is backed up by `shardlite backup --url`; the
//! backup is restored by `shardlite restore` into a new directory that `check` passes and a new
//! server serves, with every write acknowledged before the backup began (its value and its
//! counter) in a new epoch. The backup's checks refuse a flipped byte and a missing file, naming
//! it; `--data` refuses a directory a server has open and backs up one it has not.
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::HashMap,
    path::Path,
    process::{Command, Output},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use common::{check, client, Server, EXE};
use reqwest::StatusCode;
use serde_json::json;

const TOKEN: &str = "backup-test-token";
const SERVE_ARGS: &[&str] =
    &["--partitions", "4", "--synchronous", "full", "--merge-threshold", "200", "--auth-token", TOKEN];
/// Keys written before the backup.
const KEYS: u32 = 1500;

fn key(i: u32) -> Vec<u8> {
    format!("backup-key-{i:06}").into_bytes()
}

fn shardlite(args: &[&str], paths: &[&Path]) -> Output {
    Command::new(EXE).args(args).args(paths).output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `(counter, epoch)` of an entity tag `"epoch.id.counter"`.
fn tag_parts(tag: &str) -> (u64, u64) {
    let parts: Vec<u64> = tag.trim_matches('"').split('.').map(|p| p.parse().unwrap()).collect();
    (parts[2], parts[0])
}

/// Writes the keys before the backup: inserts, updates of every 5th, deletes of every 9th, the
/// updates through `POST /batch`. Returns what each key holds: its value and counter.
async fn preload(server: &Server, http: &reqwest::Client) -> HashMap<u32, (Vec<u8>, u64)> {
    let mut expected = HashMap::new();
    for i in 0..KEYS {
        let value = format!("v1-{i}").into_bytes();
        let resp = http.put(server.kv(&key(i))).bearer_auth(TOKEN).body(value.clone()).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
        expected.insert(i, (value, 1));
    }
    let ops: Vec<_> = (0..KEYS)
        .step_by(5)
        .map(|i| json!({"op": "put", "key": hex::encode(key(i)), "value": hex::encode(format!("v2-{i}"))}))
        .collect();
    let resp = http.post(server.at("/batch")).bearer_auth(TOKEN).body(json!({ "ops": ops }).to_string());
    assert_eq!(resp.send().await.unwrap().status(), StatusCode::OK);
    for i in (0..KEYS).step_by(5) {
        expected.insert(i, (format!("v2-{i}").into_bytes(), 2));
    }
    for i in (0..KEYS).step_by(9) {
        let resp = http.delete(server.kv(&key(i))).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
        expected.remove(&i);
    }
    expected
}

/// Load until `stop`: new keys by PUT, deletes of earlier ones, batches of both; never the
/// preloaded keys. Returns how many writes were acknowledged.
async fn load(url: String, stop: Arc<AtomicBool>, task: u32) -> u64 {
    let http = client();
    let mut acked = 0;
    let mut i = 2u32;
    while !stop.load(Ordering::Relaxed) {
        let k = |n: u32| hex::encode(key(1_000_000 * (task + 1) + n));
        let put = http.put(format!("{url}/kv/{}", k(i))).bearer_auth(TOKEN).body("load").send().await.unwrap();
        acked += u64::from(put.status().is_success());
        if i % 3 == 2 {
            let del = http.delete(format!("{url}/kv/{}", k(i - 2))).bearer_auth(TOKEN).send().await.unwrap();
            acked += u64::from(del.status().is_success());
        }
        let ops =
            json!({"ops": [{"op": "put", "key": k(i + 500_000), "value": "00"}, {"op": "delete", "key": k(i - 1)}]});
        let batch = http.post(format!("{url}/batch")).bearer_auth(TOKEN).body(ops.to_string()).send().await.unwrap();
        acked += u64::from(batch.status().is_success());
        i += 1;
    }
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_restores_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let (data, backup, restored) = (dir.path().join("data"), dir.path().join("backup"), dir.path().join("restored"));
    let server = Server::start(&data, SERVE_ARGS).await;
    let http = client();
    let expected = preload(&server, &http).await;
    let original_epoch = {
        let resp = http.get(server.kv(&key(1))).bearer_auth(TOKEN).send().await.unwrap();
        tag_parts(resp.headers()["etag"].to_str().unwrap()).1
    };

    let offline = shardlite(&["backup", "--data"], &[&data, Path::new("--to"), &dir.path().join("nope")]);
    assert!(!offline.status.success());
    assert!(stderr(&offline).contains("in use"), "{}", stderr(&offline));

    let stop = Arc::new(AtomicBool::new(false));
    let loaders: Vec<_> = (0..3).map(|t| tokio::spawn(load(server.url.clone(), Arc::clone(&stop), t))).collect();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (url, to) = (server.url.clone(), backup.clone());
    let out = tokio::task::spawn_blocking(move || {
        shardlite(&["backup", "--url", &url, "--auth-token", TOKEN, "--max-rate", "50", "--to"], &[&to])
    });
    let out = out.await.unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("backup of") && said.contains("4 partitions"), "{said}");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked = 0;
    for loader in loaders {
        acked += loader.await.unwrap();
    }
    assert!(acked > 0, "the load ran during the backup");
    assert!(server.stop().success());

    let out = shardlite(&["restore", "--from"], &[&backup, Path::new("--data"), &restored]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = check(&restored);
    assert!(out.status.success(), "check of the restored directory: {}", String::from_utf8_lossy(&out.stdout));

    let server = Server::start(&restored, &["--auth-token", TOKEN]).await;
    for i in 0..KEYS {
        let resp = http.get(server.kv(&key(i))).bearer_auth(TOKEN).send().await.unwrap();
        match expected.get(&i) {
            None => assert_eq!(resp.status(), StatusCode::NOT_FOUND, "key {i} was deleted before the backup"),
            Some((value, counter)) => {
                assert_eq!(resp.status(), StatusCode::OK, "key {i} lost");
                let (got_counter, epoch) = tag_parts(resp.headers()["etag"].to_str().unwrap());
                assert_eq!(got_counter, *counter, "key {i}'s counter");
                assert!(epoch > original_epoch, "a restored directory is in a later epoch");
                assert_eq!(resp.bytes().await.unwrap().as_ref(), value.as_slice(), "key {i}'s value");
            }
        }
    }
    assert!(server.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backups_checks_catch_a_flipped_byte_and_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let (data, backup) = (dir.path().join("data"), dir.path().join("backup"));
    let server = Server::start(&data, SERVE_ARGS).await;
    preload(&server, &client()).await;
    assert!(server.stop().success());
    let out = shardlite(&["backup", "--data"], &[&data, Path::new("--to"), &backup]);
    assert!(out.status.success(), "offline backup: {}", stderr(&out));
    let restore = |target: &str| {
        let target = dir.path().join(target);
        let out = shardlite(&["restore", "--from"], &[&backup, Path::new("--data"), &target]);
        assert!(!target.exists(), "a refused restore leaves nothing behind");
        assert!(!out.status.success());
        stderr(&out)
    };

    let db = backup.join("p0003.db");
    let bytes = std::fs::read(&db).unwrap();
    let mut flipped = bytes.clone();
    flipped[bytes.len() - 100] ^= 1;
    std::fs::write(&db, flipped).unwrap();
    let err = restore("r1");
    assert!(err.contains("p0003.db") && err.contains("damaged"), "{err}");
    std::fs::write(&db, bytes).unwrap();

    std::fs::remove_file(backup.join("p0000.idx")).unwrap();
    let err = restore("r2");
    assert!(err.contains("p0000.idx") && err.contains("missing"), "{err}");
}
