//! Histories of a simulated server, linearizable by construction (each operation takes effect at
//! a random point inside its interval; some outcomes are lost), must pass; the same with one
//! read's result made certainly impossible must fail on that read's key.

use std::collections::HashMap;

use shardlite_linearizability::{check, check_with, Input, Limits, Operation, Output, Verdict};

use super::assert_violation;

/// Seeds of the simulations each test checks.
const SEEDS: u64 = 8;

/// A few hundred operations on a few keys.
const SMALL: Shape = Shape { operations: 300, clients: 6, keys: 3, unknown_percent: 5 };

/// SplitMix64: a deterministic source of test data.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let z = (self.0 ^ (self.0 >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What a simulation runs.
struct Shape {
    operations: usize,
    clients: u64,
    keys: u64,
    /// The share of operations whose client never learns the outcome (half of them take effect).
    unknown_percent: u64,
}

/// An operation the simulation will run.
struct Planned {
    operation: Operation,
    ret: u64,
    /// When it takes effect on the server, if it does.
    effect: Option<u64>,
    /// Whether its client learns the outcome.
    known: bool,
}

/// The server: one register per key, one write after another; every write a new tag.
#[derive(Default)]
struct Server {
    registers: HashMap<Vec<u8>, (Vec<u8>, String)>,
    writes: u64,
}

impl Server {
    fn apply(&mut self, operation: &Operation) -> Output {
        match &operation.input {
            Input::Put(value) => {
                self.writes += 1;
                let tag = format!("t{}", self.writes);
                self.registers.insert(operation.key.clone(), (value.clone(), tag.clone()));
                Output::Put { tag }
            }
            Input::Get => Output::Got(self.registers.get(&operation.key).cloned()),
            Input::Delete => Output::Deleted { existed: self.registers.remove(&operation.key).is_some() },
        }
    }
}

/// A history of `shape`: each client calls one operation after another on random keys; every
/// put writes a value of its own.
fn simulate(seed: u64, shape: &Shape) -> Vec<Operation> {
    let mut rng = Rng(seed);
    let mut free_at = vec![0; shape.clients as usize];
    let mut planned: Vec<Planned> = (0..shape.operations).map(|i| plan(&mut rng, shape, &mut free_at, i)).collect();
    let mut order: Vec<usize> = (0..planned.len()).filter(|&i| planned[i].effect.is_some()).collect();
    order.sort_by_key(|&i| (planned[i].effect, i));
    let mut server = Server::default();
    for i in order {
        let output = server.apply(&planned[i].operation);
        if planned[i].known {
            planned[i].operation.ret = Some((planned[i].ret, output));
        }
    }
    planned.into_iter().map(|planned| planned.operation).collect()
}

/// The next operation of a random client, called a little after its last one returned.
fn plan(rng: &mut Rng, shape: &Shape, free_at: &mut [u64], index: usize) -> Planned {
    let client = rng.below(shape.clients);
    let call = free_at[client as usize] + rng.below(20);
    let ret = call + 1 + rng.below(60);
    free_at[client as usize] = ret;
    let key = format!("k{}", rng.below(shape.keys)).into_bytes();
    let input = match rng.below(10) {
        0..=3 => Input::Put(format!("v{index}").into_bytes()),
        4..=7 => Input::Get,
        _ => Input::Delete,
    };
    let known = rng.below(100) >= shape.unknown_percent;
    let effect = (known || rng.below(2) == 0).then(|| call + rng.below(ret - call + 1));
    Planned { operation: Operation { client, key, input, call, ret: None }, ret, effect, known }
}

fn return_time(operation: &Operation) -> Option<u64> {
    operation.ret.as_ref().map(|(ret, _)| *ret)
}

fn is_known_get(operation: &Operation) -> bool {
    operation.input == Input::Get && operation.ret.is_some()
}

/// The tag a put returned, if its outcome is known.
fn put_tag(operation: &Operation) -> Option<&str> {
    match &operation.ret {
        Some((_, Output::Put { tag })) => Some(tag),
        _ => None,
    }
}

/// Makes the get at `read` return `value` with `tag`; the read's index.
fn set_read(history: &mut [Operation], read: usize, value: &[u8], tag: &str) -> usize {
    let ret = return_time(&history[read]).expect("a known get");
    history[read].ret = Some((ret, Output::Got(Some((value.to_vec(), tag.into())))));
    read
}

/// Makes the known get halfway through the history read a value no put wrote.
fn read_never_written(history: &mut [Operation]) -> Option<usize> {
    let reads: Vec<usize> = (0..history.len()).filter(|&i| is_known_get(&history[i])).collect();
    let read = *reads.get(reads.len() / 2)?;
    Some(set_read(history, read, b"never written", "t0"))
}

/// Makes a known get read the value of a put called only after the get returned.
fn read_from_the_future(history: &mut [Operation]) -> Option<usize> {
    let (read, put) = (0..history.len()).filter(|&r| is_known_get(&history[r])).find_map(|r| {
        let returned = return_time(&history[r])?;
        let later = |p: &usize| history[*p].key == history[r].key && history[*p].call > returned;
        (0..history.len()).filter(later).find(|&p| matches!(history[p].input, Input::Put(_))).map(|p| (r, p))
    })?;
    let Input::Put(value) = history[put].input.clone() else { return None };
    let tag = put_tag(&history[put]).unwrap_or("t0").to_owned();
    Some(set_read(history, read, &value, &tag))
}

/// Makes a known get read the value of a put that an acknowledged later write (called after the
/// put returned, returned before the get was called) had already replaced.
fn read_overwritten(history: &mut [Operation]) -> Option<usize> {
    let (read, put) = (0..history.len()).rev().filter(|&r| is_known_get(&history[r])).find_map(|r| {
        let same_key = |i: &usize| history[*i].key == history[r].key;
        let before = |i: &usize, time: u64| return_time(&history[*i]).is_some_and(|ret| ret < time);
        let is_write = |i: &usize| history[*i].input != Input::Get;
        let known_put_before =
            |time| (0..history.len()).rfind(|p| same_key(p) && put_tag(&history[*p]).is_some() && before(p, time));
        let mut writes = (0..history.len()).filter(|w| same_key(w) && is_write(w) && before(w, history[r].call));
        writes.find_map(|w| known_put_before(history[w].call)).map(|p| (r, p))
    })?;
    let Input::Put(value) = history[put].input.clone() else { return None };
    let tag = put_tag(&history[put])?.to_owned();
    Some(set_read(history, read, &value, &tag))
}

/// Checks that each corruption of each simulated history is reported on the corrupted read's key.
fn assert_reported(corrupt: fn(&mut [Operation]) -> Option<usize>) {
    for seed in 0..SEEDS {
        let mut history = simulate(seed, &SMALL);
        let read = corrupt(&mut history).unwrap_or_else(|| panic!("seed {seed}: no read to corrupt"));
        let key = String::from_utf8(history[read].key.clone()).expect("keys are text");
        let violation = assert_violation(&history, &key);
        assert!(violation.operations.contains(&history[read]), "seed {seed}: {violation}");
    }
}

#[test]
fn simulated_histories_are_linearizable() {
    for seed in 0..SEEDS {
        let history = simulate(seed, &SMALL);
        let unknown = history.iter().filter(|op| op.ret.is_none()).count();
        let overlapping = history.iter().filter(|a| {
            history.iter().any(|b| a.key == b.key && a.call < b.call && return_time(a).is_none_or(|ret| b.call < ret))
        });
        assert!(unknown > 0 && overlapping.count() > SMALL.operations / 10, "seed {seed}: a history too tame");
        let verdict = check(&history);
        assert!(verdict.is_linearizable(), "seed {seed}: {verdict}");
    }
}

#[test]
fn a_read_of_a_value_never_written_is_reported() {
    assert_reported(read_never_written);
}

#[test]
fn a_read_of_a_put_called_after_it_returned_is_reported() {
    assert_reported(read_from_the_future);
}

#[test]
fn a_read_of_an_overwritten_value_is_reported() {
    assert_reported(read_overwritten);
}

#[test]
fn two_thousand_operations_over_twenty_keys_check_within_the_budget() {
    let shape = Shape { operations: 2_000, clients: 8, keys: 20, unknown_percent: 5 };
    for seed in 0..2 {
        let verdict = check(&simulate(seed, &shape));
        assert!(verdict.is_linearizable(), "seed {seed}: {verdict}");
    }
}

#[test]
fn a_search_out_of_steps_is_undecided() {
    let verdict = check_with(&simulate(0, &SMALL), Limits { max_steps: 50 });
    assert!(matches!(&verdict, Verdict::Undecided { key, steps: 50 } if key == b"k0"), "{verdict}");
}
