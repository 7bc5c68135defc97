//! A partition moved between two stores the way a cluster's move does it (docs/cluster.md,
//! "Moving a partition"): the copy streamed from one snapshot while writes go on, then a round
//! of the ids changed since; the new owner ends with exactly the old owner's records (ids,
//! counters, values, `next_id`, and so every version: the epoch too) whatever was written,
//! updated or deleted during the copy, its index and `meta` agree with them (`check`), and the
//! old owner's stale copy is emptied. A copy of a database file outside any store (a restored
//! replica) is given a new epoch instead.
#![allow(clippy::unwrap_used)]

mod common;

use common::{key, partitions, small_config, value};
use shardlite_engine::{layout::Layout, Condition, IndexMode, MovePart, Store};

/// Every record of the one partition: (key, id, counter, value).
fn records(store: &Store) -> Vec<(Vec<u8>, u64, u64, Vec<u8>)> {
    let mut out = Vec::new();
    store
        .scan(0, 0, u64::MAX, true, |r| {
            out.push((r.key.to_vec(), r.version.id, r.version.counter, r.value.to_vec()));
            Ok(())
        })
        .unwrap();
    out
}

/// Streams `part` of partition 0 from `from` into `to`, calling `meanwhile` once, after the
/// stream's snapshot was taken and before it is over.
fn send(from: &Store, to: &Store, part: MovePart, mut meanwhile: impl FnMut()) -> u64 {
    let mut pieces = Vec::new();
    from.send_partition(0, part, 128, |piece| {
        if pieces.is_empty() {
            meanwhile();
        }
        pieces.push(piece);
        Ok(())
    })
    .unwrap();
    let mut adoption = to.adopt(0, part).unwrap();
    for piece in &pieces {
        adoption.push(to, piece).unwrap();
    }
    adoption.finish(to).unwrap().entries
}

fn put(store: &Store, i: u32, version: u32) {
    store.put(&key(i), value(i, version), Condition::None).unwrap();
}

fn delete(store: &Store, i: u32) {
    store.delete(&key(i), Condition::None).unwrap();
}

#[test]
fn writes_updates_and_deletes_during_the_copy_all_reach_the_new_owner() {
    for mode in [IndexMode::Hash, IndexMode::Sqlite] {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let create = shardlite_engine::CreateOptions { index: Some(mode), ..partitions(1) };
        let source = Store::create(a.path(), create, small_config()).unwrap();
        let target = Store::create(b.path(), create, small_config()).unwrap();
        (0..300).for_each(|i| put(&source, i, 1));
        (0..50).for_each(|i| put(&source, i, 2));
        (250..300).for_each(|i| delete(&source, i));

        source.begin_departure(0).unwrap();
        assert!(source.begin_departure(0).unwrap_err().to_string().contains("under way"), "one move at a time");
        // During the copy: updates, deletes, new keys, and a key deleted and written again.
        send(&source, &target, MovePart::Copy, || {
            (0..20).for_each(|i| put(&source, i, 3));
            (20..40).for_each(|i| delete(&source, i));
            (300..320).for_each(|i| put(&source, i, 1));
            delete(&source, 45);
            put(&source, 45, 9);
        });
        assert_ne!(records(&target), records(&source), "{mode}: the copy is of the moment before those writes");
        // Between the rounds, more of each.
        (0..5).for_each(|i| put(&source, i, 4));
        (300..305).for_each(|i| delete(&source, i));
        let changes = send(&source, &target, MovePart::Changes, || put(&source, 400, 1));
        // Each id once: 20 updated, 20 deleted, 20 new, key 45's old and new id.
        assert_eq!(changes, 20 + 20 + 20 + 2, "{mode}");
        let last = send(&source, &target, MovePart::Changes, || {});
        assert_eq!(last, 1, "{mode}: the write made during the first round comes in the next");

        assert_eq!(records(&target), records(&source), "{mode}");
        let moved = [0, 4, 10, 30, 45, 100, 260, 302, 310, 400];
        for i in moved {
            let (got, want) = (target.get(&key(i)).unwrap(), source.get(&key(i)).unwrap());
            assert_eq!(got, want, "{mode}: key {i}: the same value under the same tag");
        }
        assert_ne!(target.manifest().epoch, source.manifest().epoch);
        // Kept across a reopen of the new owner.
        drop(target);
        let target = Store::open(b.path(), small_config()).unwrap();
        for i in moved {
            assert_eq!(target.get(&key(i)).unwrap(), source.get(&key(i)).unwrap(), "{mode}: key {i} after a reopen");
        }
        let check = target.check().unwrap().remove(0);
        assert!(check.is_ok(), "{mode}: {check:?}");
        assert_eq!(check.records, records(&source).len() as u64);
        // The new owner goes on where the old one was: the next update counts on, the next
        // new record gets an id no record of the old owner had.
        let updated = target.put(&key(0), b"on".to_vec(), Condition::None).unwrap();
        assert_eq!(updated.version.counter, source.get(&key(0)).unwrap().unwrap().version.counter + 1);
        let highest = records(&source).iter().map(|r| r.1).max().unwrap();
        assert!(target.put(&key(500), b"new".to_vec(), Condition::None).unwrap().version.id > highest);

        // The old owner, given the partition away, takes nothing back in until it is emptied.
        let held = records(&source).len() as u64;
        source.leave_partition(0).unwrap();
        assert!(source.adopt(0, MovePart::Copy).unwrap_err().to_string().contains("given away"));
        assert_eq!(source.drop_partition(0).unwrap(), held);
        assert_eq!((records(&source), source.get(&key(0)).unwrap()), (Vec::new(), None));
        assert!(source.check().unwrap()[0].is_ok());
    }
}

/// A copy sent from a database file (what a failover restores from a replica) may lack states
/// its owner showed: its versions take a new epoch, neither the old owner's nor the new one's
/// directory's. And a kept epoch lasts only while its directory keeps its own: after a crash
/// that may have lost shown states (`synchronous = off` here) the partition takes the new one.
#[test]
fn a_restored_copy_gets_a_new_epoch_and_a_kept_one_ends_with_its_directorys() {
    let (a, b, c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let source = Store::create(a.path(), partitions(1), small_config()).unwrap();
    let target = Store::create(b.path(), partitions(1), small_config()).unwrap();
    (0..20).for_each(|i| put(&source, i, 1));
    let old = source.get(&key(3)).unwrap().unwrap().version;
    drop(source); // checkpointed into its database file
    let file = c.path().join("p0000.db");
    std::fs::copy(Layout::new(a.path()).db(0), &file).unwrap();
    let mut pieces = Vec::new();
    shardlite_engine::send_database(&file, 128, |piece| {
        pieces.push(piece);
        Ok(())
    })
    .unwrap();
    let mut adoption = target.adopt(0, MovePart::Copy).unwrap();
    pieces.iter().for_each(|piece| adoption.push(&target, piece).unwrap());
    adoption.finish(&target).unwrap();
    let restored = target.get(&key(3)).unwrap().unwrap().version;
    assert_eq!((restored.id, restored.counter), (old.id, old.counter));
    assert!(![old.epoch, target.manifest().epoch].contains(&restored.epoch), "{restored} against {old}");

    let crashed = c.path().join("crashed");
    common::crash_copy(b.path(), &crashed);
    drop(target);
    let reopened = Store::open(&crashed, small_config()).unwrap();
    let after = reopened.get(&key(3)).unwrap().unwrap().version;
    assert_eq!(after.epoch, reopened.manifest().epoch, "the directory's new epoch");
    assert_ne!(after.epoch, restored.epoch);
}

#[test]
fn changes_are_refused_without_a_copy_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), partitions(1), small_config()).unwrap();
    let err = store.send_partition(0, MovePart::Changes, 128, |_| Ok(())).unwrap_err();
    assert!(err.to_string().contains("its copy must be asked for first"), "{err}");
}
