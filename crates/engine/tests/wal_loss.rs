//! A missing write-ahead log, and the directory lock behind its detection: a crash-consistent
//! copy of a live directory (what `kill -9` leaves) recovers every commit with its logs, is
//! refused with a clear error without them — whether or not the wal-index survived — opens
//! with `accept_wal_loss` serving what the database files hold, and a clean close leaves
//! nothing to complain about. A second open of a directory in use is refused.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{key, small_config, value};
use shardlite_engine::{Condition, Config, Error, Store};

const N: u32 = 200;

fn config() -> Config {
    // No checkpoint runs while the test writes: every commit stays in the logs.
    Config { checkpoint_pages: 1_000_000, ..small_config() }
}

/// Writes keys 0..N into a new store at `live`, copies the directory (the store still open,
/// nothing in flight: as a crash leaves it) to `copy`, then closes the live store.
fn crashed_copy(live: &Path, copy: &Path) {
    crashed_copy_with(live, copy, config());
}

fn crashed_copy_with(live: &Path, copy: &Path, config: Config) {
    let store = Store::create(live, common::partitions(2), config).unwrap();
    for i in 0..N {
        store.put(&key(i), value(i, 0), Condition::None).unwrap();
    }
    common::crash_copy(live, copy);
    drop(store);
}

fn wal_missing(err: Error) -> String {
    assert!(matches!(err, Error::WalMissing { .. }), "{err:?}");
    err.to_string()
}

#[test]
fn a_crashed_directory_with_its_logs_recovers_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    crashed_copy(&dir.path().join("live"), &dir.path().join("copy"));
    let store = Store::open(dir.path().join("copy"), config()).unwrap();
    for i in 0..N {
        assert_eq!(common::counted(store.get(&key(i)).unwrap()), Some((1, value(i, 0))), "key {i}");
    }
}

/// With Litestream beside it, SQLite keeps the wal-index in a `-shm` file (another process
/// shares it), which says how much was lost; otherwise it lives in the process's memory
/// (`partition::sql`'s in-process locks) and an unclean close is all there is to go by.
#[test]
fn a_missing_log_is_refused_whether_or_not_the_wal_index_survived() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy");
    let config = Config { litestream: true, ..config() };
    crashed_copy_with(&dir.path().join("live"), &copy, config.clone());
    std::fs::remove_file(copy.join("p0000.db-wal")).unwrap();
    let message = wal_missing(Store::open(&copy, config.clone()).unwrap_err());
    assert!(message.contains("p0000.db-wal") && message.contains("commits are lost"), "{message}");
    assert!(message.contains("accept-wal-loss"), "says what to do: {message}");

    std::fs::remove_file(copy.join("p0000.db-shm")).unwrap();
    let message = wal_missing(Store::open(&copy, config.clone()).unwrap_err());
    assert!(message.contains("did not close") && message.contains("may be lost"), "{message}");
    // Refusing changed nothing: the next open is refused the same way.
    wal_missing(Store::open(&copy, config).unwrap_err());
}

#[test]
fn without_a_wal_index_file_a_missing_log_after_an_unclean_close_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy");
    crashed_copy(&dir.path().join("live"), &copy);
    assert!(!copy.join("p0000.db-shm").exists(), "the wal-index is in the process's memory");
    std::fs::remove_file(copy.join("p0000.db-wal")).unwrap();
    let message = wal_missing(Store::open(&copy, config()).unwrap_err());
    assert!(message.contains("did not close") && message.contains("may be lost"), "{message}");
}

#[test]
fn an_accepted_loss_serves_what_the_databases_hold_and_is_forgotten_after_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy");
    crashed_copy(&dir.path().join("live"), &copy);
    std::fs::remove_file(copy.join("p0000.db-wal")).unwrap();
    let store = Store::open(&copy, Config { accept_wal_loss: true, ..config() }).unwrap();
    let (mut lost, mut kept) = (0, 0);
    for i in 0..N {
        match store.get(&key(i)).unwrap() {
            None => {
                assert_eq!(store.partition_of(&key(i)), 0, "only partition 0 lost its log");
                lost += 1;
            }
            Some(record) => {
                assert_eq!((record.version.counter, record.value), (1, value(i, 0)));
                kept += 1;
            }
        }
    }
    assert!(lost > 0 && kept > 0, "lost {lost}, kept {kept}");
    let checks = store.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
    store.put(&key(0), value(0, 1), Condition::None).unwrap();
    store.close();

    assert!(!copy.join("p0000.db-wal").exists() && !copy.join("shardlite.open").exists(), "a clean close");
    let store = Store::open(&copy, config()).unwrap();
    assert_eq!(store.get(&key(0)).unwrap().unwrap().value, value(0, 1));
}

#[test]
fn a_directory_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), common::partitions(2), config()).unwrap();
    let err = Store::open(dir.path(), config()).unwrap_err();
    assert!(matches!(err, Error::InUse { .. }), "{err:?}");
    assert!(err.to_string().contains("in use"), "{err}");
    store.close();
    drop(Store::open(dir.path(), config()).unwrap());
}
