//! I/O errors (issue 6, fault 3): `shardlite serve` with 2 partitions runs under an LD_PRELOAD
//! shim (`tests/fault/failsync.c`, compiled here with `cc`) that makes fsync of partition 1's
//! WAL fail with EIO while a trigger file exists. Asserted: the failing commit answers 500, later
//! writes to partition 1 are refused loudly (500 `poisoned`, also after the disk "recovers": a
//! poisoned partition stays refused until a restart), partition 0 keeps taking writes, reads of
//! both go on, `/stats` names the poisoned partition; after a restart without the fault every
//! acknowledged write is there, partition 1 takes writes again, and `shardlite check` passes.
//! Skipped, saying so, where no C compiler is found.
#![allow(clippy::unwrap_used)]

mod common;

use std::{ffi::OsStr, path::Path, process::Command};

use common::{check, client, Server};
use reqwest::StatusCode;
use shardlite_engine::{layout::Layout, KeyHasher, Manifest};

fn build_shim(dir: &Path) -> Option<std::path::PathBuf> {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fault/failsync.c");
    let out = dir.join("failsync.so");
    let built = Command::new("cc").args(["-shared", "-fPIC", "-O1", "-o"]).arg(&out).arg(source).arg("-ldl").status();
    built.is_ok_and(|s| s.success()).then_some(out)
}

/// `count` keys of each partition (0 and 1), found by hashing candidates.
fn keys_by_partition(data: &Path, count: usize) -> [Vec<Vec<u8>>; 2] {
    let manifest = Manifest::read(&Layout::new(data).manifest()).unwrap();
    let hasher = KeyHasher::new(manifest.hash_seed, manifest.partitions);
    let mut keys: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    for i in 0u32.. {
        let key = format!("key-{i}").into_bytes();
        let p = hasher.locate(&key).partition as usize;
        if keys[p].len() < count {
            keys[p].push(key);
        }
        if keys.iter().all(|k| k.len() == count) {
            return keys;
        }
    }
    unreachable!()
}

#[tokio::test]
async fn a_failed_fsync_poisons_only_its_partition() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shim) = build_shim(dir.path()) else {
        eprintln!("skipped: no C compiler (cc) to build the fault shim");
        return;
    };
    let data = dir.path().join("data");
    let trigger = dir.path().join("trigger");
    let env: [(&str, &OsStr); 3] = [
        ("LD_PRELOAD", shim.as_os_str()),
        ("SHARDLITE_FAULT_PATTERN", OsStr::new("p0001.db-wal")),
        ("SHARDLITE_FAULT_TRIGGER", trigger.as_os_str()),
    ];
    let args = ["--partitions", "2", "--synchronous", "full"];
    let server = Server::start_with_env(&data, &args, &env).await;
    let http = client();
    let [p0, p1] = keys_by_partition(&data, 20);
    let put = |url: String, body: &'static str| {
        let http = http.clone();
        async move {
            let resp = http.put(url).body(body).send().await.unwrap();
            (resp.status(), resp.text().await.unwrap())
        }
    };
    for key in p0[..10].iter().chain(&p1[..10]) {
        assert_eq!(put(server.kv(key), "before").await.0, StatusCode::CREATED);
    }

    std::fs::write(&trigger, b"").unwrap();
    let (status, body) = put(server.kv(&p1[10]), "during").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "the failed commit: {body}");
    let (status, body) = put(server.kv(&p1[11]), "during").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(body.contains("poisoned"), "later writes are refused as poisoned: {body}");
    for key in &p0[10..15] {
        assert_eq!(put(server.kv(key), "during").await.0, StatusCode::CREATED, "the other partition writes on");
    }
    for key in p0[..10].iter().chain(&p1[..10]) {
        let resp = http.get(server.kv(key)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "reads go on");
        assert_eq!(resp.text().await.unwrap(), "before");
    }
    std::fs::remove_file(&trigger).unwrap();
    let (status, body) = put(server.kv(&p1[12]), "after").await;
    assert!(status == StatusCode::INTERNAL_SERVER_ERROR && body.contains("poisoned"), "stays refused: {body}");
    let stats = http.get(server.at("/stats")).send().await.unwrap().bytes().await.unwrap();
    let stats: serde_json::Value = serde_json::from_slice(&stats).unwrap();
    let partitions = stats["store"]["partitions"].as_array().unwrap();
    assert!(partitions[0]["poisoned"].is_null() && partitions[1]["poisoned"].is_string(), "{partitions:?}");
    assert!(server.stop().success());

    let server = Server::start(&data, &[]).await;
    for (key, value) in p0[..15].iter().map(|k| (k, None)).chain(p1[..10].iter().map(|k| (k, Some("before")))) {
        let resp = http.get(server.kv(key)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "acknowledged writes survive");
        let text = resp.text().await.unwrap();
        assert!(value.is_none_or(|v| v == text), "{text}");
    }
    assert_eq!(put(server.kv(&p1[13]), "restarted").await.0, StatusCode::CREATED, "partition 1 writes again");
    assert!(server.stop().success());
    let report = check(&data);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stdout));
}
