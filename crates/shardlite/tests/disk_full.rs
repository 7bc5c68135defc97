//! Disk full (`docs/reliability.md`, fault 2): `shardlite serve` on a data directory in a small tmpfs (10 MiB)
//! that also holds a 5 MiB filler file. PUTs of 32 KiB values until the filesystem is full.
//! Asserted: a full disk answers 507 `disk_full` (not 500, and the partition is not poisoned),
//! reads go on, every acknowledged write is still there; once the filler is deleted, writes
//! succeed again without a restart; after an orderly stop, `shardlite check` passes. The same
//! with concurrent writes through the writer threads, whose transactions are kept open across
//! groups (held writes): a `COMMIT` of answered writes that finds the disk full applies them
//! again once there is room.
//! Needs root (to mount the tmpfs): skipped, saying so, where the mount fails.
#![allow(clippy::unwrap_used)]

mod common;

use std::{path::Path, process::Command, sync::Arc};

use common::{check, client, Server};
use reqwest::StatusCode;

/// A tmpfs mounted for the test's lifetime.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Self(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// `shardlite check` of the stopped server's `data` passes.
fn check_passes(data: &Path) {
    let report = check(data);
    let output = format!("{}{}", String::from_utf8_lossy(&report.stdout), String::from_utf8_lossy(&report.stderr));
    assert!(report.status.success(), "{output}");
}

#[tokio::test]
async fn a_full_disk_answers_507_keeps_data_and_recovers_when_space_is_freed() {
    let Some(fs) = Tmpfs::mount("10m") else {
        eprintln!("skipped: could not mount a tmpfs (this needs root)");
        return;
    };
    let filler = fs.path().join("filler");
    std::fs::write(&filler, vec![1u8; 5 << 20]).unwrap();
    let data = fs.path().join("data");
    let server = Server::start(&data, &["--partitions", "2", "--synchronous", "full"]).await;
    let http = client();

    let value = |i: u32| vec![(i % 251) as u8; 32 << 10];
    let mut acknowledged = Vec::new();
    let mut refusal = None;
    for i in 0..1_000u32 {
        let resp = http.put(server.kv(&i.to_be_bytes())).body(value(i)).send().await.unwrap();
        match resp.status() {
            StatusCode::CREATED => acknowledged.push(i),
            StatusCode::INSUFFICIENT_STORAGE => {
                refusal = Some(resp.text().await.unwrap());
                break;
            }
            other => panic!("write {i}: unexpected {other}: {}", resp.text().await.unwrap()),
        }
    }
    let refusal = refusal.expect("10 MiB filled up before 1,000 writes of 32 KiB");
    assert!(refusal.contains("disk_full"), "{refusal}");
    assert!(acknowledged.len() > 10, "only {} writes fit", acknowledged.len());

    // Reads go on, and nothing acknowledged was lost.
    for &i in &acknowledged {
        let resp = http.get(server.kv(&i.to_be_bytes())).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "key {i}");
        assert_eq!(resp.bytes().await.unwrap().as_ref(), value(i).as_slice(), "key {i}");
    }
    // Still full: refused again, and not as a poisoned partition.
    let again = http.put(server.kv(b"more")).body(value(7)).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::INSUFFICIENT_STORAGE, "{}", again.text().await.unwrap());

    // Free space: writes succeed again, without a restart.
    std::fs::remove_file(&filler).unwrap();
    for i in 5_000..5_005u32 {
        let resp = http.put(server.kv(&i.to_be_bytes())).body(value(i)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED, "after freeing space: {}", resp.text().await.unwrap());
    }
    assert!(server.stop().success());
    check_passes(&data);
}

/// Fills the file system under `path` with `filler` up to `room` bytes short of full.
fn fill_but(path: &Path, room: u64) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![1u8; 64 << 10];
    while file.write_all(&chunk).is_ok() {}
    let len = file.metadata().unwrap().len();
    file.set_len(len.saturating_sub(room)).unwrap();
}

#[tokio::test]
async fn a_full_disk_under_concurrent_held_writes_answers_507_and_loses_nothing() {
    let Some(fs) = Tmpfs::mount("48m") else {
        eprintln!("skipped: could not mount a tmpfs (this needs root)");
        return;
    };
    let data = fs.path().join("data");
    // Every write through a writer thread (none inline), so that groups are held; a commit log
    // segment with room to spare, so that the full disk shows at SQLite's `COMMIT`.
    let args = ["--partitions", "2", "--synchronous", "full", "--inline-writes-below", "0", "--log-segment-mib", "8"];
    let server = Arc::new(Server::start(&data, &args).await);
    let http = client();
    let key = |task: u32, n: u32| format!("t{task}-{n}").into_bytes();
    let value = |task: u32, n: u32| vec![(task * 31 + n) as u8; 4 << 10];
    let resp = http.put(server.kv(b"first")).body(value(0, 0)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    // The log's spare segment is made within a second of the start.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let filler = fs.path().join("filler");
    fill_but(&filler, 256 << 10);

    // Eight writers at once until each is refused.
    let tasks: Vec<_> = (0..8u32)
        .map(|task| {
            let (server, http) = (Arc::clone(&server), http.clone());
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for n in 0..5_000u32 {
                    let resp = http.put(server.kv(&key(task, n))).body(value(task, n)).send().await.unwrap();
                    match resp.status() {
                        StatusCode::CREATED => acknowledged.push(n),
                        StatusCode::INSUFFICIENT_STORAGE => return (acknowledged, resp.text().await.unwrap()),
                        other => panic!("write {task}/{n}: unexpected {other}: {}", resp.text().await.unwrap()),
                    }
                }
                panic!("the disk did not fill up with 5,000 writes of 4 KiB by task {task}");
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for (task, handle) in tasks.into_iter().enumerate() {
        let (acked, refusal) = handle.await.unwrap();
        assert!(refusal.contains("disk_full"), "{refusal}");
        acknowledged.extend(acked.into_iter().map(|n| (task as u32, n)));
    }

    // Reads go on, and nothing acknowledged was lost.
    for &(task, n) in &acknowledged {
        let resp = http.get(server.kv(&key(task, n))).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "key {task}/{n}");
        assert_eq!(resp.bytes().await.unwrap().as_ref(), value(task, n).as_slice(), "key {task}/{n}");
    }
    // Free space: writes succeed again, without a restart.
    std::fs::remove_file(&filler).unwrap();
    for n in 10_000..10_020u32 {
        let resp = http.put(server.kv(&key(0, n))).body(value(0, n)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED, "after freeing space: {}", resp.text().await.unwrap());
    }
    let server = Arc::into_inner(server).expect("every task ended");
    assert!(server.stop().success());
    check_passes(&data);

    // Each acknowledged write is in the partitions' files after the orderly stop.
    let server = Server::start(&data, &args).await;
    for &(task, n) in &acknowledged {
        let resp = http.get(server.kv(&key(task, n))).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "after the restart, key {task}/{n}");
    }
    assert!(server.stop().success());
}
