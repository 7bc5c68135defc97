//! Held writes (`partition::held`): with the commit log, a partition's writer may answer a group
//! of writes once the log holds it and keep its SQLite transaction open for the next groups.
//! Such a write is read back by key at once (the record cache forgetting the value it had), is
//! in a scan, and a close commits it; a read after a write's answer never finds an older
//! version, and racing compare-and-set writes lose no update; a kept transaction commits
//! before its held writes pass their memory (`hold_kib`); and the commit log still drops
//! segments while writes never stop (transactions kept open one after another). That held
//! writes survive a crash before their `COMMIT` is the crash test's (`crash.rs`: its writes go
//! through the writer threads).
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use common::{
    increments::{self, INCREMENTS, KEYS, TASKS},
    key, value,
};
use shardlite_engine::{Condition, Config, Store, Synchronous};

/// Durable through the commit log; every write through the writer thread (none inline), many
/// groups to a transaction.
fn config() -> Config {
    Config { synchronous: Synchronous::Full, inline_writes_below: 0, hold_groups: 64, ..common::small_config() }
}

/// Commits of the store's one partition.
fn commits(store: &Store) -> u64 {
    store.stats().partitions[0].commits
}

/// Writes keys from `first` on until a write is answered without a commit of its partition
/// (its transaction kept open), and returns that key's number.
fn held_write(store: &Store, first: u32) -> u32 {
    for i in first..first + 200 {
        let before = commits(store);
        store.put(&key(i), value(i, 1), Condition::Absent).unwrap();
        if commits(store) == before {
            return i;
        }
    }
    panic!("200 writes in a row committed before their answer: no transaction was kept open");
}

#[test]
fn a_held_write_is_read_by_key_and_by_scan_and_committed_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), common::partitions(1), config()).unwrap();
    // Cached before the held update and delete: the reads after them must not find them.
    for k in 0..2 {
        store.put(&key(k), value(k, 1), Condition::Absent).unwrap();
        assert_eq!(store.get(&key(k)).unwrap().unwrap().value, value(k, 1));
    }
    let i = held_write(&store, 2);
    store.put(&key(0), value(0, 2), Condition::None).unwrap();
    store.delete(&key(1), Condition::None).unwrap();
    assert_eq!(store.get(&key(i)).unwrap().unwrap().value, value(i, 1), "a held insert reads back");
    assert_eq!(store.get(&key(0)).unwrap().unwrap().value, value(0, 2), "a held update reads back");
    assert_eq!(store.get(&key(1)).unwrap(), None, "a held delete reads as gone");

    let mut scanned = Vec::new();
    store
        .scan(0, 0, u64::MAX, true, |r| {
            scanned.push((r.key.to_vec(), r.value.to_vec()));
            Ok(())
        })
        .unwrap();
    assert!(scanned.contains(&(key(i), value(i, 1))), "a scan sees the held insert");
    assert!(scanned.contains(&(key(0), value(0, 2))), "a scan sees the held update");
    assert!(!scanned.iter().any(|(k, _)| *k == key(1)), "a scan misses the held delete's key");

    let checks = store.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
    let j = held_write(&store, i + 1);
    store.close();
    drop(store);
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(store.get(&key(j)).unwrap().unwrap().value, value(j, 1), "the close committed it");
}

#[test]
fn the_commit_log_drops_segments_while_writes_never_stop() {
    let dir = tempfile::tempdir().unwrap();
    // Sixteen partitions on one writer thread: their transactions begin and end in different
    // rounds, so one is nearly always kept open.
    let config = Config { log_segment_mib: 1, writer_threads: 1, hold_groups: 8, ..config() };
    let store = Arc::new(Store::create(dir.path(), common::partitions(16), config).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4u32)
        .map(|t| {
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            std::thread::spawn(move || {
                for i in (t * 1_000_000).. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    store.put(&key(i), vec![b'v'; 1024], Condition::None).unwrap();
                }
            })
        })
        .collect();
    // The maintenance thread looks every 500 ms and drops every closed segment no writer holds:
    // four are dropped long before 64 appended, unless a hold stays behind.
    let log = || store.stats().log.expect("a commit log");
    while log().trims < 4 && log().bytes < 64 << 20 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let dropped = log().trims;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().unwrap();
    }
    assert!(dropped >= 4, "64 MiB appended, {dropped} of its 1 MiB segments dropped: {:?}", log());
}

#[test]
fn a_read_after_an_answer_never_finds_an_older_version() {
    let dir = tempfile::tempdir().unwrap();
    // Two groups to a transaction: every held group is followed by one that commits them both.
    let config = Config { hold_groups: 2, ..config() };
    let store = Arc::new(Store::create(dir.path(), common::partitions(1), config).unwrap());
    let k = key(0);
    store.put(&k, value(0, 0), Condition::Absent).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Readers that keep reading the key: one of them reading while a commit ends could cache
    // the value the key had before it.
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (store, stop, k) = (Arc::clone(&store), Arc::clone(&stop), k.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    store.get(&k).unwrap();
                }
            })
        })
        .collect();
    let mut stale = None;
    for i in 1..=2_000 {
        let written = store.put(&k, value(0, i), Condition::None).unwrap();
        let read = store.get(&k).unwrap().unwrap().version;
        if read.counter < written.version.counter {
            stale = Some((written.version, read));
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.join().unwrap();
    }
    assert_eq!(stale, None, "a read after a write's answer found an older version (written, read)");
}

#[test]
fn racing_compare_and_set_writes_through_held_transactions_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { hold_groups: 8, ..config() };
    let store = Arc::new(Store::create(dir.path(), common::partitions(2), config).unwrap());
    increments::create(&store);
    let counters = increments::race(&store);
    assert_eq!(counters, u64::from(KEYS + TASKS * INCREMENTS), "every increment counted once");
    let checks = store.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
}

#[test]
fn a_kept_transaction_commits_before_its_held_writes_pass_their_memory() {
    let dir = tempfile::tempdir().unwrap();
    // 1 KiB: three 64-byte writes, each charged its key and value twice and 192 bytes besides.
    let config = Config { hold_kib: 1, ..config() };
    let store = Store::create(dir.path(), common::partitions(1), config).unwrap();
    let before = commits(&store);
    for i in 0..40 {
        let (k, v) = (key(i), vec![b'v'; 32]);
        store.put(&k, v, Condition::Absent).unwrap();
    }
    let committed = commits(&store) - before;
    assert!(committed >= 10, "40 writes held in {committed} commits: more than three a transaction");
    assert!(committed < 40, "no write was held at all: {committed} commits");
}
