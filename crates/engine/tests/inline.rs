//! Inline writes (`partition::writer::inline`): with the commit log, a single write may run on
//! its caller's thread instead of its partition's writer thread. Both ways take the same
//! partition writer in turn, so compare-and-set increments racing through both never lose an
//! update nor hand out a version twice; and an inline write whose caller stops awaiting it in
//! the middle of its flush still commits and gives its partition's writer back; and the
//! checkpoints of partitions written inline are finished, keeping their WALs small.
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    future::Future,
    pin::pin,
    sync::Arc,
    task::{Context, Waker},
};

use common::{
    increments::{self, INCREMENTS, KEYS, TASKS},
    key, value,
};
use shardlite_engine::{Condition, Config, Op, Outcome, Store, Synchronous};

/// Held writes off (`hold_groups` 1): a writer keeping a transaction open stays with its thread,
/// so under these racing writes none would run inline.
fn config(inline_writes_below: usize) -> Config {
    Config { synchronous: Synchronous::Full, inline_writes_below, hold_groups: 1, ..common::small_config() }
}

#[test]
fn inline_and_queued_compare_and_set_writes_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    // Half the tasks' writes are under way at once: some run inline, the rest queue.
    let store = Arc::new(Store::create(dir.path(), common::partitions(2), config(TASKS as usize / 2)).unwrap());
    increments::create(&store);
    let before = store.stats().writers;
    let counters = increments::race(&store);
    assert_eq!(counters, u64::from(KEYS + TASKS * INCREMENTS), "every increment counted once");
    let after = store.stats().writers;
    let (commits, inline) = (after.commits - before.commits, after.inline_commits - before.inline_commits);
    assert!(inline > 0, "no write ran inline: {after:?}");
    assert!(commits > inline, "no write went through a writer thread: {after:?}");
    let checks = store.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
}

#[test]
fn an_inline_write_dropped_while_it_awaits_its_flush_still_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), common::partitions(1), config(32)).unwrap();
    let put = Op::Put { key: key(1), value: value(1, 0), condition: Condition::None };
    {
        let mut write = pin!(store.write(put));
        let pending = write.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        assert!(pending.is_pending(), "a write answered before any flush: {pending:?}");
        // Its caller goes away here, mid-flush: it ends on a thread of its own.
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.stats().writers.inline_commits == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(store.stats().writers.inline_commits, 1, "the write ran inline and committed");
    assert_eq!(store.get(&key(1)).unwrap().map(|r| r.value), Some(value(1, 0)));
    // The partition's writer is back: the next write, inline or not, finds it.
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let put = Op::Put { key: key(1), value: value(1, 1), condition: Condition::Present };
    match runtime.block_on(store.write(put)).unwrap() {
        Outcome::Written(written) => assert_eq!(written.version.counter, 2),
        other => panic!("a put answered {other:?}"),
    }
    drop(store);
    let store = Store::open(dir.path(), config(32)).unwrap();
    assert_eq!(store.get(&key(1)).unwrap().map(|r| (r.version.counter, r.value)), Some((2, value(1, 1))));
}

#[test]
fn inline_writes_keep_the_wal_small() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { checkpoint_pages: 16, ..config(32) };
    let store = Store::create(dir.path(), common::partitions(1), config).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(async {
        for i in 0..3_000 {
            let put = Op::Put { key: key(i), value: vec![7; 200], condition: Condition::None };
            store.write(put).await.unwrap();
        }
    });
    let stats = store.stats();
    assert!(stats.writers.inline_commits > 0, "no write ran inline: {:?}", stats.writers);
    let p = &stats.partitions[0];
    assert!(p.checkpoints > 0, "{p:?}");
    // The checkpointer runs beside the writes, and a write that began meanwhile appends after
    // it; the inline write after each checkpoint finishes it before it lets go of the
    // partition's writer, so that the next transaction starts the WAL over (26 MB without
    // checkpoints: two or more 4 KiB frames a write). Left to the checkpointer alone when it
    // had copied every frame, the WAL grew to 0.25-14 MB; finished each time, 64-74 KiB
    // (`journal_size_limit` is 64 KiB) in eight runs.
    assert!(p.wal_bytes < 1 << 20, "the WAL grew to {} bytes", p.wal_bytes);
}
