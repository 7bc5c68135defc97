//! Replication through the commit log, on real stores: each flush of an owner's log goes to a
//! copy (here directly, in this process; between nodes the cluster's HTTP carries the same
//! frames, `crates/shardlite/tests/cluster/replicas.rs`), which makes it durable and applies what
//! the owner committed. The copy ends with the owner's records, ids and counters; a flush the
//! copies refuse is answered `Unreplicated`, rolled back, and applied by no one, not even by the
//! owner's replay after a crash; and a writer round whose records went out in two shipments,
//! one refused, answers each write as its own record's shipment went.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{
    atomic::{AtomicBool, Ordering},
    mpsc, Arc, Mutex,
};

use common::{crash_copy, key, partitions, small_config, value};
use shardlite_engine::{
    commitlog::{Replicate, Shipment},
    replication::{Frame, Receipt},
    Condition, Config, Error, Op, Store, Synchronous,
};

/// Ships each flush to `copies` from a thread of its own, in order, but to the copies made
/// deaf; with `refuse` set, the copies get it but the shipment is refused (as when too few
/// copies answered in time).
#[derive(Debug)]
struct Direct {
    shipments: Mutex<mpsc::Sender<Shipment>>,
    copies: Vec<(Arc<Store>, AtomicBool)>,
    refuse: AtomicBool,
    /// Each frame sent with the one before it again, merged (as after an answer that came too
    /// late): the copies hold part of it already.
    overlap: AtomicBool,
    /// The owner dies once it refused a flush: the copies hear nothing more of it (they are
    /// made deaf), not even that the flush was refused.
    dies_refusing: AtomicBool,
    /// The frames say the owner's log is committed no further than it was (as while its
    /// copies' answers are on their way): the copies hold what they get.
    holds_commit: AtomicBool,
    sent: Mutex<Sent>,
}

/// What the next frame says: the owner's commit point, the ranges refused so far, whether it
/// is the first, and the owner's epoch of each partition.
#[derive(Debug, Default)]
struct Sent {
    commit: u64,
    refused: Vec<(u64, u64)>,
    first: bool,
    epochs: Vec<(u32, u64)>,
    /// With `first`: the partitions the next frame says come from a snapshot.
    resync: Vec<u32>,
    /// The last frame's start and transactions.
    last: Option<(u64, Txs)>,
}

/// A frame's transactions: each one's position in the owner's log and its body.
type Txs = Vec<(u64, Vec<u8>)>;

/// A record as `(id, counter, key, value)`.
type Held = (u64, u64, Vec<u8>, Vec<u8>);

impl Direct {
    fn new(owner: &Store, copies: &[&Arc<Store>]) -> Arc<Self> {
        let (shipments, arriving) = mpsc::channel::<Shipment>();
        let epochs = (0..owner.manifest().partitions).map(|p| (p, owner.epoch_of(p).unwrap())).collect();
        let sent = Mutex::new(Sent { first: true, epochs, ..Sent::default() });
        let copies = copies.iter().map(|c| (Arc::clone(c), AtomicBool::new(false))).collect();
        let [refuse, overlap, dies_refusing, holds_commit] = std::array::from_fn(|_| AtomicBool::new(false));
        let shipments = Mutex::new(shipments);
        let direct = Arc::new(Self { shipments, copies, refuse, overlap, dies_refusing, holds_commit, sent });
        let shipping = Arc::downgrade(&direct);
        std::thread::spawn(move || {
            while let (Ok(shipment), Some(direct)) = (arriving.recv(), shipping.upgrade()) {
                direct.deliver(shipment);
            }
        });
        owner.replicate_with(Arc::clone(&direct) as Arc<dyn Replicate>).unwrap();
        direct
    }

    /// Sends every copy that is not deaf the frame; each must hold it.
    fn send(&self, from: u64, to: u64, txs: Txs) {
        let mut sent = self.sent.lock().unwrap();
        let (from, txs) = match sent.last.replace((from, txs.clone())) {
            Some((before, mut again)) if self.overlap.load(Ordering::SeqCst) && !sent.first => {
                again.extend(txs);
                (before, again)
            }
            _ => (from, txs),
        };
        let frame = Frame {
            from,
            to,
            commit: sent.commit,
            new_stream: sent.first,
            // Here a stream announces snapshots only for a copy that was behind: all of them.
            resync_all: sent.first && !sent.resync.is_empty(),
            resync: if sent.first { std::mem::take(&mut sent.resync) } else { Vec::new() },
            refused: sent.refused.clone(),
            epochs: sent.epochs.clone(),
            txs,
        };
        sent.first = false;
        for (copy, deaf) in &self.copies {
            if !deaf.load(Ordering::SeqCst) {
                assert_eq!(copy.receive("owner", frame.clone()).unwrap(), Receipt::Held { position: to });
            }
        }
    }

    /// An empty frame saying the owner's log is committed up to `at`: the copies apply the rest
    /// (sent twice: with `overlap` the first carries the last frame's transactions again, and a
    /// copy applies at once all it gathered only on a frame with none).
    fn settle(&self, at: u64) {
        self.sent.lock().unwrap().commit = at;
        self.send(at, at, Vec::new());
        self.send(at, at, Vec::new());
        for (copy, _) in &self.copies {
            copy.check().unwrap();
        }
    }

    fn deliver(&self, shipment: Shipment) {
        let txs = shipment.transactions().map(|raw| (raw.lsn, raw.body.to_vec())).collect();
        self.send(shipment.from, shipment.to, txs);
        let mut sent = self.sent.lock().unwrap();
        if !self.holds_commit.load(Ordering::SeqCst) {
            sent.commit = shipment.to;
        }
        if self.refuse.load(Ordering::SeqCst) {
            if self.dies_refusing.load(Ordering::SeqCst) {
                self.copies.iter().for_each(|(_, deaf)| deaf.store(true, Ordering::SeqCst));
            }
            sent.refused.push((shipment.from, shipment.to));
            drop(sent);
            shipment.done(Err("refused by the test".into()));
        } else {
            drop(sent);
            shipment.done(Ok(()));
        }
    }
}

impl Replicate for Direct {
    fn ship(&self, shipment: Shipment) {
        self.shipments.lock().unwrap().send(shipment).unwrap();
    }
}

/// An owner and a copy of 4 partitions each, in directories of their own, each flush of the
/// owner's shipped to the copy ([`Direct`]).
fn owner_and_copy() -> ((tempfile::TempDir, tempfile::TempDir), Store, Arc<Store>, Arc<Direct>) {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let owner = Store::create(dirs.0.path(), partitions(4), durable()).unwrap();
    let copy = Arc::new(Store::create(dirs.1.path(), partitions(4), durable()).unwrap());
    let direct = Direct::new(&owner, &[&copy]);
    (dirs, owner, copy, direct)
}

fn durable() -> Config {
    Config { synchronous: Synchronous::Full, ..small_config() }
}

/// Every record of every partition as `(id, counter, key, value)`, in id order.
fn records(store: &Store) -> Vec<Vec<Held>> {
    (0..store.manifest().partitions)
        .map(|p| {
            let mut out = Vec::new();
            store
                .snapshot(p, |r| {
                    out.push((r.version.id, r.version.counter, r.key.to_vec(), r.value.to_vec()));
                    Ok(())
                })
                .unwrap();
            out
        })
        .collect()
}

#[test]
fn a_copy_ends_with_the_owners_records_and_never_applies_a_refused_flush() {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let owner = Store::create(dirs.0.path(), partitions(4), durable()).unwrap();
    let copy = Arc::new(Store::create(dirs.1.path(), partitions(4), durable()).unwrap());
    let direct = Direct::new(&owner, &[&copy]);

    for i in 0..200 {
        owner.put(&key(i), value(i, 1), Condition::None).unwrap();
    }
    for i in (0..200).step_by(3) {
        owner.put(&key(i), value(i, 2), Condition::None).unwrap();
    }
    for i in (0..200).step_by(7) {
        owner.delete(&key(i), Condition::None).unwrap();
    }
    // A key written and deleted in one transaction, and one deleted and written again.
    let ops = vec![
        Op::Put { key: key(500), value: value(500, 1), condition: Condition::None },
        Op::Delete { key: key(500), condition: Condition::None },
        Op::Delete { key: key(1), condition: Condition::None },
        Op::Put { key: key(1), value: value(1, 9), condition: Condition::None },
    ];
    assert!(owner.batch(ops).unwrap().iter().all(Result::is_ok));
    let end = owner.put(&key(600), value(600, 1), Condition::None).unwrap();
    direct.settle(log_end(&owner));
    assert_same(&copy, &owner, "the copy holds the owner's records, ids and counters");
    assert_eq!(copy.get(&key(3)).unwrap().unwrap().value, value(3, 2), "the copy's index and cache follow");
    assert!(copy.check().unwrap().iter().all(|c| c.is_ok()), "{:?}", copy.check());

    direct.refuse.store(true, Ordering::SeqCst);
    let refused = owner.put(&key(600), value(600, 2), Condition::None);
    assert!(matches!(refused, Err(Error::Unreplicated(_))), "{refused:?}");
    assert_eq!(owner.get(&key(600)).unwrap().unwrap().version, end.version, "rolled back on the owner");
    direct.refuse.store(false, Ordering::SeqCst);
    let after = owner.put(&key(600), value(600, 3), Condition::None).unwrap();
    assert_eq!(after.version.counter, 2, "the refused write took nothing: not poisoned, the counter free");
    direct.settle(log_end(&owner));
    assert_same(&copy, &owner, "the copy never applied the refused write");

    // The owner's own replay after a crash skips the refused write too (it was cancelled).
    crash_copy(dirs.0.path(), &dirs.2.path().join("crashed"));
    let reopened = Store::open(dirs.2.path().join("crashed"), durable()).unwrap();
    assert_eq!(reopened.get(&key(600)).unwrap().unwrap().value, value(600, 3));
    assert_same(&reopened, &owner, "the owner's replay");
}

#[test]
fn a_frame_sent_again_with_what_followed_is_taken_from_where_the_copy_stands() {
    let (_dirs, owner, copy, direct) = owner_and_copy();
    owner.put(&key(0), value(0, 1), Condition::None).unwrap();
    direct.overlap.store(true, Ordering::SeqCst);
    // Each frame holds the previous one's transactions again: the copy takes each once.
    for i in 0..100 {
        owner.put(&key(i % 40), value(i, 2), Condition::None).unwrap();
    }
    direct.settle(log_end(&owner));
    assert_same(&copy, &owner, "every transaction taken once, in order");
}

/// Answers each shipment from a task on the runtime it was made on, 200 ms later: as the cluster's
/// replicator does, whose answers come through the server's runtime.
#[derive(Debug)]
struct OnRuntime(tokio::sync::mpsc::UnboundedSender<Shipment>);

impl Replicate for OnRuntime {
    fn ship(&self, shipment: Shipment) {
        let _ = self.0.send(shipment);
    }
}

#[test]
fn a_write_its_caller_abandons_ends_without_holding_up_the_runtime_its_copies_answer_through() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::create(dir.path(), partitions(4), durable()).unwrap());
    let (done, finished) = mpsc::channel();
    let on_runtime = Arc::clone(&store);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let (ship, mut shipments) = tokio::sync::mpsc::unbounded_channel::<Shipment>();
            on_runtime.replicate_with(Arc::new(OnRuntime(ship))).unwrap();
            tokio::spawn(async move {
                while let Some(shipment) = shipments.recv().await {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    shipment.done(Ok(()));
                }
            });
            // An inline write, abandoned while it waits for its copies (an HTTP client gone).
            let put = |v| Op::Put { key: key(1), value: value(1, v), condition: Condition::None };
            let abandoned = tokio::time::timeout(std::time::Duration::from_millis(50), on_runtime.write(put(1)));
            assert!(abandoned.await.is_err(), "the copies answer after 200 ms");
            let next = on_runtime.write(put(2)).await.unwrap();
            done.send(next).unwrap();
        });
    });
    let next = finished.recv_timeout(std::time::Duration::from_secs(20)).expect("the runtime went on");
    assert!(matches!(next, shardlite_engine::Outcome::Written(_)), "{next:?}");
    assert_eq!(store.get(&key(1)).unwrap().unwrap().value, value(1, 2));
}

/// Fails naming the first record where `a` and `b` differ, partition by partition.
fn assert_same(a: &Store, b: &Store, what: &str) {
    for (p, (a, b)) in records(a).iter().zip(records(b)).enumerate() {
        let differs = a.iter().zip(&b).position(|(x, y)| x != y);
        let first = differs.map(|at| (at, &a[at], &b[at]));
        assert!(
            a.len() == b.len() && first.is_none(),
            "{what}: partition {p}: {} vs {} records; first difference {first:?}",
            a.len(),
            b.len()
        );
    }
}

/// Where the owner's log ends now (a write's flush just ended there).
fn log_end(store: &Store) -> u64 {
    store.log_position().unwrap()
}

/// The owner dies with one copy (`b`) a few flushes behind the other (`a`): sealed, `a` is the
/// more advanced, becomes the owner of every partition with the owner's records, ids, counters
/// and tags, and `b` takes what it lacks from `a`'s tail: both end with the owner's records.
#[test]
fn a_failover_promotes_the_most_advanced_copy_and_brings_the_other_up_to_it() {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let owner = Store::create(dirs.0.path(), partitions(4), durable()).unwrap();
    let a = Arc::new(Store::create(dirs.1.path(), partitions(4), durable()).unwrap());
    let b = Arc::new(Store::create(dirs.2.path(), partitions(4), durable()).unwrap());
    let direct = Direct::new(&owner, &[&a, &b]);
    for i in 0..100 {
        owner.put(&key(i), value(i, 1), Condition::None).unwrap();
    }
    direct.copies[1].1.store(true, Ordering::SeqCst);
    for i in (0..100).step_by(5) {
        owner.put(&key(i), value(i, 2), Condition::None).unwrap();
        owner.delete(&key(i + 1), Condition::None).unwrap();
        owner.put(&key(1000 + i), value(1000 + i, 1), Condition::None).unwrap();
    }

    // The owner is dead: nothing more reaches the copies. Sealed, they take no frame of its.
    let (at_a, at_b) = (a.seal("owner").position.unwrap(), b.seal("owner").position.unwrap());
    assert!(at_a > at_b, "b missed the last flushes");
    let late = Frame { from: at_a, to: at_a, ..Frame::default() };
    assert_eq!(a.receive("owner", late).unwrap(), Receipt::Behind { position: Some(at_a) });
    for p in 0..4 {
        let records = a.promote("owner", p).unwrap();
        assert_eq!(records, owner.stats().partitions[p as usize].records, "partition {p}");
        b.catch_up("owner", p, a.tail("owner", p, at_b).unwrap()).unwrap();
    }
    assert_same(&a, &owner, "the promoted copy");
    assert_same(&b, &owner, "the copy brought up to date");
    for i in (0..100).chain(1000..1100) {
        let (before, after) = (owner.get(&key(i)).unwrap(), a.get(&key(i)).unwrap());
        assert_eq!(before.map(|r| r.version), after.map(|r| r.version), "key {i}: the owner's tag stays valid");
    }
    assert!(a.check().unwrap().iter().chain(&b.check().unwrap()).all(|c| c.is_ok()));
    let next = a.put(&key(0), value(0, 3), Condition::None).unwrap();
    assert_eq!(next.version.counter, 3, "the new owner goes on from the owner's counter");
    assert!(a.tail("owner", 0, at_a + 1).is_err(), "a tail past what the copy holds is refused");
    assert!(a.tail("elsewhere", 0, 0).is_err(), "nothing held of another node's log");
}

/// A copy deaf to 60 writes is behind: the owner starts a new stream announcing a snapshot of
/// every partition, writes go on, each partition's snapshot is taken in (with writes between
/// them), and the copy ends with the owner's records: what it held of the new stream before a
/// snapshot arrived is applied after it, none twice.
#[test]
fn a_copy_that_was_behind_is_brought_up_to_date_from_snapshots_while_writes_go_on() {
    let (_dirs, owner, copy, direct) = owner_and_copy();
    for i in 0..100 {
        owner.put(&key(i), value(i, 1), Condition::None).unwrap();
    }
    direct.copies[0].1.store(true, Ordering::SeqCst);
    for i in 0..60 {
        owner.put(&key(i), value(i, 2), Condition::None).unwrap();
        owner.delete(&key(99 - i), Condition::None).unwrap();
    }
    // A new stream from the next flush on, every partition's copy to come from a snapshot.
    {
        let mut sent = direct.sent.lock().unwrap();
        (sent.first, sent.resync) = (true, (0..4).collect());
    }
    direct.copies[0].1.store(false, Ordering::SeqCst);
    owner.put(&key(500), value(500, 1), Condition::None).unwrap();
    for p in 0..4 {
        let position = owner.copy_position().unwrap();
        let stream = snapshot(&owner, p);
        // Writes after the snapshot reach the copy before the snapshot does.
        owner.put(&key(600 + p), value(600 + p, 1), Condition::None).unwrap();
        owner.put(&key(p), value(p, 3), Condition::None).unwrap();
        take_snapshot(&copy, "owner", p, &stream, position);
    }
    direct.settle(log_end(&owner));
    assert_same(&copy, &owner, "the copy brought up from snapshots");
    assert!(copy.check().unwrap().iter().all(|c| c.is_ok()));
    for i in (0..100).chain(500..501).chain(600..604) {
        let (a, b) = (owner.get(&key(i)).unwrap(), copy.get(&key(i)).unwrap());
        assert_eq!(a.map(|r| r.version), b.map(|r| r.version), "key {i}: the snapshot keeps the owner's epoch");
    }
}

/// Positions in a store's log are never used twice: reopened after a clean close or a crash,
/// its log goes on from where it ended (a copy takes a frame's position as the owner's).
#[test]
fn a_reopened_log_goes_on_from_where_it_ended() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), partitions(4), durable()).unwrap();
    for i in 0..50 {
        store.put(&key(i), value(i, 1), Condition::None).unwrap();
    }
    let ended = log_end(&store);
    store.close();
    let store = Store::open(dir.path(), durable()).unwrap();
    assert!(log_end(&store) >= ended, "after a clean close: {} < {ended}", log_end(&store));
    store.put(&key(99), value(99, 1), Condition::None).unwrap();
    let ended = log_end(&store);
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), &crashed.path().join("copy"));
    let store = Store::open(crashed.path().join("copy"), durable()).unwrap();
    assert!(log_end(&store) >= ended, "after a crash: {} < {ended}", log_end(&store));
}

/// A copy takes a new stream only where it follows what the copy holds of the owner's log: a
/// stream from further on (the owner restarted while frames for the copy were lost) finds it
/// behind, unless the stream brings every partition's copy from a snapshot. The first frame of
/// a stream sent again with what followed (its answer lost) goes on with the stream.
#[test]
fn a_new_stream_that_skips_part_of_the_owners_log_finds_the_copy_behind() {
    let dir = tempfile::tempdir().unwrap();
    let copy = Store::create(dir.path(), partitions(4), durable()).unwrap();
    let new = |from: u64, to: u64| Frame { from, to, commit: from, new_stream: true, ..Frame::default() };
    let held = |position: u64| Receipt::Held { position };
    assert_eq!(copy.receive("owner", new(0, 100)).unwrap(), held(100));
    assert_eq!(copy.receive("owner", new(0, 150)).unwrap(), held(150), "the first frame again, and more");
    let next = Frame { from: 150, to: 200, commit: 150, ..Frame::default() };
    assert_eq!(copy.receive("owner", next).unwrap(), held(200));
    assert_eq!(copy.receive("owner", new(300, 350)).unwrap(), Receipt::Behind { position: Some(200) });
    assert_eq!(copy.receive("owner", new(200, 250)).unwrap(), held(250), "a new stream where the copy stands");
    let whole = Frame { resync_all: true, resync: (0..4).collect(), ..new(400, 420) };
    assert_eq!(copy.receive("owner", whole).unwrap(), held(420), "every copy from a snapshot");
}

/// A copy closed cleanly knows after its restart where it stood in each owner's log whose
/// transactions it had all applied, and goes on with that owner's stream; of an owner whose
/// snapshot it awaited, or after a crash, it knows nothing, and any stream finds it behind. A
/// directory new when it first opened follows the log of an owner it never took a frame from
/// from its beginning, until it crashes.
#[test]
fn a_copy_closed_cleanly_goes_on_with_its_owners_streams_and_one_that_crashed_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let copy = Store::create(dir.path(), partitions(4), durable()).unwrap();
    let new = |from: u64, to: u64| Frame { from, to, commit: from, new_stream: true, ..Frame::default() };
    let next = |from: u64, to: u64| Frame { from, to, commit: from, ..Frame::default() };
    let held = |position: u64| Receipt::Held { position };
    assert_eq!(copy.receive("owner", new(0, 100)).unwrap(), held(100), "a new directory follows a log from 0");
    assert_eq!(copy.receive("other", new(0, 10)).unwrap(), held(10));
    let announced = Frame { resync: vec![1], ..new(10, 20) };
    assert_eq!(copy.receive("other", announced).unwrap(), held(20));
    copy.close();
    drop(copy);

    let copy = Store::open(dir.path(), durable()).unwrap();
    let crashed = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), &crashed.path().join("copy"));
    assert_eq!(copy.receive("owner", next(100, 120)).unwrap(), held(120), "it goes on where it stood");
    assert_eq!(
        copy.receive("other", next(20, 30)).unwrap(),
        Receipt::Behind { position: None },
        "it awaited a snapshot"
    );
    assert_eq!(copy.receive("third", new(0, 5)).unwrap(), held(5), "a new owner's log from 0");
    let crashed = Store::open(crashed.path().join("copy"), durable()).unwrap();
    assert_eq!(crashed.receive("owner", new(120, 130)).unwrap(), Receipt::Behind { position: None }, "after a crash");
}

/// An owner that refused a flush its copy holds, and died before any later frame told the copy,
/// restarts: its log goes on past the cancels of the refused writes, which the copy never got,
/// so its new stream finds the copy behind and every partition's copy comes from a snapshot.
/// The copy never applies the refused write, not even once the owner's commit passes it.
#[test]
fn an_owner_that_died_before_telling_its_copy_of_a_refusal_finds_the_copy_behind() {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let owner = Store::create(dirs.0.path(), partitions(4), durable()).unwrap();
    let copy = Arc::new(Store::create(dirs.1.path(), partitions(4), durable()).unwrap());
    let direct = Direct::new(&owner, &[&copy]);
    owner.put(&key(1), value(1, 1), Condition::None).unwrap();
    let held = log_end(&owner);
    direct.dies_refusing.store(true, Ordering::SeqCst);
    direct.refuse.store(true, Ordering::SeqCst);
    let refused = owner.put(&key(1), value(1, 2), Condition::None);
    assert!(matches!(refused, Err(Error::Unreplicated(_))), "{refused:?}");
    // Where the copy stands in the owner's log (sealing says; unsealed at once).
    let holds = copy.seal("owner").position;
    assert!(holds > Some(held), "the copy holds the refused write: {holds:?}");
    copy.unseal("owner");

    crash_copy(dirs.0.path(), &dirs.2.path().join("restarted"));
    let restarted = Store::open(dirs.2.path().join("restarted"), durable()).unwrap();
    let start = log_end(&restarted);
    assert!(Some(start) > holds, "the restarted log goes on past the cancels");
    let new = Frame { from: start, to: start, commit: start, new_stream: true, ..Frame::default() };
    assert_eq!(copy.receive("owner", new.clone()).unwrap(), Receipt::Behind { position: holds });
    let whole = Frame { resync_all: true, resync: (0..4).collect(), ..new };
    assert_eq!(copy.receive("owner", whole).unwrap(), Receipt::Held { position: start });
    let held = copy.get(&key(1)).unwrap().map(|r| r.value);
    assert_ne!(held, Some(value(1, 2)), "the copy never applied the refused write");
}

/// A copy closed while it holds writes its owner has not committed yet (under load, usually)
/// keeps them across the restart, held as before: its owner's stream goes on with it, and once
/// the owner's commit passes them it applies them, but one the owner refused meanwhile.
#[test]
fn a_copy_closed_holding_uncommitted_writes_goes_on_with_its_owners_stream() {
    let (dirs, owner, copy, direct) = owner_and_copy();
    for i in 0..20 {
        owner.put(&key(i), value(i, 1), Condition::None).unwrap();
    }
    direct.holds_commit.store(true, Ordering::SeqCst);
    owner.put(&key(20), value(20, 1), Condition::None).unwrap();
    owner.put(&key(21), value(21, 1), Condition::None).unwrap();
    direct.refuse.store(true, Ordering::SeqCst);
    direct.dies_refusing.store(true, Ordering::SeqCst);
    let refused = owner.put(&key(3), value(3, 2), Condition::None);
    assert!(matches!(refused, Err(Error::Unreplicated(_))), "{refused:?}");
    let (holds, refused_ranges) = (copy.seal("owner").position.unwrap(), direct.sent.lock().unwrap().refused.clone());
    copy.unseal("owner");
    assert!(copy.get(&key(20)).unwrap().is_none(), "held, not applied");
    copy.close();
    drop((direct, copy));
    let restarted_too = tempfile::tempdir().unwrap();
    crash_copy(dirs.1.path(), &restarted_too.path().join("copy"));

    let copy = Store::open(dirs.1.path(), durable()).unwrap();
    assert!(copy.get(&key(21)).unwrap().is_none(), "held again after the restart, not applied");
    let end = log_end(&owner);
    let next = Frame { from: holds, to: end, commit: end, refused: refused_ranges, ..Frame::default() };
    assert_eq!(copy.receive("owner", next.clone()).unwrap(), Receipt::Held { position: end }, "no snapshot needed");
    // The owner, idle, says where its commit stands: the copy applies what it gathered.
    assert_eq!(copy.receive("owner", Frame { from: end, ..next }).unwrap(), Receipt::Held { position: end });
    // After the writers' queues: the check runs after what the frame applied.
    assert!(copy.check().unwrap().iter().all(|c| c.is_ok()));
    assert_same(&copy, &owner, "the held writes applied, the refused one not");

    // Had the owner restarted too, its new stream would not be followed, even from where the
    // copy stands: what it held belongs to the owner's earlier stream, and is dropped once every
    // partition comes from a snapshot.
    let copy = Store::open(restarted_too.path().join("copy"), durable()).unwrap();
    let new = Frame { from: holds, to: end, commit: end, new_stream: true, ..Frame::default() };
    assert_eq!(copy.receive("owner", new.clone()).unwrap(), Receipt::Behind { position: Some(holds) });
    let whole = Frame { resync_all: true, resync: (0..4).collect(), ..new };
    assert_eq!(copy.receive("owner", whole).unwrap(), Receipt::Held { position: end });
    copy.check().unwrap();
    assert!(copy.get(&key(20)).unwrap().is_none(), "dropped, not applied: its snapshot brings it");
}

/// A copy gathers a partition's committed transactions while frames keep coming, those with
/// none of its transactions too (the owner's log moved with what the copy does not keep: other
/// nodes' copies, kept by the owner), and applies them together once a frame says the owner is
/// idle.
#[test]
fn a_copy_gathers_committed_transactions_until_the_owner_is_idle() {
    let (_dirs, owner, copy, direct) = owner_and_copy();
    let started = std::time::Instant::now();
    for i in 0..8 {
        owner.put(&key(0), value(i, 1), Condition::None).unwrap();
    }
    let (end, epochs) = (log_end(&owner), direct.sent.lock().unwrap().epochs.clone());
    let moved = Frame { from: end, to: end + 100, commit: end, epochs, ..Frame::default() };
    assert_eq!(copy.receive("owner", moved).unwrap(), Receipt::Held { position: end + 100 });
    copy.check().unwrap();
    // Each frame committed the one before it; unless this machine took the gathering's whole
    // wait over these writes, they wait on the copy.
    if started.elapsed() < std::time::Duration::from_millis(200) {
        assert_ne!(copy.get(&key(0)).unwrap().map(|r| r.value), Some(value(7, 1)), "gathered, not applied yet");
    }
    direct.settle(end + 100);
    assert_same(&copy, &owner, "applied together once the owner is idle");
}

/// The owner, alive, hands a partition over to a copy: once the copy holds its log through the
/// handover's point and was told it is committed that far, the copy applies everything of the
/// partition it gathered, keeps the owner's epoch (its tags stay valid) and goes on from the
/// owner's counters; a copy that was not told, or holds less, refuses and changes nothing.
#[test]
fn an_owner_hands_a_partition_over_to_a_copy_holding_its_log_through_the_handover() {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let owner = Store::create(dirs.0.path(), partitions(4), durable()).unwrap();
    let a = Arc::new(Store::create(dirs.1.path(), partitions(4), durable()).unwrap());
    let b = Arc::new(Store::create(dirs.2.path(), partitions(4), durable()).unwrap());
    let direct = Direct::new(&owner, &[&a, &b]);
    let p = owner.partition_of(&key(0));
    let other = (1..).find(|&i| owner.partition_of(&key(i)) != p).unwrap();
    owner.put(&key(other), value(other, 1), Condition::None).unwrap();
    direct.copies[1].1.store(true, Ordering::SeqCst);
    for round in 1..=5 {
        owner.put(&key(0), value(0, round), Condition::None).unwrap();
    }
    let through = log_end(&owner);
    let refused = a.hand_over("owner", p, through, Some(owner.epoch_of(p).unwrap()));
    assert!(refused.is_err(), "not yet told the owner's log is committed through the handover");

    // A write of another partition: its frame says the log is committed through `through`.
    owner.put(&key(other), value(other, 2), Condition::None).unwrap();
    assert!(b.hand_over("owner", p, through, None).is_err(), "b missed the last frames");
    let records = a.hand_over("owner", p, through, Some(owner.epoch_of(p).unwrap())).unwrap();
    assert_eq!(records, owner.stats().partitions[p as usize].records);
    let (before, after) = (owner.get(&key(0)).unwrap().unwrap(), a.get(&key(0)).unwrap().unwrap());
    assert_eq!((before.version, before.value), (after.version, after.value), "the owner's tag stays valid");
    let next = a.put(&key(0), value(0, 6), Condition::None).unwrap();
    assert_eq!(next.version.counter, 6, "the new owner goes on from the owner's counter");
    assert!(a.check().unwrap().iter().all(|c| c.is_ok()));
}

#[test]
fn each_write_is_answered_as_the_shipment_of_its_own_record_went() {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // Two writer threads over 16 partitions: one's flush may take part of the other's round,
    // so a round's records can go out in two shipments, one refused and the next taken.
    let owner = Arc::new(Store::create(dirs.0.path(), partitions(16), durable()).unwrap());
    let copy = Arc::new(Store::create(dirs.1.path(), partitions(16), durable()).unwrap());
    let direct = Direct::new(&owner, &[&copy]);
    let stop = Arc::new(AtomicBool::new(false));
    let toggler = {
        let (direct, stop) = (Arc::clone(&direct), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                direct.refuse.fetch_xor(true, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
        })
    };
    let writers: Vec<_> = (0..4u32)
        .map(|t| {
            let owner = Arc::clone(&owner);
            std::thread::spawn(move || {
                (t * 10_000..t * 10_000 + 400)
                    .map(|i| (i, owner.put(&key(i), value(i, 1), Condition::Absent)))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let answers: Vec<_> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    stop.store(true, Ordering::SeqCst);
    toggler.join().unwrap();
    direct.refuse.store(false, Ordering::SeqCst);
    direct.settle(log_end(&owner));
    let (mut taken, mut refused) = (0, 0);
    for (i, answer) in &answers {
        let (on_owner, on_copy) = (owner.get(&key(*i)).unwrap(), copy.get(&key(*i)).unwrap());
        match answer {
            Ok(_) => {
                taken += 1;
                assert!(
                    on_owner.is_some() && on_copy.is_some(),
                    "key {i} answered written: owner {on_owner:?}, copy {on_copy:?}"
                );
            }
            Err(Error::Unreplicated(_)) => {
                refused += 1;
                assert!(
                    on_owner.is_none() && on_copy.is_none(),
                    "key {i} answered refused: owner {on_owner:?}, copy {on_copy:?}"
                );
            }
            Err(err) => panic!("key {i}: {err}"),
        }
    }
    assert!(taken > 0 && refused > 0, "{taken} writes taken, {refused} refused: the shipments did not alternate");
    assert_same(&copy, &owner, "the copy holds what the owner answered written");
}

/// Announces in a new stream from `owner` that `partition`'s copy comes from a snapshot next.
fn announce(copy: &Store, owner: &str, partition: u32) {
    let at = Frame { new_stream: true, resync: vec![partition], ..Frame::default() };
    assert_eq!(copy.receive(owner, at).unwrap(), Receipt::Held { position: 0 });
}

/// `from`'s snapshot of `partition` now, as the pieces its transfer stream sends.
fn snapshot(from: &Store, partition: u32) -> Vec<Vec<u8>> {
    let mut stream = Vec::new();
    from.send_copy(partition, 1 << 16, |piece| {
        stream.push(piece);
        Ok(())
    })
    .unwrap();
    stream
}

/// Takes `stream` in as `owner`'s snapshot of `partition`, which holds its log before
/// `position`.
fn take_snapshot(copy: &Store, owner: &str, partition: u32, stream: &[Vec<u8>], position: u64) {
    let mut adoption = copy.adopt(partition, shardlite_engine::MovePart::Copy).unwrap();
    for piece in stream {
        adoption.push(copy, piece).unwrap();
    }
    adoption.finish(copy).unwrap();
    copy.resynced(owner, partition, position).unwrap();
}

/// An owner announced a snapshot of a partition and gave the partition away before it sent it
/// (it sends none then): the next owner's snapshot, announced later, supersedes it, so the
/// first owner's transactions of the partition are no longer held back (a handover from it
/// counts this copy again). A snapshot announced before an owner's own announcement leaves
/// that one awaited.
#[test]
fn a_snapshot_from_a_later_owner_supersedes_one_announced_before_by_another() {
    let (_dirs, owner, copy, direct) = owner_and_copy();
    let p = owner.partition_of(&key(0));
    let q_key = (1..).find(|&i| owner.partition_of(&key(i)) != p).unwrap();
    let q = owner.partition_of(&key(q_key));
    owner.put(&key(0), value(0, 1), Condition::None).unwrap();
    let new_stream = |partition| {
        let mut sent = direct.sent.lock().unwrap();
        (sent.first, sent.resync) = (true, vec![partition]);
    };
    new_stream(p);
    owner.put(&key(0), value(0, 2), Condition::None).unwrap();
    direct.settle(log_end(&owner));
    let through = log_end(&owner);
    assert!(copy.hand_over("owner", p, through, None).is_err(), "p's snapshot is awaited from the owner");

    // p's next owner, `next`, announces its snapshot and sends it.
    announce(&copy, "next", p);
    take_snapshot(&copy, "next", p, &snapshot(&owner, p), 0);
    copy.hand_over("owner", p, through, None).expect("the owner's announcement of p is superseded");
    assert_eq!(records(&copy)[p as usize], records(&owner)[p as usize]);

    // `next` announces q, then the owner does: `next`'s snapshot leaves the owner's awaited.
    announce(&copy, "next", q);
    new_stream(q);
    owner.put(&key(q_key), value(q_key, 1), Condition::None).unwrap();
    take_snapshot(&copy, "next", q, &snapshot(&owner, q), 0);
    direct.settle(log_end(&owner));
    let refused = copy.hand_over("owner", q, log_end(&owner), None);
    assert!(refused.is_err(), "the owner's later announcement of q still waits for its snapshot");
}
