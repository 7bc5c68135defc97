//! The store's contract, on real SQLite files: reads, conditional writes, batches, reopening,
//! merges, statistics, and the errors callers get for bad input or a wrong directory.
#![allow(clippy::unwrap_used)]

mod common;

use common::{counted, key, partitions, small_config, small_dir, value};
use shardlite_engine::{Condition, Config, Error, IndexMode, Op, Outcome, Store, Version};

fn all_modes() -> [IndexMode; 2] {
    [IndexMode::Hash, IndexMode::Sqlite]
}

#[test]
fn put_get_update_delete_in_every_indexed_mode() {
    for mode in all_modes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path(), small_dir(mode), small_config()).unwrap();
        let k = key(1);
        assert_eq!(store.get(&k).unwrap(), None, "{mode}");
        let one = store.put(&k, b"one".to_vec(), Condition::None).unwrap();
        assert_eq!((one.version.counter, one.created), (1, true));
        let two = store.put(&k, b"two".to_vec(), Condition::None).unwrap();
        assert_eq!((two.version.counter, two.created), (2, false));
        assert_eq!(two.version, Version { counter: 2, ..one.version }, "an update keeps the record's id");
        let read = store.get(&k).unwrap().unwrap();
        assert_eq!((read.version, read.value), (two.version, b"two".to_vec()));
        assert_eq!(store.delete(&k, Condition::None).unwrap(), two.version);
        assert_eq!(store.get(&k).unwrap(), None);
        assert_eq!(store.delete(&k, Condition::None), Err(Error::NotFound));
        // A key inserted again after a delete starts its counter over, as a new record.
        let three = store.put(&k, b"three".to_vec(), Condition::None).unwrap();
        assert_eq!(three.version.counter, 1);
        assert_ne!(three.version, one.version, "{mode}: a new life of the key, a new version");
    }
}

#[test]
fn conditional_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), small_dir(IndexMode::Hash), small_config()).unwrap();
    let k = key(7);
    let absent = Error::ConditionFailed { current: None };
    assert_eq!(store.put(&k, b"x".to_vec(), Condition::Present), Err(absent.clone()));
    assert_eq!(store.put(&k, b"x".to_vec(), Condition::UnknownVersion), Err(absent.clone()));
    let x = store.put(&k, b"x".to_vec(), Condition::Absent).unwrap();
    assert!(x.created);
    let failed = |v: Version| Error::ConditionFailed { current: Some(v) };
    assert_eq!(store.put(&k, b"y".to_vec(), Condition::Absent), Err(failed(x.version)));
    let wrong = Version { counter: 5, ..x.version };
    assert_eq!(store.put(&k, b"y".to_vec(), Condition::Version(wrong)), Err(failed(x.version)));
    assert_eq!(store.put(&k, b"y".to_vec(), Condition::UnknownVersion), Err(failed(x.version)));
    let y = store.put(&k, b"y".to_vec(), Condition::Version(x.version)).unwrap();
    assert_eq!(y.version.counter, 2);
    let z = store.put(&k, b"z".to_vec(), Condition::Present).unwrap();
    assert_eq!(z.version.counter, 3);
    assert_eq!(store.delete(&k, Condition::Version(y.version)), Err(failed(z.version)));
    assert_eq!(store.get(&k).unwrap().unwrap().value, b"z");
    assert_eq!(store.delete(&k, Condition::Version(z.version)), Ok(z.version));
    assert_eq!(store.delete(&k, Condition::Version(z.version)), Err(absent.clone()), "If-Match on an absent key");
    assert_eq!(store.delete(&k, Condition::Present), Err(absent));
    // The key's next life: the versions of the last one match nothing.
    let again = store.put(&k, b"again".to_vec(), Condition::None).unwrap();
    assert_eq!(again.version.counter, 1);
    for stale in [x.version, y.version, z.version] {
        assert_eq!(store.put(&k, b"lost".to_vec(), Condition::Version(stale)), Err(failed(again.version)));
    }
    assert_eq!(store.get(&k).unwrap().unwrap().value, b"again");
}

#[test]
fn bad_input_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { max_value: 100, ..small_config() };
    let store = Store::create(dir.path(), small_dir(IndexMode::Hash), config).unwrap();
    assert_eq!(store.get(b""), Err(Error::InvalidKey { len: 0, max: 1024 }));
    assert_eq!(store.get(&[1u8; 1025]), Err(Error::InvalidKey { len: 1025, max: 1024 }));
    assert!(store.get(&[1u8; 1024]).unwrap().is_none());
    assert_eq!(store.put(b"k", vec![0; 101], Condition::None), Err(Error::ValueTooLarge { len: 101, max: 100 }));
    assert!(store.put(b"k", vec![0; 100], Condition::None).is_ok());
    assert!(store.put(b"e", Vec::new(), Condition::None).is_ok(), "empty values are values");
    assert_eq!(store.get(b"e").unwrap().unwrap().value, b"");
}

#[test]
fn index_mode_none_appends_and_refuses_lookups() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), small_dir(IndexMode::None), small_config()).unwrap();
    for i in 0..100 {
        assert!(store.put(&key(i), value(i, 0), Condition::None).unwrap().created);
    }
    assert!(matches!(store.get(&key(1)), Err(Error::Unsupported { .. })));
    assert!(matches!(store.delete(&key(1), Condition::None), Err(Error::Unsupported { .. })));
    assert!(matches!(store.put(&key(1), vec![], Condition::Absent), Err(Error::Unsupported { .. })));
    let records: u64 = store.stats().partitions.iter().map(|p| p.records).sum();
    assert_eq!(records, 100);
    assert!(store.check().unwrap().iter().all(|c| c.is_ok()));
}

#[test]
fn batches_apply_in_order_and_answer_per_operation() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), small_dir(IndexMode::Hash), small_config()).unwrap();
    let (a, b) = (key(1), key(2));
    let first = store.batch(vec![Op::Put { key: a.clone(), value: b"1".to_vec(), condition: Condition::Absent }]);
    let Ok(Outcome::Written(written)) = first.unwrap().remove(0) else { panic!("the insert failed") };
    let (va, vb) = (written.version, |counter| Version { counter, ..written.version });
    let results = store
        .batch(vec![
            Op::Put { key: a.clone(), value: b"2".to_vec(), condition: Condition::Version(va) },
            Op::Get { key: a.clone() },
            Op::Put { key: a.clone(), value: b"x".to_vec(), condition: Condition::Absent },
            Op::Delete { key: b.clone(), condition: Condition::None },
            Op::Put { key: b.clone(), value: b"b".to_vec(), condition: Condition::None },
            Op::Delete { key: b.clone(), condition: Condition::None },
            Op::Get { key: b.clone() },
        ])
        .unwrap();
    let shape: Vec<String> = results
        .iter()
        .map(|r| match r {
            Ok(Outcome::Written(w)) => format!("written {} {}", w.version.counter, w.created),
            Ok(Outcome::Found(Some(r))) => format!("found {} {}", r.version.counter, String::from_utf8_lossy(&r.value)),
            Ok(Outcome::Found(None)) => "found nothing".into(),
            Ok(Outcome::Deleted { version }) => format!("deleted {}", version.counter),
            Err(e) => format!("{e:?}"),
        })
        .collect();
    let failed = format!("{:?}", Error::ConditionFailed { current: Some(vb(2)) });
    let expected =
        ["written 2 false", "found 2 2", &failed, "NotFound", "written 1 true", "deleted 1", "found nothing"];
    assert_eq!(shape, expected);
    assert_eq!(store.get(&a).unwrap().unwrap().version, vb(2));
    assert_eq!(store.get(&b).unwrap(), None);
    let err = store.batch(vec![Op::Get { key: a }, Op::Get { key: Vec::new() }]).unwrap_err();
    assert!(matches!(err, Error::InvalidKey { .. }));
}

#[test]
fn data_survives_reopen_and_merges() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { merge_threshold: 50, ..small_config() };
    {
        let store = Store::create(dir.path(), small_dir(IndexMode::Hash), config.clone()).unwrap();
        for i in 0..1_000 {
            store.put(&key(i), value(i, 0), Condition::None).unwrap();
        }
        for i in (0..1_000).step_by(3) {
            store.put(&key(i), value(i, 1), Condition::None).unwrap();
        }
        for i in (0..1_000).step_by(5) {
            store.delete(&key(i), Condition::None).unwrap();
        }
        store.merge_indexes().unwrap();
        let stats = store.stats();
        assert!(stats.partitions.iter().all(|p| p.merges > 0 && p.index_bytes > 0), "{stats:?}");
    }
    let store = Store::open(dir.path(), config).unwrap();
    for i in 0..1_000 {
        let got = counted(store.get(&key(i)).unwrap());
        let expected = match (i % 5, i % 3) {
            (0, _) => None,
            (_, 0) => Some((2, value(i, 1))),
            _ => Some((1, value(i, 0))),
        };
        assert_eq!(got, expected, "key {i}");
    }
    let checks = store.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
    assert_eq!(checks.iter().map(|c| c.records).sum::<u64>(), 800);
}

#[test]
fn merges_drop_entries_of_deleted_records() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { merge_threshold: 1_000_000, ..small_config() };
    let store = Store::create(dir.path(), partitions(1), config).unwrap();
    for i in 0..100 {
        store.put(&key(i), value(i, 0), Condition::None).unwrap();
    }
    store.merge_indexes().unwrap();
    for i in 0..40 {
        store.delete(&key(i), Condition::None).unwrap();
    }
    let before = store.check_partition(0).unwrap();
    assert!(before.is_ok(), "{before:?}");
    assert_eq!((before.index_file_entries, before.stale_entries), (100, 40));
    store.put(&key(1000), value(1000, 0), Condition::None).unwrap();
    store.merge_indexes().unwrap();
    let after = store.check_partition(0).unwrap();
    assert!(after.is_ok(), "{after:?}");
    assert_eq!((after.index_file_entries, after.stale_entries), (61, 0));
}

#[test]
fn the_manifest_guards_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::create(dir.path(), small_dir(IndexMode::Hash), small_config()).unwrap());
    let err = Store::create(dir.path(), small_dir(IndexMode::Hash), small_config()).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    let err = Store::open_or_create(dir.path(), partitions(8), small_config()).unwrap_err();
    assert!(err.to_string().contains("partitions = 4"), "{err}");
    let err = Store::open_or_create(dir.path(), small_dir(IndexMode::Sqlite), small_config()).unwrap_err();
    assert!(err.to_string().contains("index = hash"), "{err}");
    let reopened = Store::open(dir.path(), Config::default()).unwrap();
    assert_eq!(reopened.manifest().partitions, 4);
    let empty = tempfile::tempdir().unwrap();
    let err = Store::open(empty.path(), Config::default()).unwrap_err();
    assert!(matches!(err, Error::NotADataDirectory { .. }) && err.to_string().contains("no shardlite.toml"), "{err}");
}

/// A directory made before epochs (manifest format 1) opens, keeps its records and gets an
/// epoch; a clean reopen keeps the epoch and every version.
#[test]
fn a_format_1_directory_gets_an_epoch_and_clean_reopens_keep_versions() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config();
    let written = {
        let store = Store::create(dir.path(), small_dir(IndexMode::Hash), config.clone()).unwrap();
        store.put(&key(1), value(1, 0), Condition::None).unwrap().version
    };
    let path = shardlite_engine::layout::Layout::new(dir.path()).manifest();
    let text = std::fs::read_to_string(&path).unwrap();
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with("epoch") && !l.starts_with("checksum"))
        .map(|l| format!("{}\n", l.replace("format_version = 2", "format_version = 1")))
        .collect();
    std::fs::write(&path, format!("{body}checksum = \"{:08x}\"\n", crc32c_of(body.as_bytes()))).unwrap();
    assert_eq!(shardlite_engine::Manifest::read(&path).unwrap().epoch, 0);

    let store = Store::open(dir.path(), config.clone()).unwrap();
    let epoch = store.manifest().epoch;
    assert!(epoch > 0 && store.manifest().format_version == 2);
    let read = store.get(&key(1)).unwrap().unwrap();
    assert_eq!((read.version.id, read.version.counter, read.value), (written.id, 1, value(1, 0)));
    drop(store);
    let store = Store::open(dir.path(), config).unwrap();
    assert_eq!(store.manifest().epoch, epoch, "a clean reopen keeps the epoch");
    assert_eq!(store.get(&key(1)).unwrap().unwrap().version, read.version);
}

/// crc32c (Castagnoli), bit by bit: the manifest's checksum, computed independently.
fn crc32c_of(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn a_full_queue_answers_overloaded_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        writer_threads: 1,
        queue_capacity: 1,
        synchronous: shardlite_engine::Synchronous::Full,
        ..small_config()
    };
    let store = Store::create(dir.path(), partitions(1), config).unwrap();
    let mut pending = Vec::new();
    let mut overloaded = 0;
    for i in 0..2_000 {
        match store.submit(Op::Put { key: key(i), value: value(i, 0), condition: Condition::None }) {
            Ok(p) => pending.push((i, p)),
            Err(Error::Overloaded { partition: 0 }) => overloaded += 1,
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert!(overloaded > 0, "2,000 submissions never filled a queue of one");
    for (i, p) in pending {
        assert!(p.wait().is_ok());
        assert!(store.get(&key(i)).unwrap().is_some(), "acknowledged key {i} missing");
    }
}

#[test]
fn stats_count_records_and_batches() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), small_dir(IndexMode::Hash), small_config()).unwrap();
    let ops: Vec<Op> =
        (0..200).map(|i| Op::Put { key: key(i), value: value(i, 0), condition: Condition::None }).collect();
    store.batch(ops).unwrap();
    let stats = store.stats();
    assert_eq!(stats.partitions.iter().map(|p| p.records).sum::<u64>(), 200);
    assert_eq!(stats.partitions.iter().map(|p| p.ops).sum::<u64>(), 200);
    assert!(stats.partitions.iter().all(|p| p.db_bytes > 0));
    assert_eq!(stats.writers.requests, 4, "one request per partition");
    assert_eq!(stats.queue_depths.len(), 2);
}

#[test]
fn async_callers_await_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), small_dir(IndexMode::Hash), small_config()).unwrap();
    let pending = store.submit(Op::Put { key: key(3), value: value(3, 0), condition: Condition::None }).unwrap();
    let outcome = block_on(pending).unwrap();
    assert!(matches!(outcome, Outcome::Written(w) if w.created && w.version.counter == 1), "{outcome:?}");
    assert_eq!(block_on(store.submit_get(key(3)).unwrap()).unwrap().unwrap().value, value(3, 0));
    assert_eq!(store.submit_get(key(4)).unwrap().wait(), Ok(None));
    assert!(matches!(store.submit_get(Vec::new()), Err(Error::InvalidKey { .. })));
    let batch = store.submit_batch(vec![Op::Get { key: key(3) }, Op::Get { key: key(4) }]).unwrap();
    let results = block_on(batch.resolve());
    assert_eq!(results[1], Ok(Outcome::Found(None)));
    assert!(matches!(&results[0], Ok(Outcome::Found(Some(r))) if r.version.counter == 1));
}

/// Reads of data in memory run on their caller's thread: no lookup thread in between.
#[test]
fn reads_of_data_in_memory_run_on_the_callers_thread() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { record_cache_mib: 0, ..small_config() };
    let store = Store::create(dir.path(), small_dir(IndexMode::Hash), config).unwrap();
    for i in 0..50 {
        store.put(&key(i), value(i, 0), Condition::None).unwrap();
    }
    // The first reads of a partition open its connections and take long: they send reads to
    // the lookup threads until enough fast ones have been counted.
    for _ in 0..200 {
        let before = store.stats().inline_reads;
        for i in 0..50 {
            let pending = store.submit_get(key(i)).unwrap();
            assert_eq!(pending.wait().unwrap().unwrap().value, value(i, 0), "key {i}");
        }
        if store.stats().inline_reads > before {
            return;
        }
    }
    panic!("10,000 reads of 50 records in memory, and none ran on the caller's thread");
}

/// A lookup keeps its read transaction open between lookups, so that a checkpoint of another
/// process's (Litestream's, which knows nothing of ours) would wait for it: with `litestream`
/// none is kept, and such a checkpoint finds no reader in its way.
#[test]
fn beside_litestream_no_lookup_keeps_a_read_transaction() {
    for litestream in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let config = Config { record_cache_mib: 0, litestream, ..small_config() };
        let store = Store::create(dir.path(), partitions(1), config).unwrap();
        store.put(&key(1), value(1, 0), Condition::None).unwrap();
        assert!(store.get(&key(1)).unwrap().is_some());
        store.put(&key(2), value(2, 0), Condition::None).unwrap();
        let other = rusqlite::Connection::open(dir.path().join("p0000.db")).unwrap();
        let busy: i64 = other.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0)).unwrap();
        assert_eq!(busy == 1, !litestream, "litestream {litestream}: a lookup's read transaction held the WAL");
    }
}

/// A minimal executor: polls the future, parking the thread until its waker fires.
fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(out) => return out,
            Poll::Pending => std::thread::park(),
        }
    }
}

#[test]
fn the_writer_checkpoints_and_keeps_the_wal_small() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { checkpoint_pages: 16, ..small_config() };
    let store = Store::create(dir.path(), partitions(1), config).unwrap();
    for i in 0..3_000 {
        store.put(&key(i), vec![7; 200], Condition::None).unwrap();
    }
    let stats = store.stats();
    let p = &stats.partitions[0];
    assert!(p.checkpoints > 0, "{p:?}");
    // Without checkpoints each of the 3,000 commits appends two or more 4 KiB frames (26 MB
    // measured); the checkpointer runs beside the writer, so how far the WAL grew before it caught up
    // depends on scheduling: the bound leaves room for a busy machine.
    assert!(p.wal_bytes < 4 << 20, "the WAL grew to {} bytes", p.wal_bytes);
    assert!(p.db_bytes > 3_000 * 200, "checkpoints moved the records into the database: {p:?}");
}

/// Exports (each one read transaction over a whole partition) following each other on two
/// threads, so that one is always under way, while writes go on: SQLite can only restart a WAL
/// once no reader holds frames of it, so overlapping long readers are the classic way a WAL
/// grows without end. The partition's WAL must stay within a bound.
#[test]
fn the_wal_stays_bounded_while_exports_follow_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { checkpoint_pages: 16, ..small_config() };
    let store = Store::create(dir.path(), partitions(1), config).unwrap();
    for i in 0..2000 {
        store.put(&key(i), value(i, 1), Condition::None).unwrap();
    }
    let wal = dir.path().join("p0000.db-wal");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut largest = 0;
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut seen = 0u32;
                    store
                        .snapshot(0, |_| {
                            seen += 1;
                            // A slow client: the export takes a while.
                            if seen.is_multiple_of(200) {
                                std::thread::sleep(std::time::Duration::from_millis(1));
                            }
                            Ok(())
                        })
                        .unwrap();
                }
            });
        }
        for i in 2000..8000 {
            store.put(&key(i), value(i, 1), Condition::None).unwrap();
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    // Unbounded, it reached 48 MiB here; bounded, what one export lets pile up (3.9 to 4.8 MiB
    // seen).
    assert!(largest < 16 << 20, "the WAL grew to {largest} bytes");
}

/// A partition without a commit for `idle_wal_secs` gives its WAL's space back (a TRUNCATE
/// checkpoint): after a burst of writes to every partition, each WAL shrinks to nothing, the
/// records are all there, and writes go on. Under `full` with the commit log, as the server.
#[test]
fn idle_partitions_give_their_wal_space_back() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { idle_wal_secs: 1, synchronous: shardlite_engine::Synchronous::Full, ..small_config() };
    let store = Store::create(dir.path(), partitions(4), config.clone()).unwrap();
    (0..200).for_each(|i| {
        store.put(&key(i), value(i, 1), Condition::None).unwrap();
    });
    let wals = || (0..4).map(|p| std::fs::metadata(dir.path().join(format!("p{p:04}.db-wal"))).map_or(0, |m| m.len()));
    assert!(wals().all(|len| len > 0), "every partition was written: {:?}", wals().collect::<Vec<_>>());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while wals().any(|len| len > 0) {
        assert!(std::time::Instant::now() < deadline, "WALs still {:?}", wals().collect::<Vec<_>>());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for i in 0..200 {
        assert_eq!(store.get(&key(i)).unwrap().unwrap().value, value(i, 1));
    }
    store.put(&key(7), value(7, 2), Condition::None).unwrap();
    drop(store);
    let store = Store::open(dir.path(), config).unwrap();
    assert_eq!(store.get(&key(7)).unwrap().unwrap().value, value(7, 2));
    assert!(store.check().unwrap().iter().all(|c| c.is_ok()));
}
