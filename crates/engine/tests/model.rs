//! Model-based property test: random sequences of operations against a real store, checked
//! step by step against a `BTreeMap`, with forced index merges, background merges (a tiny
//! merge threshold), close-and-reopen, and narrow fingerprints that make collisions common.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use proptest::prelude::*;
use shardlite_engine::{Condition, Config, Error, IndexMode, Op, Outcome, Record, Store, Written};

/// What the model holds for a key: (counter, value).
type Model = BTreeMap<u32, (u64, Vec<u8>)>;

#[derive(Debug, Clone)]
enum Step {
    Put(u32, Vec<u8>, Cond),
    Delete(u32, Cond),
    Get(u32),
    Batch(Vec<(u32, Option<Vec<u8>>)>),
    Merge,
    Reopen,
}

/// A condition, with counters relative to the model so that matches are likely.
#[derive(Debug, Clone, Copy)]
enum Cond {
    None,
    Absent,
    Present,
    CurrentCounter,
    Counter(u64),
}

const KEYS: u32 = 40;

fn cond() -> impl Strategy<Value = Cond> {
    prop_oneof![
        3 => Just(Cond::None),
        1 => Just(Cond::Absent),
        1 => Just(Cond::Present),
        2 => Just(Cond::CurrentCounter),
        1 => (1u64..4).prop_map(Cond::Counter),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let k = 0..KEYS;
    let v = proptest::collection::vec(any::<u8>(), 0..40);
    prop_oneof![
        8 => (k.clone(), v.clone(), cond()).prop_map(|(k, v, c)| Step::Put(k, v, c)),
        3 => (k.clone(), cond()).prop_map(|(k, c)| Step::Delete(k, c)),
        4 => k.clone().prop_map(Step::Get),
        2 => proptest::collection::vec((k, proptest::option::of(v)), 1..12).prop_map(Step::Batch),
        1 => Just(Step::Merge),
        1 => Just(Step::Reopen),
    ]
}

fn resolve(c: Cond, model: &Model, k: u32) -> Condition {
    match c {
        Cond::None => Condition::None,
        Cond::Absent => Condition::Absent,
        Cond::Present => Condition::Present,
        Cond::CurrentCounter => Condition::Counter(model.get(&k).map_or(1, |(c, _)| *c)),
        Cond::Counter(n) => Condition::Counter(n),
    }
}

/// The model's answer to a put, applied to the model.
fn model_put(model: &mut Model, k: u32, v: &[u8], c: Condition) -> Result<Outcome, Error> {
    let current = model.get(&k).map(|(c, _)| *c);
    let allowed = match (c, current) {
        (Condition::None, _) => Ok(()),
        (Condition::Absent, None) => Ok(()),
        (Condition::Absent, Some(have)) => Err(Error::ConditionFailed { current: Some(have) }),
        (Condition::Present, Some(_)) => Ok(()),
        (Condition::Present, None) | (Condition::Counter(_), None) => Err(Error::NotFound),
        (Condition::Counter(want), Some(have)) if want == have => Ok(()),
        (Condition::Counter(_), Some(have)) => Err(Error::ConditionFailed { current: Some(have) }),
    };
    allowed?;
    let counter = current.map_or(1, |c| c + 1);
    model.insert(k, (counter, v.to_vec()));
    Ok(Outcome::Written(Written { counter, created: current.is_none() }))
}

fn model_delete(model: &mut Model, k: u32, c: Condition) -> Result<Outcome, Error> {
    let Some((have, _)) = model.get(&k).cloned() else { return Err(Error::NotFound) };
    match c {
        Condition::Absent => return Err(Error::ConditionFailed { current: Some(have) }),
        Condition::Counter(want) if want != have => return Err(Error::ConditionFailed { current: Some(have) }),
        _ => {}
    }
    model.remove(&k);
    Ok(Outcome::Deleted { counter: have })
}

fn model_get(model: &Model, k: u32) -> Option<Record> {
    model.get(&k).map(|(counter, value)| Record { counter: *counter, value: value.clone() })
}

fn run(steps: Vec<Step>, config: Config) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Some(Store::create(dir.path(), config.clone()).unwrap());
    let mut model = Model::new();
    let key = common::key;
    for (n, step) in steps.into_iter().enumerate() {
        let s = store.as_ref().unwrap();
        match step {
            Step::Put(k, v, c) => {
                let c = resolve(c, &model, k);
                let got = s.put(&key(k), v.clone(), c).map(Outcome::Written);
                assert_eq!(got, model_put(&mut model, k, &v, c), "step {n}: put {k} {c:?}");
            }
            Step::Delete(k, c) => {
                let c = resolve(c, &model, k);
                let got = s.delete(&key(k), c).map(|counter| Outcome::Deleted { counter });
                assert_eq!(got, model_delete(&mut model, k, c), "step {n}: delete {k} {c:?}");
            }
            Step::Get(k) => assert_eq!(s.get(&key(k)).unwrap(), model_get(&model, k), "step {n}: get {k}"),
            Step::Batch(items) => {
                let ops = items
                    .iter()
                    .map(|(k, v)| match v {
                        Some(v) => Op::Put { key: key(*k), value: v.clone(), condition: Condition::None },
                        None => Op::Delete { key: key(*k), condition: Condition::None },
                    })
                    .collect();
                let got = s.batch(ops).unwrap();
                let expected: Vec<_> = items
                    .iter()
                    .map(|(k, v)| match v {
                        Some(v) => model_put(&mut model, *k, v, Condition::None),
                        None => model_delete(&mut model, *k, Condition::None),
                    })
                    .collect();
                assert_eq!(got, expected, "step {n}: batch");
            }
            Step::Merge => s.merge_indexes().unwrap(),
            Step::Reopen => {
                drop(store.take());
                store = Some(Store::open(dir.path(), config.clone()).unwrap());
            }
        }
    }
    let s = store.unwrap();
    for k in 0..KEYS {
        assert_eq!(s.get(&key(k)).unwrap(), model_get(&model, k), "final get {k}");
    }
    let checks = s.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
    assert_eq!(checks.iter().map(|c| c.records).sum::<u64>(), model.len() as u64);
}

fn config(index: IndexMode, fingerprint_bits: u8) -> Config {
    Config { partitions: 3, merge_threshold: 6, fingerprint_bits, ..common::small_config(index) }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn hash_index_matches_the_model(steps in proptest::collection::vec(step(), 1..80)) {
        run(steps, config(IndexMode::Hash, 32));
    }

    #[test]
    fn colliding_fingerprints_still_give_exact_answers(steps in proptest::collection::vec(step(), 1..80)) {
        // Two-bit fingerprints: every key collides with about a quarter of the others.
        run(steps, config(IndexMode::Hash, 2));
    }

    #[test]
    fn sqlite_index_matches_the_model(steps in proptest::collection::vec(step(), 1..60)) {
        run(steps, config(IndexMode::Sqlite, 32));
    }
}
