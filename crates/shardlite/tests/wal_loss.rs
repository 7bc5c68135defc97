//! What an operator sees when a partition's write-ahead log went missing after `kill -9`: the
//! server refuses to start, naming the file and the flag that accepts the loss; `check` says
//! the same; `--accept-wal-loss` serves the rest. And a second server on a directory in use is
//! refused.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{client, Server, EXE};

const ARGS: [&str; 6] = ["--partitions", "2", "--checkpoint-pages", "1000000", "--synchronous", "normal"];

/// Runs `shardlite serve` expecting it to exit at start; its stderr.
fn refused_start(data: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(EXE)
        .arg("serve")
        .arg("--data")
        .arg(data)
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "the server started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_log_stops_the_server_until_the_loss_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &ARGS).await;
    let stderr = refused_start(dir.path(), &ARGS);
    assert!(stderr.contains("in use"), "a second server on the same directory: {stderr}");
    let http = client();
    for i in 0..64 {
        let put = http.put(server.kv(format!("key-{i}").as_bytes())).body("v").send().await.unwrap();
        assert_eq!(put.status(), 201);
    }
    server.kill();
    std::fs::remove_file(dir.path().join("p0000.db-wal")).unwrap();

    let stderr = refused_start(dir.path(), &ARGS);
    assert!(stderr.contains("p0000.db-wal is missing") && stderr.contains("--accept-wal-loss"), "{stderr}");
    let check = common::check(dir.path());
    assert!(!check.status.success());
    assert!(String::from_utf8_lossy(&check.stderr).contains("p0000.db-wal is missing"), "{check:?}");

    let server = Server::start(dir.path(), &[&ARGS[..], &["--accept-wal-loss"]].concat()).await;
    let mut found = 0;
    for i in 0..64 {
        let get = http.get(server.kv(format!("key-{i}").as_bytes())).send().await.unwrap();
        found += usize::from(get.status() == 200);
    }
    assert!(found > 0 && found < 64, "partition 1's records stay, partition 0's are gone: {found} of 64");
    assert!(server.stop().success());
    assert!(common::check(dir.path()).status.success(), "a clean close leaves nothing to complain about");
}
