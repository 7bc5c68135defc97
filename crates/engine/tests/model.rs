//! Model-based property test: random sequences of operations against a real store, checked
//! step by step against a model, with forced index merges, background merges (a tiny merge
//! threshold), clean reopens, reopens after a session that did not close (its marker left, as
//! a crash leaves it: a copy of the live directory), and narrow fingerprints that make
//! collisions common.
//!
//! The model keeps each key's current record and every version the store ever gave it. It
//! checks that every successful write answers a version never seen before for its key, that a
//! read answers exactly the version of the last write, and that a condition naming any other
//! version — one of an earlier life of the key, of an earlier epoch, or none the store ever
//! issued — fails. A reopen after a crash keeps every version under `synchronous = full`
//! (nothing was shown before it was durable); with `off` it starts a new epoch. Its condition
//! oracle is its own, not the engine's `Condition::check`.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::conditions::{cond, holds, resolve, Cond, Item, KeyModel};
use proptest::{prelude::*, strategy::ValueTree, test_runner::TestRunner};
use shardlite_engine::{Condition, Config, CreateOptions, Error, IndexMode, Op, Outcome, Store, Synchronous};

type Model = BTreeMap<u32, KeyModel>;

#[derive(Debug, Clone)]
enum Step {
    One(Item<u32>),
    Batch(Vec<(u32, Option<Vec<u8>>, Cond)>),
    Merge,
    Reopen,
    /// Copy the directory while the store is open (what a crash leaves), reopen the copy.
    ReopenUnclean,
}

/// Steps over `keys` keys; `reopen` is the weight of each kind of reopen (of about 20).
fn step(keys: u32, reopen: u32) -> impl Strategy<Value = Step> {
    let k = 0..keys;
    let v = proptest::collection::vec(any::<u8>(), 0..40);
    prop_oneof![
        8 => (k.clone(), v.clone(), cond(3, 2, 4)).prop_map(|(k, v, c)| Step::One(Item::Put(k, v, c))),
        3 => (k.clone(), cond(3, 2, 4)).prop_map(|(k, c)| Step::One(Item::Delete(k, c))),
        4 => k.clone().prop_map(|k| Step::One(Item::Get(k))),
        2 => proptest::collection::vec((k, proptest::option::of(v), cond(3, 2, 4)), 1..12).prop_map(Step::Batch),
        1 => Just(Step::Merge),
        reopen => Just(Step::Reopen),
        reopen => Just(Step::ReopenUnclean),
    ]
}

/// Checks the store's answer to a put against the model, and applies it.
fn check_put(key: &mut KeyModel, v: &[u8], c: Condition, got: Result<Outcome, Error>, what: &str) {
    let current = key.current.as_ref().map(|(v, _)| *v);
    if !holds(c, current) {
        assert_eq!(got, Err(Error::ConditionFailed { current }), "{what}");
        return;
    }
    let Ok(Outcome::Written(w)) = got else { panic!("{what}: expected a write, got {got:?}") };
    assert!(!key.seen.contains(&w.version), "{what}: version {} was given to this key before", w.version);
    assert_eq!(w.created, current.is_none(), "{what}");
    match current {
        Some(old) => assert_eq!((w.version.id, w.version.counter), (old.id, old.counter + 1), "{what}"),
        None => assert_eq!(w.version.counter, 1, "{what}"),
    }
    key.seen.push(w.version);
    key.current = Some((w.version, v.to_vec()));
}

/// Checks the store's answer to a delete against the model, and applies it.
fn check_delete(key: &mut KeyModel, c: Condition, got: Result<Outcome, Error>, what: &str) {
    let current = key.current.as_ref().map(|(v, _)| *v);
    let expected = match current {
        _ if !holds(c, current) => Err(Error::ConditionFailed { current }),
        None => Err(Error::NotFound),
        Some(version) => Ok(Outcome::Deleted { version }),
    };
    assert_eq!(got, expected, "{what}");
    if got.is_ok() {
        key.current = None;
    }
}

fn run(steps: Vec<Step>, create: CreateOptions, config: Config, keys: u32) {
    let root = tempfile::tempdir().unwrap();
    let mut dir = root.path().join("live");
    let mut store = Some(Store::create(&dir, create, config.clone()).unwrap());
    let mut epoch = store.as_ref().unwrap().manifest().epoch;
    let mut model: Model = (0..keys).map(|k| (k, KeyModel::default())).collect();
    let key = common::key;
    for (n, step) in steps.into_iter().enumerate() {
        let s = store.as_ref().unwrap();
        match step {
            Step::One(Item::Put(k, v, c)) => {
                let c = resolve(c, &model[&k]);
                let got = s.put(&key(k), v.clone(), c).map(Outcome::Written);
                check_put(model.get_mut(&k).unwrap(), &v, c, got, &format!("step {n}: put {k} {c:?}"));
            }
            Step::One(Item::Delete(k, c)) => {
                let c = resolve(c, &model[&k]);
                let got = s.delete(&key(k), c).map(|version| Outcome::Deleted { version });
                check_delete(model.get_mut(&k).unwrap(), c, got, &format!("step {n}: delete {k} {c:?}"));
            }
            Step::One(Item::Get(k)) => {
                let got = s.get(&key(k)).unwrap().map(|r| (r.version, r.value));
                assert_eq!(got, model[&k].current, "step {n}: get {k}");
            }
            Step::Batch(items) => {
                // Conditions are resolved against the model before the batch, as a client
                // holding those tags would send them.
                let conditions: Vec<Condition> = items.iter().map(|(k, _, c)| resolve(*c, &model[k])).collect();
                let ops = items
                    .iter()
                    .zip(&conditions)
                    .map(|((k, v, _), &condition)| match v {
                        Some(v) => Op::Put { key: key(*k), value: v.clone(), condition },
                        None => Op::Delete { key: key(*k), condition },
                    })
                    .collect();
                let got = s.batch(ops).unwrap();
                for (i, (((k, v, _), c), got)) in items.iter().zip(conditions).zip(got).enumerate() {
                    let what = format!("step {n}: batch item {i}: key {k} {c:?}");
                    match v {
                        Some(v) => check_put(model.get_mut(k).unwrap(), v, c, got, &what),
                        None => check_delete(model.get_mut(k).unwrap(), c, got, &what),
                    }
                }
            }
            Step::Merge => s.merge_indexes().unwrap(),
            Step::Reopen | Step::ReopenUnclean => {
                let unclean = matches!(step, Step::ReopenUnclean);
                if unclean {
                    let copy = root.path().join(format!("crash-{n}"));
                    common::crash_copy(&dir, &copy);
                    dir = copy;
                }
                drop(store.take());
                let s = Store::open(&dir, config.clone()).unwrap();
                let now = s.manifest().epoch;
                if unclean && config.synchronous != Synchronous::Full {
                    assert!(now > epoch, "step {n}: a crash after `off` must start a new epoch ({epoch} -> {now})");
                    for key in model.values_mut() {
                        if let Some((version, _)) = &mut key.current {
                            version.epoch = now;
                            key.seen.push(*version);
                        }
                    }
                } else {
                    // Every key's tag stays valid: the reads that follow compare whole versions.
                    assert_eq!(now, epoch, "step {n}: a clean reopen, or a crash under `full`, keeps the epoch");
                }
                epoch = now;
                store = Some(s);
            }
        }
    }
    let s = store.unwrap();
    for (k, m) in &model {
        assert_eq!(s.get(&key(*k)).unwrap().map(|r| (r.version, r.value)), m.current, "final get {k}");
    }
    let checks = s.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
    let live = model.values().filter(|m| m.current.is_some()).count() as u64;
    assert_eq!(checks.iter().map(|c| c.records).sum::<u64>(), live);
}

fn directory(index: IndexMode, fingerprint_bits: u8) -> CreateOptions {
    CreateOptions { partitions: Some(3), fingerprint_bits: Some(fingerprint_bits), ..common::small_dir(index) }
}

fn config() -> Config {
    Config { merge_threshold: 6, ..common::small_config() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn hash_index_matches_the_model(steps in proptest::collection::vec(step(40, 1), 1..80)) {
        run(steps, directory(IndexMode::Hash, 32), config(), 40);
    }

    #[test]
    fn colliding_fingerprints_still_give_exact_answers(steps in proptest::collection::vec(step(40, 1), 1..80)) {
        // Two-bit fingerprints: every key collides with about a quarter of the others.
        run(steps, directory(IndexMode::Hash, 2), config(), 40);
    }

    #[test]
    fn sqlite_index_matches_the_model(steps in proptest::collection::vec(step(40, 1), 1..60)) {
        run(steps, directory(IndexMode::Sqlite, 32), config(), 40);
    }
}

proptest! {
    // Each write waits for a flush of the commit log, each crash's reopen syncs the file system.
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn crashes_under_full_sync_keep_every_version(steps in proptest::collection::vec(step(40, 3), 1..50)) {
        run(steps, directory(IndexMode::Hash, 32), Config { synchronous: Synchronous::Full, ..config() }, 40);
    }
}

/// One long deterministic sequence on 16 keys, with reopens of both kinds now and then: no
/// version is ever given twice to a key. `SHARDLITE_MODEL_OPS` sets its length (the default
/// keeps `cargo test` fast; docs/benchmarks.md, "Versions never repeat", has a run of a million).
#[test]
fn versions_never_repeat_over_a_long_run() {
    let ops: usize = std::env::var("SHARDLITE_MODEL_OPS").ok().and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let mut runner = TestRunner::deterministic();
    // About one reopen of each kind per 2,000 steps.
    let steps = proptest::collection::vec(step(16, 0), ops).new_tree(&mut runner).unwrap().current();
    let steps = steps
        .into_iter()
        .enumerate()
        .map(|(i, s)| match i % 2_000 {
            999 => Step::Reopen,
            1_999 => Step::ReopenUnclean,
            _ => s,
        })
        .collect();
    let start = std::time::Instant::now();
    run(steps, directory(IndexMode::Hash, 32), Config { merge_threshold: 64, ..config() }, 16);
    eprintln!("{ops} operations on 16 keys in {:.1} s, no version repeated", start.elapsed().as_secs_f64());
}
