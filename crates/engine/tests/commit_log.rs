//! The commit log through the store: a partition whose own files lost commits (as SQLite at
//! `synchronous = NORMAL` may on power loss) gets them back from the log at open; one older
//! than what the log's base says was durable (its WAL lost after the log let go of those
//! commits) is refused, or served after an accepted loss in a new epoch. (Cancelled records,
//! torn segments and trims: `commitlog`'s unit tests; a cancelled commit end to end:
//! `crates/shardlite/tests/io_error.rs`.)
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{counted, key, value};
use shardlite_engine::{layout::Layout, Condition, Config, Error, Store, Synchronous};

fn config() -> Config {
    Config { synchronous: Synchronous::Full, checkpoint_pages: 1_000_000, ..common::small_config() }
}

/// Copies partition `p`'s database and WAL from `from` over those of `to`.
fn put_back_partition(from: &Path, to: &Path, p: u32) {
    let (from, to) = (Layout::new(from), Layout::new(to));
    for (src, dst) in [(from.db(p), to.db(p)), (from.wal(p), to.wal(p))] {
        std::fs::copy(src, dst).unwrap();
    }
    let _ = std::fs::remove_file(to.shm(p));
}

#[test]
fn commits_a_partition_lost_come_back_from_the_log() {
    let root = tempfile::tempdir().unwrap();
    let (live, older, newer) = (root.path().join("live"), root.path().join("older"), root.path().join("newer"));
    let store = Store::create(&live, common::partitions(2), config()).unwrap();
    for i in 0..50 {
        store.put(&key(i), value(i, 0), Condition::None).unwrap();
    }
    common::crash_copy(&live, &older);
    for i in 0..50 {
        store.put(&key(i), value(i, 1), Condition::None).unwrap();
    }
    for i in (0..50).step_by(5) {
        store.delete(&key(i), Condition::None).unwrap();
    }
    for i in 50..80 {
        store.put(&key(i), value(i, 0), Condition::None).unwrap();
    }
    common::crash_copy(&live, &newer);
    drop(store);
    // Both partitions' files go back to the older state; the log keeps everything since.
    for p in 0..2 {
        put_back_partition(&older, &newer, p);
    }
    let store = Store::open(&newer, config()).unwrap();
    for i in 0..80 {
        let expected = match i {
            _ if i < 50 && i % 5 == 0 => None,
            _ if i < 50 => Some((2, value(i, 1))),
            _ => Some((1, value(i, 0))),
        };
        assert_eq!(counted(store.get(&key(i)).unwrap()), expected, "key {i}");
    }
    let checks = store.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
    assert_eq!(checks.iter().map(|c| c.records).sum::<u64>(), 70);
}

#[test]
fn a_partition_older_than_its_durable_base_is_refused_unless_the_loss_is_accepted() {
    let root = tempfile::tempdir().unwrap();
    let (live, older) = (root.path().join("live"), root.path().join("older"));
    let store = Store::create(&live, common::partitions(2), config()).unwrap();
    for i in 0..40 {
        store.put(&key(i), value(i, 0), Condition::None).unwrap();
    }
    // A check commits the writes a writer answered but holds: the older files have keys 0..40.
    store.check().unwrap();
    common::crash_copy(&live, &older);
    for i in 40..80 {
        store.put(&key(i), value(i, 0), Condition::None).unwrap();
    }
    let (epoch, lost_partition) = (store.manifest().epoch, store.partition_of(&key(79)));
    drop(store); // a clean close: the log is gone, its base says how far each partition was durable
    put_back_partition(&older, &live, lost_partition);

    let err = Store::open(&live, config()).unwrap_err();
    assert!(matches!(err, Error::WalMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("were lost"), "{err}");

    let store = Store::open(&live, Config { accept_wal_loss: true, ..config() }).unwrap();
    assert!(store.manifest().epoch > epoch, "an accepted loss starts a new epoch");
    for i in 0..80 {
        let found = store.get(&key(i)).unwrap().is_some();
        let lost = i >= 40 && store.partition_of(&key(i)) == lost_partition;
        assert_eq!(found, !lost, "key {i}");
    }
}

/// The database notes how far it applied the log only when its counters change: after updates
/// it holds more than it says, and replaying what it says it lacks must not take any key back.
#[test]
fn replaying_updates_the_database_already_holds_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let (live, copy) = (root.path().join("live"), root.path().join("copy"));
    let store = Store::create(&live, common::partitions(2), config()).unwrap();
    for i in 0..20 {
        store.put(&key(i), value(i, 0), Condition::None).unwrap();
    }
    for round in 1..=3 {
        for i in 0..20 {
            store.put(&key(i), value(i, round), Condition::None).unwrap();
        }
    }
    common::crash_copy(&live, &copy);
    drop(store);
    let store = Store::open(&copy, config()).unwrap();
    for i in 0..20 {
        assert_eq!(counted(store.get(&key(i)).unwrap()), Some((4, value(i, 3))), "key {i}");
    }
    assert!(store.check().unwrap().iter().all(|c| c.is_ok()));
}

/// `next_id` and `records` as the partition's `meta` table holds them (not as read with the
/// rows inserted since).
fn meta_as_noted(dir: &Path, p: u32) -> (i64, i64) {
    let conn = rusqlite::Connection::open(Layout::new(dir).db(p)).unwrap();
    let get = |name: &str| conn.query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| r.get(0)).unwrap();
    (get("next_id"), get("records"))
}

/// Transactions that only insert leave `meta` alone (one WAL page each, not two) until a note
/// is due; the records inserted since are counted at open, ids are never reused (not after
/// deleting the newest record either), and a database that lost only such inserts is still
/// found older than the log's base.
#[test]
fn inserts_between_notes_are_counted_at_open_and_their_ids_never_reused() {
    let root = tempfile::tempdir().unwrap();
    let (live, raw, copy) = (root.path().join("live"), root.path().join("raw"), root.path().join("copy"));
    let store = Store::create(&live, common::partitions(1), config()).unwrap();
    for i in 0..10 {
        store.put(&key(i), value(i, 0), Condition::None).unwrap();
    }
    let newest = store.get(&key(9)).unwrap().unwrap().version.id;
    common::crash_copy(&live, &raw);
    common::crash_copy(&live, &copy);
    drop(store);
    assert_eq!(meta_as_noted(&raw, 0), (1, 0), "ten inserts, fewer than a note's worth: meta untouched");

    let store = Store::open(&copy, config()).unwrap();
    assert_eq!(store.stats().partitions[0].records, 10);
    store.delete(&key(9), Condition::None).unwrap();
    drop(store);
    let store = Store::open(&copy, config()).unwrap();
    store.put(&key(10), value(10, 0), Condition::None).unwrap();
    assert!(store.get(&key(10)).unwrap().unwrap().version.id > newest, "the deleted newest id is not reused");
    let checks = store.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
    assert_eq!(checks[0].records, 10);
    drop(store);

    // More inserts than a note's worth: meta is noted on the way.
    let store = Store::open(&live, config()).unwrap();
    for i in 100..200 {
        store.put(&key(i), value(i, 0), Condition::None).unwrap();
    }
    common::crash_copy(&live, &raw);
    let (noted_next_id, noted_records) = meta_as_noted(&raw, 0);
    assert!(noted_next_id > 11 && noted_records == noted_next_id - 1, "noted: {noted_next_id}, {noted_records}");
    assert_eq!(store.stats().partitions[0].records, 110);
}
