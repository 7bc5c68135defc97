//! Model-based property test of the [`Backend`] trait itself, on both backends: random puts
//! and deletes under every kind of condition, gets, and batches of them, checked step by step
//! against a `BTreeMap` — counters, values, `created`, `NotFound`, `ConditionFailed { current }`,
//! and values over `max_value` (a single write refused; a batch holding one refused whole,
//! nothing of it run). Each case works on keys of its own, so one backend serves every case.

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
};

use proptest::{
    prelude::*,
    test_runner::{Config as ProptestConfig, TestCaseError, TestRunner},
};
use shardlite_engine::{Condition, Config, Error as EngineError, Op, Outcome, Record, Written};
use shardlite_server::{Backend, BackendError};

use crate::common::{config, on_both_backends, Kind, TestBackend};

on_both_backends!(backends_follow_the_model);

/// Keys per case: few, so that operations meet on the same keys.
const KEYS: u8 = 12;

/// The backends' `max_value`; values go one byte over it now and then.
const MAX_VALUE: usize = 24;

/// What the model holds for a key: (counter, value).
type Model = BTreeMap<u8, (u64, Vec<u8>)>;

/// One operation, its condition relative to the model (so that matches are likely).
#[derive(Debug, Clone)]
enum Item {
    Put(u8, Vec<u8>, Cond),
    Delete(u8, Cond),
    Get(u8),
}

#[derive(Debug, Clone)]
enum Step {
    One(Item),
    Batch(Vec<Item>),
}

#[derive(Debug, Clone, Copy)]
enum Cond {
    None,
    Absent,
    Present,
    CurrentCounter,
    Counter(u64),
}

fn cond() -> impl Strategy<Value = Cond> {
    prop_oneof![
        3 => Just(Cond::None),
        1 => Just(Cond::Absent),
        1 => Just(Cond::Present),
        2 => Just(Cond::CurrentCounter),
        1 => (0u64..4).prop_map(Cond::Counter),
    ]
}

fn item() -> impl Strategy<Value = Item> {
    let value = proptest::collection::vec(any::<u8>(), 0..=MAX_VALUE + 1);
    prop_oneof![
        5 => (0..KEYS, value, cond()).prop_map(|(k, v, c)| Item::Put(k, v, c)),
        2 => (0..KEYS, cond()).prop_map(|(k, c)| Item::Delete(k, c)),
        2 => (0..KEYS).prop_map(Item::Get),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![4 => item().prop_map(Step::One), 1 => proptest::collection::vec(item(), 1..8).prop_map(Step::Batch)]
}

async fn backends_follow_the_model(kind: Kind) {
    let storage = TestBackend::new(kind, Config { max_value: MAX_VALUE, ..config() }).await;
    let backend = Arc::clone(&storage.backend);
    let runtime = tokio::runtime::Handle::current();
    // proptest drives the cases synchronously: on a blocking thread, each case blocks on the
    // test's runtime (which this task keeps driving meanwhile).
    let result = tokio::task::spawn_blocking(move || {
        let mut runner = TestRunner::new(ProptestConfig { cases: 32, failure_persistence: None, ..Default::default() });
        let cases = AtomicU32::new(0);
        runner
            .run(&proptest::collection::vec(step(), 1..40), |steps| {
                let case = cases.fetch_add(1, Ordering::Relaxed);
                runtime.block_on(run_case(backend.as_ref(), case, steps))
            })
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap();
    if let Err(failure) = result {
        panic!("{kind:?} departs from the model: {failure}");
    }
}

/// Runs `steps` on keys of case `case`, checking each answer, then every key's final state.
async fn run_case(backend: &dyn Backend, case: u32, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let key = |k: u8| [&case.to_be_bytes()[..], &[k], b"model-key"].concat();
    let mut model = Model::new();
    for (n, step) in steps.into_iter().enumerate() {
        match step {
            Step::One(Item::Get(k)) => {
                let want = model.get(&k).map(|(counter, value)| Record { counter: *counter, value: value.clone() });
                prop_assert_eq!(backend.get(key(k)).await, Ok(want), "step {}: get {}", n, k);
            }
            Step::One(item) => {
                let (op, want) = expect(&mut model, &item, key);
                prop_assert_eq!(backend.write(op).await, want, "step {}: {:?}", n, item);
            }
            Step::Batch(items) => {
                // Each item as the model stands after the ones before it; kept only if the
                // batch is not refused.
                let mut after = model.clone();
                let (ops, answers): (Vec<Op>, Vec<_>) = items.iter().map(|i| expect(&mut after, i, key)).unzip();
                let want = match items.iter().find_map(oversized) {
                    Some(err) => Err(err),
                    None => {
                        model = after;
                        Ok(answers)
                    }
                };
                prop_assert_eq!(backend.batch(ops).await, want, "step {}: batch {:?}", n, items);
            }
        }
    }
    for k in 0..KEYS {
        let want = model.get(&k).map(|(counter, value)| Record { counter: *counter, value: value.clone() });
        prop_assert_eq!(backend.get(key(k)).await, Ok(want), "final get {}", k);
    }
    Ok(())
}

/// The refusal of a put whose value is over `max_value`.
fn oversized(item: &Item) -> Option<BackendError> {
    match item {
        Item::Put(_, v, _) if v.len() > MAX_VALUE => {
            Some(EngineError::ValueTooLarge { len: v.len(), max: MAX_VALUE }.into())
        }
        _ => None,
    }
}

/// The operation of `item` and the model's answer to it, applied to the model.
fn expect(model: &mut Model, item: &Item, key: impl Fn(u8) -> Vec<u8>) -> (Op, Result<Outcome, BackendError>) {
    match item {
        Item::Get(k) => {
            let found = model.get(k).map(|(counter, value)| Record { counter: *counter, value: value.clone() });
            (Op::Get { key: key(*k) }, Ok(Outcome::Found(found)))
        }
        Item::Put(k, v, c) => {
            let condition = resolve(*c, model, *k);
            let op = Op::Put { key: key(*k), value: v.clone(), condition };
            if let Some(err) = oversized(item) {
                return (op, Err(err));
            }
            let current = model.get(k).map(|(counter, _)| *counter);
            let answer = condition.check(current).map(|()| {
                let counter = current.map_or(1, |c| c + 1);
                model.insert(*k, (counter, v.clone()));
                Outcome::Written(Written { counter, created: current.is_none() })
            });
            (op, answer.map_err(BackendError::from))
        }
        Item::Delete(k, c) => {
            let condition = resolve(*c, model, *k);
            let op = Op::Delete { key: key(*k), condition };
            let answer = match model.get(k).map(|(counter, _)| *counter) {
                None => Err(EngineError::NotFound),
                Some(have) => condition.check(Some(have)).map(|()| {
                    model.remove(k);
                    Outcome::Deleted { counter: have }
                }),
            };
            (op, answer.map_err(BackendError::from))
        }
    }
}

fn resolve(c: Cond, model: &Model, k: u8) -> Condition {
    match c {
        Cond::None => Condition::None,
        Cond::Absent => Condition::Absent,
        Cond::Present => Condition::Present,
        Cond::CurrentCounter => Condition::Counter(model.get(&k).map_or(1, |(c, _)| *c)),
        Cond::Counter(n) => Condition::Counter(n),
    }
}
