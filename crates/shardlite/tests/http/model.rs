//! Model-based property test of the [`Backend`] trait itself, on both backends: random puts
//! and deletes under every kind of condition, gets, and batches of them, checked step by step
//! against a model — values, `created`, `NotFound`, `ConditionFailed { current }`, versions
//! (never one given twice to a key; an update keeps the record's id and adds 1 to its counter;
//! a read answers the last write's), and values over `max_value` (a single write refused; a
//! batch holding one refused whole, nothing of it run). Each case works on keys of its own, so
//! one backend serves every case.

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
use shardlite_engine::{Condition, Config, Op, Outcome};
use shardlite_server::{Backend, BackendError};

use crate::common::{config, on_both_backends, Kind, TestBackend};

/// The model of conditions, shared with the engine's model test.
#[path = "../../../engine/tests/common/conditions.rs"]
mod conditions;

use conditions::{cond, holds, resolve, KeyModel};

on_both_backends!(backends_follow_the_model);

/// Keys per case: few, so that operations meet on the same keys.
const KEYS: u8 = 12;

/// The backends' `max_value`; values go one byte over it now and then.
const MAX_VALUE: usize = 24;

type Model = BTreeMap<u8, KeyModel>;

/// One operation, its condition relative to the model (so that matches are likely).
type Item = conditions::Item<u8>;

#[derive(Debug, Clone)]
enum Step {
    One(Item),
    Batch(Vec<Item>),
}

fn item() -> impl Strategy<Value = Item> {
    let value = proptest::collection::vec(any::<u8>(), 0..=MAX_VALUE + 1);
    prop_oneof![
        5 => (0..KEYS, value, cond(2, 1, 3)).prop_map(|(k, v, c)| Item::Put(k, v, c)),
        2 => (0..KEYS, cond(2, 1, 3)).prop_map(|(k, c)| Item::Delete(k, c)),
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
    let mut model: Model = (0..KEYS).map(|k| (k, KeyModel::default())).collect();
    for (n, step) in steps.into_iter().enumerate() {
        match step {
            Step::One(item) => {
                let op = op_of(&model, &item, key);
                let condition = condition_of(&op);
                let got = match op {
                    Op::Get { key } => backend.get(key).await.map(Outcome::Found),
                    op => backend.write(op).await,
                };
                let what = |e| TestCaseError::fail(format!("step {n}: {item:?} ({condition:?}): {e}"));
                check(&mut model, &item, condition, got).map_err(what)?;
            }
            Step::Batch(items) => {
                // Conditions are resolved against the model before the batch is sent.
                let ops: Vec<Op> = items.iter().map(|i| op_of(&model, i, key)).collect();
                let conditions: Vec<Condition> = ops.iter().map(condition_of).collect();
                let got = backend.batch(ops).await;
                if let Some(err) = items.iter().find_map(oversized) {
                    prop_assert_eq!(got.map(|_| ()), Err(err), "step {}: batch {:?} is refused whole", n, items);
                    continue;
                }
                let got = got.map_err(|e| TestCaseError::fail(format!("step {n}: batch refused: {e}")))?;
                prop_assert_eq!(got.len(), items.len());
                for (i, ((item, condition), got)) in items.iter().zip(conditions).zip(got).enumerate() {
                    let what =
                        |e| TestCaseError::fail(format!("step {n}: batch item {i}: {item:?} ({condition:?}): {e}"));
                    check(&mut model, item, condition, got).map_err(what)?;
                }
            }
        }
    }
    for k in 0..KEYS {
        let got = backend.get(key(k)).await.map(|r| r.map(|r| (r.version, r.value)));
        prop_assert_eq!(got, Ok(model[&k].current.clone()), "final get {}", k);
    }
    Ok(())
}

/// The refusal of a put whose value is over `max_value`.
fn oversized(item: &Item) -> Option<BackendError> {
    match item {
        Item::Put(_, v, _) if v.len() > MAX_VALUE => Some(BackendError::ValueTooLarge { len: v.len(), max: MAX_VALUE }),
        _ => None,
    }
}

/// The operation of `item`, its condition resolved against the model.
fn op_of(model: &Model, item: &Item, key: impl Fn(u8) -> Vec<u8>) -> Op {
    match item {
        Item::Get(k) => Op::Get { key: key(*k) },
        Item::Put(k, v, c) => Op::Put { key: key(*k), value: v.clone(), condition: resolve(*c, &model[k]) },
        Item::Delete(k, c) => Op::Delete { key: key(*k), condition: resolve(*c, &model[k]) },
    }
}

fn condition_of(op: &Op) -> Condition {
    match op {
        Op::Get { .. } => Condition::None,
        Op::Put { condition, .. } | Op::Delete { condition, .. } => *condition,
    }
}

/// Checks a backend's answer to `item`, sent with `condition`, against the model, and applies
/// it to the model.
fn check(
    model: &mut Model,
    item: &Item,
    condition: Condition,
    got: Result<Outcome, BackendError>,
) -> Result<(), String> {
    let k = match item {
        Item::Get(k) => {
            let want = Ok(Outcome::Found(
                model[k].current.clone().map(|(version, value)| shardlite_engine::Record { version, value }),
            ));
            return if got == want { Ok(()) } else { Err(format!("got {got:?}, want {want:?}")) };
        }
        Item::Put(k, ..) | Item::Delete(k, _) => *k,
    };
    let key = model.get_mut(&k).expect("every key is in the model");
    if let Some(err) = oversized(item) {
        return if got == Err(err.clone()) { Ok(()) } else { Err(format!("got {got:?}, want {err:?}")) };
    }
    let current = key.current.as_ref().map(|(v, _)| *v);
    let refused = |err: BackendError| {
        if got == Err(err.clone()) {
            Ok(())
        } else {
            Err(format!("got {got:?}, want {err:?}"))
        }
    };
    match item {
        _ if !holds(condition, current) => refused(BackendError::ConditionFailed { current }),
        Item::Delete(..) => match current {
            None => refused(BackendError::NotFound),
            Some(version) if got == Ok(Outcome::Deleted { version }) => {
                key.current = None;
                Ok(())
            }
            Some(version) => Err(format!("got {got:?}, want the deletion of {version}")),
        },
        Item::Put(_, value, _) => {
            let Ok(Outcome::Written(w)) = got else { return Err(format!("got {got:?}, want a write")) };
            if key.seen.contains(&w.version) {
                return Err(format!("version {} was given to this key before", w.version));
            }
            let expected = match current {
                Some(old) => w.version.id == old.id && w.version.counter == old.counter + 1 && !w.created,
                None => w.version.counter == 1 && w.created,
            };
            if !expected {
                return Err(format!("wrote {w:?} over {current:?}"));
            }
            key.seen.push(w.version);
            key.current = Some((w.version, value.clone()));
            Ok(())
        }
        Item::Get(_) => unreachable!("answered above"),
    }
}
