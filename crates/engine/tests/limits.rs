//! Resource bounds: 256 partitions open and serve under the usual default soft limit of 1024
//! open files (the store raises the soft limit as far as the hard limit allows). Its own test
//! binary, because it changes the process's limit.
#![allow(clippy::unwrap_used)]

mod common;

use rlimit::Resource;
use shardlite_engine::{Condition, Store};

#[test]
fn two_hundred_fifty_six_partitions_open_under_a_soft_limit_of_1024() {
    let (_, hard) = Resource::NOFILE.get().unwrap();
    Resource::NOFILE.set(1024.min(hard), hard).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), common::partitions(256), common::small_config()).unwrap();
    for i in 0..2_000 {
        store.put(&common::key(i), common::value(i, 0), Condition::None).unwrap();
    }
    for i in 0..2_000 {
        assert!(store.get(&common::key(i)).unwrap().is_some());
    }
    let stats = store.stats();
    assert!(stats.partitions.iter().all(|p| p.records > 0), "keys reach every partition");
    let readers: usize = stats.partitions.iter().map(|p| p.readers_open).sum();
    assert!(readers <= 256 * 2, "read pools stay bounded: {readers}");
    assert!(store.check().unwrap().iter().all(|c| c.is_ok()));
}
