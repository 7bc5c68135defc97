//! Power loss: a `kill -9` cannot show what a power cut loses, because the kernel keeps every
//! write the process made. So `shardlite serve` runs under an LD_PRELOAD shim
//! (`tests/fault/powercut.c`) that records every write, size change, name change and sync it
//! makes in its data directory, with the moment of each; several client tasks write to it
//! (PUT inserts and updates, DELETE, `POST /batch` across partitions) for a few seconds, each
//! noting when it sent each request and when the answer came, on the same clock; then the
//! server is SIGKILLed. From that one recording, many cut moments T are replayed: for each, the
//! data directory is rebuilt as a power cut at T could have left it (`tests/powercut/disk.rs`:
//! only synced data is sure to be there, the rest survives in random torn pieces), `shardlite
//! check` must pass on it, and the store opened on it must hold, for every key, the state of
//! its last write acknowledged before T, or that of the write in flight at T
//! (`tests/powercut/history.rs`).
//!
//! `acknowledged_writes_survive_power_loss` runs it with `--synchronous full`: nothing may be
//! lost. `the_simulation_catches_writes_acknowledged_before_their_flush` runs it with
//! `--synchronous normal`, which acknowledges commits SQLite has not flushed: the harness must
//! find acknowledged writes missing, or the simulation is too kind to prove anything; and it
//! must find nothing else (a damaged directory, an index that lost live records): `normal` may
//! lose the last commits, never more.
//!
//! The cut moments are spread from the server's start (so some fall while it creates its
//! directory) to its kill. Each test prints one line per cut and then its findings.
//!
//! `SHARDLITE_POWERCUT_CUTS=N` sets the number of cuts per test (default 24, for CI);
//! `SHARDLITE_POWERCUT_SEED` the seed of the random choices (the clients' operations, the cut
//! moments, what survives; the timing of a run is not reproducible, so a failing run keeps its
//! directory instead: the log, the server's data directory, and for each failed cut the
//! directory as rebuilt and after `check` and the store recovered it; it prints where);
//! `SHARDLITE_POWERCUT_KEEP=1` keeps every run's directory and every cut;
//! `SHARDLITE_POWERCUT_SERVE_ARGS` adds or replaces flags of `shardlite serve` (for trying other
//! configurations: `--journal delete`, for one, loses acknowledged writes here; see
//! `docs/reliability.md`). Skipped, saying so, where no C compiler is found.
#![allow(clippy::unwrap_used)]

mod common;
mod powercut;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::{Rng, Server};
use powercut::{
    disk::{Disk, Survival},
    history::{self, Failure, Judged, KeyHistory, Write},
    log, now,
};
use reqwest::StatusCode;
use serde_json::{json, Value};
use shardlite_engine::{
    layout::{Layout, MANIFEST},
    Config, KeyHasher, Manifest, Store,
};

const TASKS: usize = 6;
const KEYS_PER_TASK: usize = 24;
/// How long the clients write before the server is killed.
const LOAD: Duration = Duration::from_millis(2500);
const DEFAULT_CUTS: usize = 24;
/// 16 partitions; WAL checkpoints (and restarts, and truncations to the journal size limit)
/// every 8 pages; index merges every 8 new records per partition: all of it happens many times
/// in a run, so cuts fall in the middle of each.
const SERVE_ARGS: [(&str, &str); 5] = [
    ("--partitions", "16"),
    ("--writer-threads", "4"),
    ("--checkpoint-pages", "8"),
    ("--merge-threshold", "8"),
    ("--log-segment-mib", "1"),
];

/// The load phases of the two tests take turns, so that neither runs on half the two cores.
static LOAD_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_power_loss() {
    let Some(report) = run("full").await else { return };
    report.print();
    if !report.failures.is_empty() {
        let (failed, cuts) = (report.failed_cuts(), report.cuts.len());
        let kept = report.keep();
        panic!("{failed} of {cuts} cuts failed with --synchronous full (kept in {})", kept.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulation_catches_writes_acknowledged_before_their_flush() {
    let Some(report) = run("normal").await else { return };
    report.print();
    if report.lost() == 0 {
        let cuts = report.cuts.len();
        let kept = report.keep();
        panic!(
            "--synchronous normal acknowledges commits before they are flushed, yet none of {cuts} cuts lost an \
             acknowledged write: the simulation is too kind (kept in {})",
            kept.display()
        );
    }
    let other = report.failures.iter().filter(|(_, f)| !matches!(f, Failure::Lost { .. }) && !f.explained_by_a_loss());
    if other.count() > 0 {
        let kept = report.keep();
        panic!("--synchronous normal did more than lose its last commits (kept in {})", kept.display());
    }
}

/// One cut and what came of it.
struct Cut {
    t: u64,
    survival: Survival,
    /// The cut left no manifest: the server had not made its directory durable yet.
    before_creation: bool,
    judged: Judged,
    failures: usize,
}

/// What one run recorded, besides the shim's log.
struct Recording {
    keys: Vec<KeyHistory>,
    /// Just before the server was started.
    spawned: u64,
    /// The first request.
    load: u64,
    /// Just before the SIGKILL.
    killed: u64,
}

/// The outcome of one recorded run and its cuts.
struct Report {
    synchronous: &'static str,
    dir: tempfile::TempDir,
    /// Cut moments are shown from here: the server's start.
    start: u64,
    /// When the load started and the server was killed.
    load: u64,
    killed: u64,
    seed: u64,
    keys: usize,
    acknowledged: usize,
    unanswered: usize,
    census: BTreeMap<&'static str, usize>,
    cuts: Vec<Cut>,
    /// (cut index, failure).
    failures: Vec<(usize, Failure)>,
    elapsed: Duration,
}

impl Report {
    /// Acknowledged writes found missing, over all cuts.
    fn lost(&self) -> usize {
        self.failures.iter().filter(|(_, f)| matches!(f, Failure::Lost { .. })).count()
    }

    fn failed_cuts(&self) -> usize {
        self.cuts.iter().filter(|c| c.failures > 0).count()
    }

    fn print(&self) {
        let ms = |t: u64| (t - self.start) as f64 / 1e6;
        eprintln!(
            "power_loss --synchronous {}: seed {}, server started at 0 ms, load from {:.1} ms, killed at {:.1} ms; {} \
             keys, {} writes acknowledged, {} unanswered; server calls {:?}",
            self.synchronous,
            self.seed,
            ms(self.load),
            ms(self.killed),
            self.keys,
            self.acknowledged,
            self.unanswered,
            self.census
        );
        for (i, cut) in self.cuts.iter().enumerate() {
            eprintln!(
                "  cut {i:3} at {:8.1} ms ({}{}): {} keys acknowledged, {} in flight ({} applied): {}",
                ms(cut.t),
                cut.survival,
                if cut.before_creation { ", no data directory yet" } else { "" },
                cut.judged.acknowledged,
                cut.judged.in_flight,
                cut.judged.applied,
                if cut.failures == 0 { "ok".to_owned() } else { format!("{} FAILURES", cut.failures) }
            );
        }
        // Lost writes are expected by the hundred with `normal`: any other finding comes first.
        let mut shown: Vec<&(usize, Failure)> = self.failures.iter().collect();
        shown.sort_by_key(|(i, f)| (matches!(f, Failure::Lost { .. }) || f.explained_by_a_loss(), *i));
        for (i, failure) in shown.into_iter().take(40) {
            let t = self.cuts[*i].t;
            eprintln!("  cut {i} at {:.1} ms (CLOCK_MONOTONIC {t} ns): {failure}", ms(t));
        }
        if self.failures.len() > 40 {
            eprintln!("  ... {} failures in all", self.failures.len());
        }
        eprintln!(
            "power_loss --synchronous {}: {} cuts, {} failed, {} acknowledged writes lost, {} other failures \
             ({} of them torn batches a lost write explains), {:.1} s",
            self.synchronous,
            self.cuts.len(),
            self.failed_cuts(),
            self.lost(),
            self.failures.len() - self.lost(),
            self.failures.iter().filter(|(_, f)| f.explained_by_a_loss()).count(),
            self.elapsed.as_secs_f64()
        );
    }

    /// Keeps the run's directory (log, failed cuts) for inspection; its path.
    fn keep(self) -> PathBuf {
        self.dir.keep()
    }
}

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(value.parse().unwrap_or_else(|_| panic!("{name}={value}: not a number")))
}

/// Records one run of `shardlite serve --synchronous SYNCHRONOUS` under the shim and replays
/// its cuts; `None` if skipped.
async fn run(synchronous: &'static str) -> Option<Report> {
    let started = Instant::now();
    let mut dir = tempfile::tempdir().unwrap();
    if std::env::var_os("SHARDLITE_POWERCUT_KEEP").is_some() {
        dir.disable_cleanup(true);
        eprintln!("power_loss --synchronous {synchronous}: keeping {}", dir.path().display());
    }
    let Some(shim) = powercut::build_shim(dir.path()) else {
        eprintln!("skipped: no C compiler (cc) to build the power-cut shim");
        return None;
    };
    // The shim compares paths as the server spells them: the directory's real path.
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let data = root.join("data");
    std::fs::create_dir(&data).unwrap();
    let log_path = root.join("powercut.log");
    let seed = env_number("SHARDLITE_POWERCUT_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    let cuts = env_number("SHARDLITE_POWERCUT_CUTS").map_or(DEFAULT_CUTS, |n| n as usize);
    let mut rng = Rng::new(seed);

    let Recording { keys, spawned, load, killed } = {
        let _turn = LOAD_TURN.lock().await;
        record(&data, &log_path, &shim, synchronous, &mut rng).await
    };
    let records = log::read(&log_path);
    let census = log::census(&records);
    let acknowledged = keys.iter().flat_map(|k| &k.writes).filter(|w| w.answered.is_some()).count();
    let unanswered = keys.iter().flat_map(|k| &k.writes).filter(|w| w.answered.is_none()).count();
    assert!(acknowledged >= 100, "only {acknowledged} writes were acknowledged: the load did not run");

    // Cut moments: one at random in each of `cuts` equal slices of the run, from the server's
    // start (creating its directory) to its kill; each cut takes the next of three ways for
    // what was not durable to fare.
    let span = killed - spawned;
    let moments: Vec<u64> = (0..cuts as u64).map(|i| spawned + (i * span + rng.below(span)) / cuts as u64).collect();
    let mut disk = Disk::new(data.to_str().unwrap(), &records);
    let mut report = Report {
        synchronous,
        dir,
        start: spawned,
        load,
        killed,
        seed,
        keys: keys.len(),
        acknowledged,
        unanswered,
        census,
        cuts: Vec::new(),
        failures: Vec::new(),
        elapsed: Duration::ZERO,
    };
    for (i, t) in moments.into_iter().enumerate() {
        let survival = match i % 4 {
            0 => Survival::Durable,
            1 => Survival::Everything,
            _ => Survival::Random(rng.below(1_000_000)),
        };
        disk.advance_to(t);
        let files = disk.crash(&mut rng, survival);
        let before_creation = !files.contains_key(MANIFEST);
        let (judged, failures) = cut(&files, &keys, t, &root.join(format!("cut-{i:03}")));
        report.cuts.push(Cut { t, survival, before_creation, judged, failures: failures.len() });
        report.failures.extend(failures.into_iter().map(|f| (i, f)));
    }
    report.elapsed = started.elapsed();
    Some(report)
}

/// Starts the server under the shim, runs the clients for [`LOAD`], kills the server.
async fn record(data: &Path, log_path: &Path, shim: &Path, synchronous: &str, rng: &mut Rng) -> Recording {
    let env = [
        ("LD_PRELOAD", shim.as_os_str()),
        ("SHARDLITE_POWERCUT_DIR", data.as_os_str()),
        ("SHARDLITE_POWERCUT_LOG", log_path.as_os_str()),
    ];
    // Flags from the environment replace the same default flags (clap refuses a flag twice).
    let extra = std::env::var("SHARDLITE_POWERCUT_SERVE_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    let mut args: Vec<&str> = Vec::new();
    for (flag, value) in SERVE_ARGS.into_iter().chain([("--synchronous", synchronous)]) {
        if !extra.contains(&flag) {
            args.extend([flag, value]);
        }
    }
    args.extend(extra);
    let spawned = now();
    let server = Server::start_with_env(data, &args, &env).await;
    let manifest = Manifest::read(&Layout::new(data).manifest()).unwrap();
    let hasher = KeyHasher::new(manifest.hash_seed, manifest.partitions);

    let load = now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let keys: Vec<KeyHistory> = (0..KEYS_PER_TASK)
                .map(|j| {
                    let key = format!("powercut-t{t}-k{j:02}").into_bytes();
                    KeyHistory { partition: hasher.locate(&key).partition, key, writes: Vec::new() }
                })
                .collect();
            tokio::spawn(client(server.url.clone(), t, keys, Rng::new(rng.next())))
        })
        .collect();
    tokio::time::sleep(LOAD).await;
    assert_only_shm_is_mapped(server.pid(), data);
    let killed = now();
    server.kill();
    let mut keys = Vec::new();
    for task in tasks {
        keys.extend(tokio::time::timeout(Duration::from_secs(60), task).await.unwrap().unwrap());
    }
    Recording { keys, spawned, load, killed }
}

/// Bytes stored through a shared writable mapping never pass the shim: the only such mappings
/// of files in the directory must be SQLite's wal-index (`-shm`), which the model leaves out.
fn assert_only_shm_is_mapped(pid: u32, data: &Path) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(perms), Some(path)) = (fields.get(1), fields.get(5)) else { continue };
        let shared_writable = perms.as_bytes().get(1) == Some(&b'w') && perms.as_bytes().get(3) == Some(&b's');
        if shared_writable && Path::new(path).starts_with(data) {
            assert!(path.ends_with("-shm"), "a shared writable mapping the shim cannot see: {line}");
        }
    }
}

/// Writes the directory a power cut at `t` left (`files`) twice, runs `shardlite check` on one
/// copy and reads every key from the other. A cut that failed keeps both copies and the
/// directory as rebuilt under `dir`. Without a manifest there is no data directory yet (the
/// next start creates one): every key must then be absent, which holds if none was
/// acknowledged.
fn cut(files: &BTreeMap<String, Vec<u8>>, keys: &[KeyHistory], t: u64, dir: &Path) -> (Judged, Vec<Failure>) {
    if !files.contains_key(MANIFEST) {
        return history::judge(keys, t, |_| None);
    }
    let (checked, opened) = (dir.join("checked"), dir.join("opened"));
    for copy in [&checked, &opened] {
        std::fs::create_dir_all(copy).unwrap();
        for (name, content) in files {
            std::fs::write(copy.join(name), content).unwrap();
        }
    }
    let mut failures = Vec::new();
    // Its error output without a backtrace: the finding is the message.
    let check = Command::new(common::EXE)
        .args(["check", "--data"])
        .arg(&checked)
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .output()
        .unwrap();
    if !check.status.success() {
        let output = format!("{}{}", String::from_utf8_lossy(&check.stdout), String::from_utf8_lossy(&check.stderr));
        failures.push(Failure::Check(output));
    }
    let config = Config { writer_threads: 1, lookup_threads: 1, record_cache_mib: 0, ..Config::default() };
    let judged = match Store::open(&opened, config) {
        Ok(store) => {
            let (judged, found) = history::judge(keys, t, |key| store.get(key).unwrap().map(|r| r.value));
            failures.extend(found);
            store.close();
            judged
        }
        Err(err) => {
            failures.push(Failure::Open(err.to_string()));
            Judged::default()
        }
    };
    if failures.is_empty() && std::env::var_os("SHARDLITE_POWERCUT_KEEP").is_none() {
        std::fs::remove_dir_all(dir).unwrap();
    } else {
        // As the cut left it, before `check` and the store touched it (both recover).
        let rebuilt = dir.join("rebuilt");
        std::fs::create_dir_all(&rebuilt).unwrap();
        for (name, content) in files {
            std::fs::write(rebuilt.join(name), content).unwrap();
        }
    }
    (judged, failures)
}

/// One client task: writes to its own keys until a request fails (the server was killed),
/// then hands back their histories.
async fn client(url: String, t: usize, mut keys: Vec<KeyHistory>, mut rng: Rng) -> Vec<KeyHistory> {
    let http = common::client();
    for seq in 0u64.. {
        let pick = rng.below(10);
        let answered = if pick >= 7 {
            batch(&http, &url, t, seq, &mut keys, &mut rng).await
        } else {
            single(&http, &url, t, seq, &mut keys, &mut rng, pick >= 5).await
        };
        if !answered {
            break;
        }
    }
    keys
}

/// A value: a tag naming the write, `:`, then 0..600 bytes of padding so that records vary in
/// size and fill WAL pages.
fn value(tag: &str, rng: &mut Rng) -> Vec<u8> {
    let mut v = format!("{tag}:").into_bytes();
    v.resize(v.len() + rng.below(600) as usize, b'x');
    v
}

/// The state a key is known to have: that of its last write (every earlier one was answered).
fn known(k: &KeyHistory) -> Option<Vec<u8>> {
    k.writes.last().and_then(|w| w.state.clone())
}

/// One PUT, or a DELETE of a present key if `delete`; `false` if it got no answer.
async fn single(
    http: &reqwest::Client,
    url: &str,
    t: usize,
    seq: u64,
    keys: &mut [KeyHistory],
    rng: &mut Rng,
    delete: bool,
) -> bool {
    let j = rng.below(keys.len() as u64) as usize;
    let k = &mut keys[j];
    let target = format!("{url}/kv/{}", hex::encode(&k.key));
    let before = known(k);
    let (request, expect, state) = if delete && before.is_some() {
        (http.delete(&target), StatusCode::NO_CONTENT, None)
    } else {
        let v = value(&format!("t{t}-s{seq}"), rng);
        let status = if before.is_some() { StatusCode::OK } else { StatusCode::CREATED };
        (http.put(&target).body(v.clone()), status, Some(v))
    };
    k.writes.push(Write { sent: now(), answered: None, state, batch: None });
    let Ok(resp) = request.send().await else { return false };
    let answered = now();
    if resp.status() == StatusCode::SERVICE_UNAVAILABLE {
        k.writes.pop(); // refused before it was queued
        return true;
    }
    assert_eq!(resp.status(), expect, "key {}: known {}", String::from_utf8_lossy(&k.key), history::show(&before));
    k.writes.last_mut().unwrap().answered = Some(answered);
    true
}

/// One `POST /batch` of 2..=8 distinct keys (puts, deletes of present keys); `false` if it got
/// no answer.
async fn batch(http: &reqwest::Client, url: &str, t: usize, seq: u64, keys: &mut [KeyHistory], rng: &mut Rng) -> bool {
    let id = (t as u64) << 32 | seq;
    let mut slots: Vec<usize> = (0..keys.len()).collect();
    let n = 2 + rng.below(7) as usize;
    let mut ops = Vec::new();
    let mut expected = Vec::new(); // (slot, status)
    for i in 0..n {
        let j = slots.swap_remove(rng.below(slots.len() as u64) as usize);
        let k = &mut keys[j];
        let hex_key = hex::encode(&k.key);
        let before = known(k);
        let (op, status, state) = if before.is_some() && rng.below(3) == 0 {
            (json!({"op": "delete", "key": hex_key}), 204, None)
        } else {
            let v = value(&format!("t{t}-s{seq}-b{i}"), rng);
            let status = if before.is_some() { 200 } else { 201 };
            (json!({"op": "put", "key": hex_key, "value": hex::encode(&v)}), status, Some(v))
        };
        k.writes.push(Write { sent: 0, answered: None, state, batch: Some(id) });
        ops.push(op);
        expected.push((j, status));
    }
    let body = serde_json::to_vec(&json!({ "ops": ops })).unwrap();
    let sent = now();
    for (j, _) in &expected {
        keys[*j].writes.last_mut().unwrap().sent = sent;
    }
    let Ok(resp) = http.post(format!("{url}/batch")).body(body).send().await else { return false };
    let answered = now();
    assert_eq!(resp.status(), StatusCode::OK, "batch {id}");
    let Ok(bytes) = resp.bytes().await else { return false };
    let answer: Value = serde_json::from_slice(&bytes).unwrap();
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), expected.len(), "{answer}");
    for ((j, status), result) in expected.into_iter().zip(results) {
        if result["status"] == 503 {
            keys[j].writes.pop(); // refused before it was queued
            continue;
        }
        assert_eq!(result["status"], status, "batch {id}: {result}");
        keys[j].writes.last_mut().unwrap().answered = Some(answered);
    }
    true
}
