//! Backups of an open store under writes, and their restore: every record acknowledged before
//! the backup began is restored with its counter, the restored directory passes `check` with
//! an index that needed no rebuild, is in a later epoch, and damaged, incomplete or misplaced
//! backups and restores are refused, naming the file.
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use common::{key, partitions, small_config, value};
use shardlite_engine::{
    backup::{restore, BackupManifest, BackupOptions, Progress},
    layout::Layout,
    Condition, Config, Op, Store,
};

fn config() -> Config {
    // Merges during the load: the index file, its frozen and recent parts and tombstones all
    // meet the snapshot.
    Config { merge_threshold: 300, ..small_config() }
}

/// A store of 4 partitions with `n` records, some updated and some deleted: key -> (counter, value).
fn loaded(dir: &std::path::Path, n: u32) -> (Store, HashMap<u32, (u64, Vec<u8>)>) {
    let store = Store::create(dir, partitions(4), config()).unwrap();
    let mut expected = HashMap::new();
    for i in 0..n {
        store.put(&key(i), value(i, 1), Condition::None).unwrap();
        expected.insert(i, (1, value(i, 1)));
    }
    for i in (0..n).step_by(7) {
        store.put(&key(i), value(i, 2), Condition::None).unwrap();
        expected.insert(i, (2, value(i, 2)));
    }
    for i in (0..n).step_by(11) {
        store.delete(&key(i), Condition::None).unwrap();
        expected.remove(&i);
    }
    (store, expected)
}

#[test]
fn a_backup_under_writes_restores_every_acknowledged_record_and_passes_check() {
    let dir = tempfile::tempdir().unwrap();
    let (store, expected) = loaded(&dir.path().join("data"), 3000);
    let store = Arc::new(store);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 10_000u32;
            while !stop.load(Ordering::Relaxed) {
                let ops = vec![
                    Op::Put { key: key(i), value: value(i, 1), condition: Condition::None },
                    Op::Delete { key: key(i - 3), condition: Condition::None },
                ];
                let _ = store.batch(ops).unwrap();
                i += 1;
            }
            i
        })
    };
    let progress = Progress::default();
    let to = dir.path().join("backup");
    let summary = store.backup(&to, &BackupOptions::default(), &progress).unwrap();
    stop.store(true, Ordering::Relaxed);
    let written_during = writer.join().unwrap() - 10_000;
    assert!(written_during > 0, "writes went on during the backup");
    assert_eq!(summary.manifest.partitions.len(), 4);
    assert!(summary.manifest.records() >= expected.len() as u64);
    let report = progress.report();
    assert_eq!((report.partitions_done, report.bytes_done), (4, summary.bytes - summary.manifest.files[0].bytes));
    let epoch = store.manifest().epoch;
    drop(store);

    let restored = dir.path().join("restored");
    let (_, new_epoch) = restore(&to, &restored, &Progress::default()).unwrap();
    assert!(new_epoch > epoch, "a restored directory starts a new epoch");
    let store = Store::open(&restored, config()).unwrap();
    assert_eq!(store.manifest().epoch, new_epoch);
    for (i, (counter, value)) in &expected {
        let record = store.get(&key(*i)).unwrap().unwrap_or_else(|| panic!("key {i} lost"));
        assert_eq!((record.version.counter, &record.value), (*counter, value));
        assert_eq!(record.version.epoch, new_epoch);
    }
    for (p, part) in summary.manifest.partitions.iter().enumerate() {
        let stats = &store.stats().partitions[p];
        assert_eq!(stats.records, part.records);
        assert_eq!(stats.index_recent_entries, 0, "the backup's index covers its snapshot: nothing to add at open");
    }
    let checks = store.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
}

#[test]
fn a_backup_of_merged_indexes_copies_them_as_they_are_and_restores_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (store, expected) = loaded(&data, 2000);
    // Every entry in the index files, no tombstone left: each file alone is its snapshot's index.
    store.merge_indexes().unwrap();
    let to = dir.path().join("backup");
    store.backup(&to, &BackupOptions::default(), &Progress::default()).unwrap();
    drop(store);
    for p in 0..4 {
        let (source, copy) = (Layout::new(&data).index(p), Layout::new(&to).index(p));
        assert_eq!(std::fs::read(copy).unwrap(), std::fs::read(source).unwrap(), "partition {p}'s index file");
    }
    let store = restored(&to, &dir.path().join("restored"), &expected);
    assert!(store.stats().partitions.iter().all(|p| p.index_recent_entries == 0));
}

#[test]
fn a_reader_holding_old_wal_frames_makes_the_backup_read_through_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (store, mut expected) = loaded(&data, 400);
    // A reader whose snapshot predates the commits below: the checkpoint before the backup's
    // snapshot cannot copy the WAL whole, so no database file alone is the snapshot.
    let readers: Vec<rusqlite::Connection> = (0..4)
        .map(|p| {
            let conn = rusqlite::Connection::open(Layout::new(&data).db(p)).unwrap();
            conn.execute_batch("BEGIN; SELECT count(*) FROM records;").unwrap();
            conn
        })
        .collect();
    for i in 400..600 {
        store.put(&key(i), value(i, 1), Condition::None).unwrap();
        expected.insert(i, (1, value(i, 1)));
    }
    let to = dir.path().join("backup");
    store.backup(&to, &BackupOptions { max_rate: Some(64 << 20) }, &Progress::default()).unwrap();
    drop((readers, store));
    restored(&to, &dir.path().join("restored"), &expected);
}

/// Restores the backup `from` into `to`, which then holds every record of `expected` and
/// passes its checks; opened.
fn restored(from: &std::path::Path, to: &std::path::Path, expected: &HashMap<u32, (u64, Vec<u8>)>) -> Store {
    restore(from, to, &Progress::default()).unwrap();
    let store = Store::open(to, config()).unwrap();
    for (i, (counter, value)) in expected {
        let record = store.get(&key(*i)).unwrap().unwrap_or_else(|| panic!("key {i} lost"));
        assert_eq!((record.version.counter, &record.value), (*counter, value));
    }
    let checks = store.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
    store
}

#[test]
fn damaged_and_incomplete_backups_and_occupied_targets_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = loaded(&dir.path().join("data"), 500);
    let to = dir.path().join("backup");
    store.backup(&to, &BackupOptions::default(), &Progress::default()).unwrap();
    let err = store.backup(&to, &BackupOptions::default(), &Progress::default()).unwrap_err().to_string();
    assert!(err.contains("is not empty"), "{err}");
    drop(store);

    let layout = Layout::new(&to);
    let restore_err = |name: &str| {
        let target = dir.path().join(name);
        let err = restore(&to, &target, &Progress::default()).unwrap_err().to_string();
        assert!(!target.exists(), "a refused restore leaves nothing behind");
        err
    };

    // A flipped byte in the middle of a database.
    let db = std::fs::read(layout.db(2)).unwrap();
    let mut flipped = db.clone();
    flipped[db.len() / 2] ^= 0x40;
    std::fs::write(layout.db(2), &flipped).unwrap();
    let err = restore_err("r1");
    assert!(err.contains("p0002.db") && err.contains("crc32c") && err.contains("damaged"), "{err}");
    std::fs::write(layout.db(2), &db).unwrap();

    // A missing index file.
    let idx = std::fs::read(layout.index(1)).unwrap();
    std::fs::remove_file(layout.index(1)).unwrap();
    let err = restore_err("r2");
    assert!(err.contains("p0001.idx") && err.contains("missing"), "{err}");
    std::fs::write(layout.index(1), &idx).unwrap();

    // No manifest: the backup never completed.
    let manifest = std::fs::read(layout.backup_manifest()).unwrap();
    std::fs::remove_file(layout.backup_manifest()).unwrap();
    let err = restore_err("r3");
    assert!(err.contains("backup.toml") && err.contains("not a complete backup"), "{err}");
    std::fs::write(layout.backup_manifest(), &manifest).unwrap();
    BackupManifest::read(&to).unwrap();

    // A target that holds something.
    let occupied = dir.path().join("occupied");
    std::fs::create_dir(&occupied).unwrap();
    std::fs::write(occupied.join("x"), b"x").unwrap();
    let err = restore(&to, &occupied, &Progress::default()).unwrap_err().to_string();
    assert!(err.contains("is not empty"), "{err}");

    // Intact again: restores into an empty directory.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    restore(&to, &empty, &Progress::default()).unwrap();
    let store = Store::open(&empty, config()).unwrap();
    assert!(store.check().unwrap().iter().all(|c| c.is_ok()));
}
