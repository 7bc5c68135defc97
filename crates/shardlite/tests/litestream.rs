//! Replication with Litestream (docs/operations.md, "Continuous replication (Litestream)"), with
//! real processes: `shardlite serve --litestream`, `litestream replicate` with the config of
//! `shardlite litestream-config`, and `shardlite restore --from-litestream`.
//!
//! - A lost disk: the server takes PUTs from several clients while a probe measures the
//!   replication lag of each partition (a marker written, then `litestream restore` of that
//!   partition until the marker is there); then the server and Litestream are SIGKILLed and the
//!   data directory deleted. The restore must hold, for each partition, every write
//!   acknowledged before the last marker confirmed replicated was sent, with its value (or a
//!   later write's), at a new epoch, and pass `check`.
//! - An orderly stop with Litestream attached exits cleanly (it took 42 s for 8 partitions when
//!   each close-time checkpoint waited out the busy timeout behind Litestream's read
//!   transaction), and a `kill -9` with Litestream attached reopens without a WAL taken for lost.
//!
//! Litestream comes from `SHARDLITE_TEST_LITESTREAM`, else `litestream` on `PATH`, else where
//! `.ci/litestream` installs it; without one the tests print why and pass.
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::HashMap,
    path::Path,
    process::Command,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use common::{
    litestream::{litestream, Replicator},
    Rng, Server,
};
use shardlite_engine::{layout::Layout, Config, KeyHasher, Manifest, Store};

const PARTITIONS: u32 = 16;
const CLIENTS: usize = 4;
const KEYS_PER_CLIENT: u64 = 64;
/// Rounds of lag probes (each probes every partition).
const PROBE_ROUNDS: usize = 2;

/// Runs `shardlite ARGS`, asserting it succeeds; its standard output.
fn shardlite(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(common::EXE).args(args).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "shardlite {args:?} failed: {said}");
    said
}

/// Writes the Litestream config of `data` replicating to `replica`, at `config`.
fn write_config(data: &Path, replica: &Path, config: &Path) {
    shardlite(&[
        "litestream-config".as_ref(),
        "--data".as_ref(),
        data.as_os_str(),
        "--replica".as_ref(),
        replica.as_os_str(),
        "--out".as_ref(),
        config.as_os_str(),
    ]);
}

/// One PUT: its key and value, and when it was acknowledged (if it was).
#[derive(Debug, Clone)]
struct Write {
    key: Vec<u8>,
    value: Vec<u8>,
    acked: Option<Instant>,
}

/// PUTs until `stop`, each client to its own keys (so a key's writes are sequential).
async fn load(server: &Server, client: usize, stop: Arc<AtomicBool>, log: Arc<Mutex<Vec<Write>>>) {
    let http = common::client();
    let mut rng = Rng::new(client as u64 + 1);
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("c{client}-k{}", rng.below(KEYS_PER_CLIENT)).into_bytes();
        let value = format!("c{client}-s{seq}").into_bytes();
        seq += 1;
        let at = {
            let mut log = log.lock().unwrap();
            log.push(Write { key: key.clone(), value: value.clone(), acked: None });
            log.len() - 1
        };
        let Ok(answer) = http.put(server.kv(&key)).body(value).send().await else { break };
        if answer.status().is_success() {
            log.lock().unwrap()[at].acked = Some(Instant::now());
        } else {
            break;
        }
    }
}

/// A key of partition `p` (probe markers).
fn key_in(hasher: &KeyHasher, p: u32, round: usize) -> Vec<u8> {
    (0u64..).map(|i| format!("marker-{round}-{i}").into_bytes()).find(|k| hasher.locate(k).partition == p).unwrap()
}

/// The value of `key` in the restored partition database `db`, if it holds the key.
fn value_in(db: &Path, key: &[u8]) -> Option<Vec<u8>> {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    conn.query_row("SELECT value FROM records WHERE key = ?1", [key], |r| r.get(0)).ok()
}

/// Writes a marker to partition `p` and restores `p` from its replica until the marker is there.
/// Returns when the marker was sent and the lag: from its acknowledgement to the end of the first
/// restore that held it (an upper bound: a restore takes tens of milliseconds).
async fn probe(
    server: &Server,
    hasher: &KeyHasher,
    bin: &Path,
    config: &Path,
    p: u32,
    round: usize,
    dir: &Path,
) -> (Instant, Duration) {
    let key = key_in(hasher, p, round);
    let sent = Instant::now();
    let put = common::client().put(server.kv(&key)).body(b"marker".to_vec()).send().await.unwrap();
    assert!(put.status().is_success());
    let acked = Instant::now();
    let db_path = Layout::new(dir.join("data")).db(p);
    let deadline = acked + Duration::from_secs(60);
    loop {
        let out = dir.join(format!("probe-{p}-{round}.db"));
        let _ = std::fs::remove_file(&out);
        let mut restore = Command::new(bin);
        restore.args(["restore", "-config"]).arg(config).arg("-o").arg(&out).arg(&db_path);
        let restored = tokio::task::spawn_blocking(move || restore.output().unwrap()).await.unwrap();
        let found = Instant::now();
        if restored.status.success() && value_in(&out, &key).is_some() {
            let _ = std::fs::remove_file(&out);
            return (sent, found - acked);
        }
        assert!(Instant::now() < deadline, "partition {p}: the marker was not replicated within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_disk_is_restored_from_the_replica_with_every_write_replicated_before_it() {
    let Some(bin) = litestream() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (data, replica, config, restored) = (
        tmp.path().join("data"),
        tmp.path().join("replica"),
        tmp.path().join("litestream.yml"),
        tmp.path().join("restored"),
    );
    let partitions = PARTITIONS.to_string();
    let server = Server::start(&data, &["--partitions", &partitions, "--litestream", "--writer-threads", "4"]).await;
    let manifest = Manifest::read(&Layout::new(&data).manifest()).unwrap();
    let hasher = KeyHasher::new(manifest.hash_seed, manifest.partitions);
    write_config(&data, &replica, &config);
    let replicator = Replicator::start(&bin, &config, &tmp.path().join("litestream.log"));

    let (stop, log) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
    let server = Arc::new(server);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (server, stop, log) = (Arc::clone(&server), Arc::clone(&stop), Arc::clone(&log));
            tokio::spawn(async move { load(&server, c, stop, log).await })
        })
        .collect();

    // Under load: each partition's lag, and the last moment known replicated.
    let mut confirmed = vec![None::<Instant>; PARTITIONS as usize];
    let mut lags = Vec::new();
    for round in 0..PROBE_ROUNDS {
        for p in 0..PARTITIONS {
            let (sent, lag) = probe(&server, &hasher, &bin, &config, p, round, tmp.path()).await;
            confirmed[p as usize] = Some(sent);
            lags.push(lag);
        }
    }
    // The machine is lost: the server and Litestream die at once, then the disk.
    let crashed = Instant::now();
    drop(replicator);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.pid()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    drop(server);
    std::fs::remove_dir_all(&data).unwrap();

    let said = shardlite(&[
        "restore".as_ref(),
        "--from-litestream".as_ref(),
        config.as_os_str(),
        "--data".as_ref(),
        restored.as_os_str(),
        "--litestream-bin".as_ref(),
        bin.as_os_str(),
    ]);
    let restored_manifest = Manifest::read(&Layout::new(&restored).manifest()).unwrap();
    assert!(restored_manifest.epoch > manifest.epoch, "a restored directory starts a new epoch");
    assert_eq!(restored_manifest.created_with(), manifest.created_with());
    let check = common::check(&restored);
    assert!(check.status.success(), "check failed: {}", String::from_utf8_lossy(&check.stdout));

    let writes = log.lock().unwrap().clone();
    let store = Store::open(&restored, Config::inspection()).unwrap();
    let mut by_key: HashMap<Vec<u8>, Vec<Write>> = HashMap::new();
    for w in writes.iter().cloned() {
        by_key.entry(w.key.clone()).or_default().push(w);
    }
    let mut required = 0;
    for (key, key_writes) in &by_key {
        let cutoff = confirmed[hasher.locate(key).partition as usize].unwrap();
        let got = store.get(key).unwrap().map(|r| r.value);
        // The last write acknowledged before the cutoff must be there, or one sent after it.
        let last_before = key_writes.iter().rposition(|w| w.acked.is_some_and(|a| a < cutoff));
        let allowed: Vec<&Vec<u8>> = key_writes[last_before.unwrap_or(0)..].iter().map(|w| &w.value).collect();
        match (last_before, got) {
            (Some(i), Some(value)) => {
                required += 1;
                assert!(
                    allowed.contains(&&value),
                    "{}: {:?}, older than its write {:?} replicated before the crash",
                    String::from_utf8_lossy(key),
                    String::from_utf8_lossy(&value),
                    String::from_utf8_lossy(&key_writes[i].value)
                );
            }
            (Some(i), None) => panic!(
                "{}: missing; its write {:?} was replicated before the crash",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(&key_writes[i].value)
            ),
            (None, Some(value)) => {
                assert!(allowed.contains(&&value), "{}: a value never written", String::from_utf8_lossy(key))
            }
            (None, None) => {}
        }
    }
    assert!(required > 0, "some writes were replicated before the crash");
    lags.sort();
    let acked = writes.iter().filter(|w| w.acked.is_some()).count();
    let lost_after: Vec<Duration> = by_key
        .values()
        .filter_map(|ws| {
            let last = ws.iter().rev().find(|w| w.acked.is_some())?;
            let got = store.get(&last.key).unwrap().map(|r| r.value);
            (got.as_ref() != Some(&last.value)).then(|| crashed - last.acked.unwrap())
        })
        .collect();
    println!(
        "{acked} PUTs acknowledged, {required} keys checked; lag over {} probes: median {:?}, max {:?}; \
         the oldest acknowledged write not in the replica was acknowledged {:?} before the crash; {said}",
        lags.len(),
        lags[lags.len() / 2],
        lags.last().unwrap(),
        lost_after.iter().max()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_litestream_attached_a_stop_is_clean_and_a_kill_reopens() {
    let Some(bin) = litestream() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (data, replica, config) = (tmp.path().join("data"), tmp.path().join("replica"), tmp.path().join("ls.yml"));
    // synchronous=normal: no commit log, so the WAL checks of partition/wal.rs judge the reopen.
    let args = ["--partitions", "16", "--litestream", "--writer-threads", "2", "--synchronous", "normal"];
    let server = Server::start(&data, &args).await;
    write_config(&data, &replica, &config);
    let replicator = Replicator::start(&bin, &config, &tmp.path().join("litestream.log"));
    let http = common::client();
    let put = |i: u32, server: &Server| http.put(server.kv(format!("k{i}").as_bytes())).body(format!("v{i}")).send();
    for i in 0..400 {
        assert!(put(i, &server).await.unwrap().status().is_success());
    }
    // Let Litestream take its read transaction on every partition before the stop.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stopping = Instant::now();
    let status = server.stop();
    println!("stopped in {:?} with Litestream attached", stopping.elapsed());
    assert!(status.success(), "{status}");

    // Again, then kill -9, then Litestream stops (closing its connections last): a reopen finds
    // every WAL and every write.
    let server = Server::start(&data, &args).await;
    for i in 400..800 {
        assert!(put(i, &server).await.unwrap().status().is_success());
    }
    server.kill();
    replicator.stop();
    let server = Server::start(&data, &args).await;
    for i in 0..800 {
        let got = http.get(server.kv(format!("k{i}").as_bytes())).send().await.unwrap();
        assert_eq!(got.text().await.unwrap(), format!("v{i}"));
    }
    assert!(server.stop().success());
    let check = common::check(&data);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
}

#[test]
fn a_restore_names_what_is_missing_and_leaves_the_directory_as_it_found_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, replica, config, new) =
        (tmp.path().join("data"), tmp.path().join("replica"), tmp.path().join("ls.yml"), tmp.path().join("new"));
    let create = shardlite_engine::CreateOptions { partitions: Some(2), ..Default::default() };
    drop(Store::create(&data, create, Config::inspection()).unwrap());
    write_config(&data, &replica, &config);
    let restore = |bin: &Path| {
        Command::new(common::EXE)
            .args(["restore", "--from-litestream"])
            .arg(&config)
            .arg("--data")
            .arg(&new)
            .arg("--litestream-bin")
            .arg(bin)
            .output()
            .unwrap()
    };
    let out = restore(Path::new("/nonexistent/litestream"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("Litestream not found"), "{said}");

    let Some(bin) = litestream() else { return };
    let out = restore(&bin);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("partition 0") && said.contains("holds no backup"), "{said}");
    assert_eq!(std::fs::read_dir(&new).unwrap().count(), 0, "a failed restore leaves nothing behind");

    std::fs::write(new.join("stray"), b"x").unwrap();
    let out = restore(&bin);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("is not empty"), "{said}");
}
