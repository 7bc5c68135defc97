//! Crash test: a child process writes through group commit (the writer threads keep
//! partitions' transactions open across groups, answering writes before their `COMMIT`:
//! `partition::held`) and reports every acknowledged write on stdout; the parent SIGKILLs it at a random moment, reopens the directory, and
//! requires every acknowledged write to be there with its value and counter, and `check` to
//! pass. Several rounds on the same directory, each continuing from what survived.
//!
//! The child is this same test binary, re-run with `--ignored --exact crash_child` and the
//! directory in `SHARDLITE_CRASH_DIR`.
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use shardlite_engine::{Condition, Config, CreateOptions, IndexMode, Store, Synchronous};

const THREADS: u32 = 6;
const KEYS_PER_THREAD: u32 = 50;
const ROUNDS: u32 = 6;

fn directory() -> CreateOptions {
    CreateOptions { partitions: Some(4), index: Some(IndexMode::Hash), ..CreateOptions::default() }
}

fn config() -> Config {
    Config { synchronous: Synchronous::Full, writer_threads: 2, merge_threshold: 64, ..Config::default() }
}

/// What the parent knows of one key: the last acknowledged state, and the write in flight.
#[derive(Debug, Clone, Default)]
struct KeyLog {
    /// `(counter, value)` of the last acknowledged write; `None`: absent.
    acked: Option<(u64, Vec<u8>)>,
    in_flight: Option<Option<Vec<u8>>>,
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut known: HashMap<u32, KeyLog> = HashMap::new();
    let mut rng_state = 0x1234_5678_u64;
    for round in 0..ROUNDS {
        rng_state = rng_state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let run_for = Duration::from_millis(150 + (rng_state >> 33) % 400);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env("SHARDLITE_CRASH_DIR", dir.path())
            .env("SHARDLITE_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    lines.lock().unwrap().push(line.unwrap());
                }
            })
        };
        // Kill only once writing is under way, so every round really interrupts writes.
        let started = Instant::now();
        while lines.lock().unwrap().iter().filter(|l| l.starts_with("ack ")).count() < 20 {
            assert!(started.elapsed() < Duration::from_secs(60), "child never started writing");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(run_for);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        let acks = apply_log(&mut known, &lines.lock().unwrap());
        assert!(acks > 0, "round {round}: no acknowledged writes");

        let store = Store::open(dir.path(), config()).unwrap();
        for (k, log) in known.iter_mut() {
            let got = common::counted(store.get(&common::key(*k)).unwrap());
            let acceptable = got == log.acked
                || match &log.in_flight {
                    Some(Some(v)) => got == Some((log.acked.as_ref().map_or(1, |(counter, _)| counter + 1), v.clone())),
                    Some(None) => got.is_none(),
                    None => false,
                };
            assert!(acceptable, "round {round} key {k}: found {got:?}, acknowledged {:?}", log);
            *log = KeyLog { acked: got, in_flight: None };
        }
        let checks = store.check().unwrap();
        assert!(checks.iter().all(|c| c.is_ok()), "round {round}: {checks:?}");
    }
}

/// Folds the child's report into what the parent knows; returns the number of acks.
fn apply_log(known: &mut HashMap<u32, KeyLog>, lines: &[String]) -> usize {
    let mut acks = 0;
    for line in lines {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["begin", k, v] => {
                known.entry(k.parse().unwrap()).or_default().in_flight = Some(Some(v.as_bytes().to_vec()))
            }
            ["begin-delete", k] => known.entry(k.parse().unwrap()).or_default().in_flight = Some(None),
            ["ack", k, counter, v] => {
                let log = known.entry(k.parse().unwrap()).or_default();
                log.acked = Some((counter.parse().unwrap(), v.as_bytes().to_vec()));
                log.in_flight = None;
                acks += 1;
            }
            ["ack-delete", k] => {
                let log = known.entry(k.parse().unwrap()).or_default();
                log.acked = None;
                log.in_flight = None;
                acks += 1;
            }
            _ => {} // the test harness's own lines
        }
    }
    acks
}

/// The child: writes until killed. Each thread owns its keys, so it always knows their state.
#[test]
#[ignore = "run by acknowledged_writes_survive_sigkill as a child process"]
fn crash_child() {
    let dir = std::env::var("SHARDLITE_CRASH_DIR").expect("run by the crash test");
    let round: u32 = std::env::var("SHARDLITE_CRASH_ROUND").unwrap().parse().unwrap();
    let store = Arc::new(Store::open_or_create(&dir, directory(), config()).unwrap());
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, out) = (Arc::clone(&store), Arc::clone(&out));
            std::thread::spawn(move || {
                let say = |line: String| {
                    let mut out = out.lock().unwrap();
                    writeln!(out, "{line}").unwrap();
                    out.flush().unwrap();
                };
                for seq in 0u32.. {
                    let k = t * KEYS_PER_THREAD + seq * 7 % KEYS_PER_THREAD;
                    let key = common::key(k);
                    if seq % 9 == 8 {
                        say(format!("begin-delete {k}"));
                        match store.delete(&key, Condition::None) {
                            Ok(_) | Err(shardlite_engine::Error::NotFound) => say(format!("ack-delete {k}")),
                            Err(e) => panic!("{e}"),
                        }
                    } else {
                        let v = format!("r{round}t{t}s{seq}");
                        say(format!("begin {k} {v}"));
                        let w = store.put(&key, v.clone().into_bytes(), Condition::None).unwrap();
                        say(format!("ack {k} {} {v}", w.version.counter));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
