//! Damage and recovery: truncated, garbled, missing and out-of-date index files are detected
//! and rebuilt from SQLite with nothing lost; a damaged manifest is a clear error.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::{key, small_config, value};
use shardlite_engine::{Condition, Config, Store};

const N: u32 = 3_000;

fn config() -> Config {
    small_config()
}

/// A store holding keys 0..N with their index files merged, closed.
fn merged_store(dir: &Path) {
    let store = Store::create(dir, common::partitions(2), config()).unwrap();
    for i in 0..N {
        store.put(&key(i), value(i, 0), Condition::None).unwrap();
    }
    store.merge_indexes().unwrap();
}

fn index_file(dir: &Path) -> PathBuf {
    dir.join("p0000.idx")
}

fn assert_all_present(store: &Store) {
    for i in 0..N {
        assert_eq!(common::counted(store.get(&key(i)).unwrap()), Some((1, value(i, 0))), "key {i}");
    }
    let checks = store.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
}

#[test]
fn a_truncated_index_is_rebuilt_at_open() {
    let dir = tempfile::tempdir().unwrap();
    merged_store(dir.path());
    let len = std::fs::metadata(index_file(dir.path())).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(index_file(dir.path())).unwrap().set_len(len / 2).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(std::fs::metadata(index_file(dir.path())).unwrap().len(), len, "rebuilt to full size");
    assert_all_present(&store);
}

#[test]
fn a_garbled_index_page_is_detected_on_lookup_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    merged_store(dir.path());
    let mut bytes = std::fs::read(index_file(dir.path())).unwrap();
    for b in &mut bytes[4096..] {
        *b ^= 0x5A; // every bucket page damaged; the header stays valid
    }
    std::fs::write(index_file(dir.path()), &bytes).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert_all_present(&store);
    // Writes that need a lookup also repair the index rather than fail.
    assert_eq!(store.put(&key(1), value(1, 1), Condition::None).unwrap().version.counter, 2);
}

#[test]
fn a_garbled_header_or_missing_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    merged_store(dir.path());
    let mut bytes = std::fs::read(index_file(dir.path())).unwrap();
    bytes[0] = b'X';
    std::fs::write(index_file(dir.path()), &bytes).unwrap();
    std::fs::remove_file(dir.path().join("p0001.idx")).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert_all_present(&store);
}

#[test]
fn an_index_ahead_of_sqlite_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let config = config();
    {
        let store = Store::create(dir.path(), common::partitions(1), config.clone()).unwrap();
        for i in 0..100 {
            store.put(&key(i), value(i, 0), Condition::None).unwrap();
        }
    }
    let old_db = std::fs::read(dir.path().join("p0000.db")).unwrap();
    {
        let store = Store::open(dir.path(), config.clone()).unwrap();
        for i in 100..200 {
            store.put(&key(i), value(i, 0), Condition::None).unwrap();
        }
        store.merge_indexes().unwrap();
    }
    // Lose the second hundred from SQLite but keep the index that covers them.
    std::fs::write(dir.path().join("p0000.db"), old_db).unwrap();
    let store = Store::open(dir.path(), config).unwrap();
    for i in 0..200 {
        assert_eq!(store.get(&key(i)).unwrap().is_some(), i < 100, "key {i}");
    }
    let check = store.check_partition(0).unwrap();
    assert!(check.is_ok() && check.index_file_entries == 100, "{check:?}");
    // New records get fresh ids and are found.
    store.put(&key(150), value(150, 9), Condition::Absent).unwrap();
    assert_eq!(store.get(&key(150)).unwrap().unwrap().value, value(150, 9));
}

#[test]
fn a_damaged_manifest_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::create(dir.path(), common::partitions(2), config()).unwrap());
    let path = shardlite_engine::layout::Layout::new(dir.path()).manifest();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("index = \"hash\"", "index = \"none\"")).unwrap();
    let err = Store::open(dir.path(), config()).unwrap_err().to_string();
    assert!(err.contains(shardlite_engine::layout::MANIFEST) && err.contains("checksum mismatch"), "{err}");
    std::fs::write(&path, "garbage").unwrap();
    let err = Store::open(dir.path(), config()).unwrap_err().to_string();
    assert!(err.contains("no checksum line"), "{err}");
}
