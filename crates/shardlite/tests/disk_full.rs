//! Disk full (`docs/reliability.md`, fault 2): `shardlite serve` on a data directory in a small tmpfs (10 MiB)
//! that also holds a 5 MiB filler file. PUTs of 32 KiB values until the filesystem is full.
//! Asserted: a full disk answers 507 `disk_full` (not 500, and the partition is not poisoned),
//! reads go on, every acknowledged write is still there; once the filler is deleted, writes
//! succeed again without a restart; after an orderly stop, `shardlite check` passes.
//! Needs root (to mount the tmpfs): skipped, saying so, where the mount fails.
#![allow(clippy::unwrap_used)]

mod common;

use std::{path::Path, process::Command};

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
    let report = check(&data);
    let output = format!("{}{}", String::from_utf8_lossy(&report.stdout), String::from_utf8_lossy(&report.stderr));
    assert!(report.status.success(), "{output}");
}
