//! The record cache under concurrency: writers update their own keys while readers hammer the
//! same keys (filling the cache as commits invalidate it). After a write is acknowledged, no
//! read may return the value it replaced, and no reader ever sees a key's counter go back.
//! A fill that raced a commit and were kept would break both.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{key, small_config, value};
use shardlite_engine::{Condition, Config, Op, Store};

const KEYS: u32 = 2;
const WRITERS: u32 = 2;

#[test]
fn an_acknowledged_write_is_never_hidden_by_a_cached_older_value() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { lookup_threads: 2, ..small_config() };
    let store = Store::create(dir.path(), common::partitions(2), config).unwrap();
    for i in 0..KEYS {
        store.put(&key(i), value(i, 0), Condition::None).unwrap();
    }
    let deadline = Instant::now() + Duration::from_millis(1500);
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let store = &store;
            s.spawn(move || {
                let mut version = 0;
                while Instant::now() < deadline {
                    version += 1;
                    for i in (w..KEYS).step_by(WRITERS as usize) {
                        let written = store.put(&key(i), value(i, version), Condition::None).unwrap();
                        let read = store.submit_get(key(i)).unwrap().wait().unwrap().unwrap();
                        assert!(
                            read.version.counter >= written.version.counter,
                            "key {i}: acknowledged {written:?}, then read {read:?}"
                        );
                    }
                }
            });
        }
        for _ in 0..3 {
            let store = &store;
            s.spawn(move || {
                let mut seen = vec![0u64; KEYS as usize];
                while Instant::now() < deadline {
                    for i in 0..KEYS {
                        let read = store.get(&key(i)).unwrap().unwrap();
                        let counter = read.version.counter;
                        assert!(counter >= seen[i as usize], "key {i}: counter went back to {counter}");
                        seen[i as usize] = counter;
                    }
                }
            });
        }
    });
    let cache = store.stats().record_cache.unwrap();
    assert!(cache.hits > 0 && cache.misses > 0, "both paths ran: {cache:?}");
}

/// A batch of writes to one partition has the lookup threads read its records first (warming
/// reads, which fill the cache like any read): after each batch is acknowledged, every key
/// reads its new value, never the one a warming read found before the commit.
#[test]
fn warming_reads_never_leave_a_replaced_value_in_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    // Reads never inline: the writers warm their rounds' records as they do on data on disk.
    let config = Config { lookup_threads: 4, inline_read_us: 0, ..small_config() };
    let store = Store::create(dir.path(), common::partitions(1), config).unwrap();
    let put = |i: u32, version: u32| Op::Put { key: key(i), value: value(i, version), condition: Condition::None };
    for version in 0..60 {
        let results = store.batch((0..64).map(|i| put(i, version)).collect()).unwrap();
        assert!(results.iter().all(Result::is_ok));
        for i in 0..64 {
            let read = store.get(&key(i)).unwrap().unwrap();
            assert_eq!(read.value, value(i, version), "key {i} after batch {version}");
        }
    }
}
