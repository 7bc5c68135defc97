//! `shardlite check`'s exit status and output: 0 and a summary line for a clean directory, 1
//! naming the damaged partition, 2 when it cannot run (no such directory, a server has it open,
//! a bad manifest, a server refusing the token); `--json` carries the same verdict; `--url`
//! checks a running server through `GET /admin/check` with an admin token. `shardlite compact
//! --data` leaves a smaller directory that checks clean, every version kept.
#![allow(clippy::unwrap_used)]

mod common;

use std::{path::Path, process::Command};

use common::{Server, EXE};
use shardlite_engine::{Condition, Config, CreateOptions, Store};

/// Runs `shardlite check --data DIR [--json]`: its exit code, stdout and stderr.
fn check(data: &Path, json: bool) -> (i32, String, String) {
    let mut command = Command::new(EXE);
    command.arg("check").arg("--data").arg(data);
    if json {
        command.arg("--json");
    }
    let out = command.output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap(), text(&out.stdout), text(&out.stderr))
}

/// A closed directory of 4 partitions holding 100 records.
fn directory(data: &Path) {
    let store =
        Store::create(data, CreateOptions { partitions: Some(4), ..CreateOptions::default() }, Config::default())
            .unwrap();
    for i in 0u32..100 {
        store.put(&i.to_be_bytes(), b"value".to_vec(), Condition::None).unwrap();
    }
    store.close();
}

#[test]
fn a_clean_directory_exits_0_with_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    directory(dir.path());
    let (code, stdout, _) = check(dir.path(), false);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(stdout, "clean: 4 partitions checked, 100 records, no findings\n");
    let (code, stdout, _) = check(dir.path(), true);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((code, &report["verdict"], &report["records"]), (0, &"clean".into(), &100.into()));
    assert_eq!(report["reports"].as_array().unwrap().len(), 4);
}

#[test]
fn a_damaged_partition_exits_1_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    directory(dir.path());
    // A record removed behind the engine's back: its index entry points at nothing and the
    // partition's record count disagrees.
    let db = rusqlite::Connection::open(dir.path().join("p0002.db")).unwrap();
    assert_eq!(db.execute("DELETE FROM records WHERE id = (SELECT min(id) FROM records)", []).unwrap(), 1);
    drop(db);
    let (code, stdout, _) = check(dir.path(), false);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.starts_with("p0002 FAILED") && !stdout.contains("p0001"), "{stdout}");
    assert!(stdout.ends_with("findings: 1 of 4 partitions failed (p0002); 99 records\n"), "{stdout}");
    let (code, stdout, _) = check(dir.path(), true);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((code, &report["verdict"], &report["failed"]), (1, &"findings".into(), &serde_json::json!([2])));
}

#[tokio::test]
async fn what_keeps_the_check_from_running_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = check(&dir.path().join("nothing-here"), false);
    assert_eq!(code, 2);
    assert!(stdout.contains("could not run") && stderr.contains("does not exist"), "{stdout} {stderr}");
    let (code, stdout, _) = check(&dir.path().join("nothing-here"), true);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((code, &report["verdict"]), (2, &"could_not_run".into()));

    let data = dir.path().join("data");
    let server = Server::start(&data, &["--partitions", "2"]).await;
    let (code, _, stderr) = check(&data, false);
    assert!(code == 2 && stderr.contains("in use"), "a server has it open: {code} {stderr}");
    assert!(server.stop().success());
    assert_eq!(check(&data, false).0, 0);

    let manifest = data.join("shardlite.toml");
    let text = std::fs::read_to_string(&manifest).unwrap().replace("partitions = 2", "partitions = 3");
    std::fs::write(&manifest, text).unwrap();
    let (code, _, stderr) = check(&data, false);
    assert!(code == 2 && stderr.contains("manifest"), "a manifest failing its checksum: {code} {stderr}");
}

#[tokio::test]
async fn a_running_server_is_checked_with_an_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "admin admin-3f9c1e\nwrite write-8b2d4a\n").unwrap();
    let server =
        Server::start(&dir.path().join("data"), &["--partitions", "3", "--auth-token-file", tokens.to_str().unwrap()])
            .await;
    for i in 0..20 {
        let put = common::client().put(server.kv(format!("k{i}").as_bytes())).bearer_auth("write-8b2d4a").body("v");
        assert_eq!(put.send().await.unwrap().status(), 201);
    }
    let live = |token: &'static str| {
        let url = server.url.clone();
        tokio::task::spawn_blocking(move || {
            let out =
                Command::new(EXE).args(["check", "--url", &url]).env("SHARDLITE_AUTH_TOKEN", token).output().unwrap();
            (
                out.status.code().unwrap(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
    };
    let (code, stdout, stderr) = live("admin-3f9c1e").await.unwrap();
    assert_eq!((code, stdout.as_str()), (0, "clean: 3 partitions checked, 20 records, no findings\n"), "{stderr}");
    let (code, _, stderr) = live("write-8b2d4a").await.unwrap();
    assert!(code == 2 && stderr.contains("403") && stderr.contains("lacks the `admin` role"), "{code} {stderr}");
    assert!(server.stop().success());
}

#[test]
fn shardlite_compact_gives_back_what_deletes_left_and_the_check_stays_clean() {
    let dir = tempfile::tempdir().unwrap();
    let create = CreateOptions { partitions: Some(4), ..CreateOptions::default() };
    let store = Store::create(dir.path(), create, Config::default()).unwrap();
    for i in 0u32..400 {
        store.put(&i.to_be_bytes(), vec![7; 4096], Condition::None).unwrap();
    }
    for i in (0u32..400).filter(|i| i % 4 != 0) {
        store.delete(&i.to_be_bytes(), Condition::None).unwrap();
    }
    let versions: Vec<_> =
        (0u32..400).step_by(4).map(|i| store.get(&i.to_be_bytes()).unwrap().unwrap().version).collect();
    store.close();

    let out = Command::new(EXE).arg("compact").arg("--data").arg(dir.path()).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (before, after) = (report["bytes_before"].as_u64().unwrap(), report["bytes_after"].as_u64().unwrap());
    assert!(after * 2 < before, "{report}");
    assert_eq!(check(dir.path(), false).0, 0);
    let store = Store::open(dir.path(), Config::default()).unwrap();
    let kept: Vec<_> = (0u32..400).step_by(4).map(|i| store.get(&i.to_be_bytes()).unwrap().unwrap().version).collect();
    assert_eq!(kept, versions, "every record keeps its version");
}
