//! I/O errors: `shardlite serve` with 2 partitions runs under an LD_PRELOAD shim
//! (`tests/fault/failsync.c`, compiled here with `cc`) that makes fsync and fdatasync of files
//! whose path contains a pattern fail with EIO while a trigger file exists. Skipped, saying
//! so, where no C compiler is found.
//!
//! - A partition's own files (its WAL, synced when the partition is checkpointed; acknowledged
//!   writes are already durable in the commit log): the failed checkpoint poisons that
//!   partition only. Its later writes are refused loudly (500 `poisoned`, also after the disk
//!   "recovers": until a restart), the other partition writes on, reads of both go on, `/stats`
//!   names it, and the commit log is kept at shutdown.
//! - The commit log: the write whose flush failed answers 500, and so does every later write
//!   to any partition (the log refuses appends until a restart); reads go on.
//!
//! Meanwhile `/readyz` answers 503 with the reason (a poisoned partition, the failed log), so
//! that a load balancer stops sending traffic; after a restart without the fault it answers 200.
//!
//! After a restart without the fault, every acknowledged write is there (a write answered 500
//! may or may not be: its outcome is unknown), both partitions take writes again, and
//! `shardlite check` passes.
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

/// A server under the fault shim, failing syncs of paths containing `pattern` while the
/// trigger file exists; with keys of each partition, 10 of each written ("before").
struct Faulty {
    server: Server,
    http: reqwest::Client,
    data: std::path::PathBuf,
    trigger: std::path::PathBuf,
    keys: [Vec<Vec<u8>>; 2],
    _dir: tempfile::TempDir,
}

impl Faulty {
    async fn start(pattern: &str, args: &[&str]) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let Some(shim) = build_shim(dir.path()) else {
            eprintln!("skipped: no C compiler (cc) to build the fault shim");
            return None;
        };
        let (data, trigger) = (dir.path().join("data"), dir.path().join("trigger"));
        let env: [(&str, &OsStr); 3] = [
            ("LD_PRELOAD", shim.as_os_str()),
            ("SHARDLITE_FAULT_PATTERN", OsStr::new(pattern)),
            ("SHARDLITE_FAULT_TRIGGER", trigger.as_os_str()),
        ];
        let server = Server::start_with_env(&data, args, &env).await;
        let keys = keys_by_partition(&data, 20);
        let faulty = Self { server, http: client(), data, trigger, keys, _dir: dir };
        for key in faulty.keys[0][..10].iter().chain(&faulty.keys[1][..10]) {
            assert_eq!(faulty.put(key, "before").await.0, StatusCode::CREATED);
        }
        Some(faulty)
    }

    async fn put(&self, key: &[u8], body: &'static str) -> (StatusCode, String) {
        let resp = self.http.put(self.server.kv(key)).body(body).send().await.unwrap();
        (resp.status(), resp.text().await.unwrap())
    }

    /// Whether `/stats` shows partition `p` poisoned.
    async fn poisoned(&self, p: usize) -> bool {
        let stats = self.http.get(self.server.at("/stats")).send().await.unwrap().bytes().await.unwrap();
        let stats: serde_json::Value = serde_json::from_slice(&stats).unwrap();
        stats["store"]["partitions"][p]["poisoned"].is_string()
    }

    /// `/readyz` of the server under the fault.
    async fn readiness(&self) -> (StatusCode, String) {
        readiness(&self.server).await
    }

    /// Every key written before the fault reads "before".
    async fn reads_go_on(&self) {
        for key in self.keys[0][..10].iter().chain(&self.keys[1][..10]) {
            let resp = self.http.get(self.server.kv(key)).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK, "reads go on");
            assert_eq!(resp.text().await.unwrap(), "before");
        }
    }

    /// Stops the server, restarts it without the fault and checks every acknowledged write
    /// (keys with the value each must hold), that keys of writes known not to have committed
    /// are `absent`, that both partitions take writes, and `check`.
    async fn restart_and_verify(self, acknowledged: &[(&[u8], &str)], absent: &[&[u8]]) {
        assert!(self.server.stop().success());
        let server = Server::start(&self.data, &[]).await;
        assert_eq!(readiness(&server).await.0, StatusCode::OK, "ready again after the restart");
        for (key, value) in acknowledged {
            let resp = self.http.get(server.kv(key)).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK, "acknowledged writes survive");
            assert_eq!(resp.text().await.unwrap(), *value);
        }
        for key in absent {
            let resp = self.http.get(server.kv(key)).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::NOT_FOUND, "a write refused after it was logged is not replayed");
        }
        for key in [&self.keys[0][19], &self.keys[1][19]] {
            let resp = self.http.put(server.kv(key)).body("restarted").send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::CREATED, "both partitions write again");
        }
        assert!(server.stop().success());
        let report = check(&self.data);
        assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stdout));
    }
}

/// `/readyz`: its status and, on 503, the JSON error's message.
async fn readiness(server: &Server) -> (StatusCode, String) {
    let resp = client().get(server.at("/readyz")).send().await.unwrap();
    let status = resp.status();
    let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        assert_eq!(body["error"], "not_ready", "{body}");
    }
    (status, body["message"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn a_failed_sync_of_a_partitions_files_poisons_only_it() {
    // A checkpoint after every commit: the WAL is synced at each.
    let args = ["--partitions", "2", "--synchronous", "full", "--checkpoint-pages", "1"];
    let Some(f) = Faulty::start("p0001.db-wal", &args).await else { return };
    assert_eq!(f.readiness().await.0, StatusCode::OK);
    let [p0, p1] = &f.keys.clone();
    std::fs::write(&f.trigger, b"").unwrap();
    // Either the commit itself fails (SQLite syncs the WAL header when it reuses the WAL after
    // a checkpoint): answered 500, and cancelled in the commit log so that a restart does not
    // apply it; or the commit succeeds (durable in the commit log, answered) and the checkpoint
    // after it, which the checkpointer thread runs when it gets to it, fails.
    let (status, body) = f.put(&p1[10], "during").await;
    assert!([StatusCode::CREATED, StatusCode::INTERNAL_SERVER_ERROR].contains(&status), "{status} {body}");
    let failed_write_applied = status == StatusCode::CREATED;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !f.poisoned(1).await {
        assert!(std::time::Instant::now() < deadline, "the failed sync never poisoned partition 1");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (status, body) = f.put(&p1[11], "during").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(body.contains("poisoned"), "later writes are refused as poisoned: {body}");
    let (status, reason) = f.readiness().await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "not ready with a poisoned partition");
    assert!(reason.contains("partition 1 is poisoned") && !reason.contains("partition 0"), "{reason}");
    for key in &p0[10..15] {
        assert_eq!(f.put(key, "during").await.0, StatusCode::CREATED, "the other partition writes on");
    }
    f.reads_go_on().await;
    std::fs::remove_file(&f.trigger).unwrap();
    let (status, body) = f.put(&p1[12], "after").await;
    assert!(status == StatusCode::INTERNAL_SERVER_ERROR && body.contains("poisoned"), "stays refused: {body}");
    let stats = f.http.get(f.server.at("/stats")).send().await.unwrap().bytes().await.unwrap();
    let stats: serde_json::Value = serde_json::from_slice(&stats).unwrap();
    let partitions = stats["store"]["partitions"].as_array().unwrap();
    assert!(partitions[0]["poisoned"].is_null() && partitions[1]["poisoned"].is_string(), "{partitions:?}");

    let mut acknowledged: Vec<(&[u8], &str)> = p0[..10].iter().chain(&p1[..10]).map(|k| (&k[..], "before")).collect();
    acknowledged.extend(p0[10..15].iter().map(|k| (&k[..], "during")));
    // A commit that failed after its record was flushed was cancelled in the log: a restart,
    // which replays the log, must not apply it.
    let mut absent: Vec<&[u8]> = Vec::new();
    match failed_write_applied {
        true => acknowledged.push((&p1[10], "during")),
        false => absent.push(&p1[10]),
    }
    f.restart_and_verify(&acknowledged, &absent).await;
}

#[tokio::test]
async fn a_failed_flush_of_the_commit_log_refuses_every_write() {
    let Some(f) = Faulty::start("commit-", &["--partitions", "2", "--synchronous", "full"]).await else { return };
    let [p0, p1] = &f.keys.clone();
    std::fs::write(&f.trigger, b"").unwrap();
    let (status, body) = f.put(&p0[10], "during").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "the write whose flush failed: {body}");
    for key in [&p0[11], &p1[10]] {
        let (status, body) = f.put(key, "during").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "every partition refuses writes: {body}");
        assert!(body.contains("commit log"), "{body}");
    }
    let (status, reason) = f.readiness().await;
    assert!(status == StatusCode::SERVICE_UNAVAILABLE && reason.contains("commit log failed"), "{status} {reason}");
    f.reads_go_on().await;
    std::fs::remove_file(&f.trigger).unwrap();
    let (status, body) = f.put(&p1[11], "after").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "stays refused until a restart: {body}");

    let acknowledged: Vec<(&[u8], &str)> = p0[..10].iter().chain(&p1[..10]).map(|k| (&k[..], "before")).collect();
    f.restart_and_verify(&acknowledged, &[]).await;
}
