//! The checker against a brute-force search on small random histories: every order of the
//! operations that respects real time, each operation of unknown outcome taking effect or not.

use shardlite_linearizability::{check, Input, Operation, Output, Register};

use super::random::Rng;

/// Whether some order of `history` explains it, tried exhaustively.
fn brute_force(history: &[Operation]) -> bool {
    let ops: Vec<&Operation> = history.iter().filter(|op| op.input != Input::Get || op.ret.is_some()).collect();
    extend(&ops, &mut vec![false; ops.len()], &Register::Absent)
}

/// Whether the operations not `done` can follow, from `state`.
fn extend(ops: &[&Operation], done: &mut [bool], state: &Register) -> bool {
    if ops.iter().zip(&*done).all(|(op, done)| *done || op.ret.is_none()) {
        return true;
    }
    for i in 0..ops.len() {
        if done[i] || !may_go_next(ops, done, i) {
            continue;
        }
        if let Some(next) = apply(state, ops[i]) {
            done[i] = true;
            let found = extend(ops, done, &next);
            done[i] = false;
            if found {
                return true;
            }
        }
    }
    false
}

/// Whether no operation left returned before operation `i` was called.
fn may_go_next(ops: &[&Operation], done: &[bool], i: usize) -> bool {
    ops.iter().zip(done).all(|(op, done)| *done || op.ret.as_ref().is_none_or(|(ret, _)| *ret >= ops[i].call))
}

/// The register's state after `op`, if its result is possible in `state`.
fn apply(state: &Register, op: &Operation) -> Option<Register> {
    let present = |value: &Vec<u8>, tag: Option<&String>| Register::Present { value: value.clone(), tag: tag.cloned() };
    match (&op.input, op.ret.as_ref().map(|(_, output)| output)) {
        (Input::Put(value), None) => Some(present(value, None)),
        (Input::Put(value), Some(Output::Put { tag })) => match state {
            Register::Present { tag: Some(old), .. } if old == tag => None,
            _ => Some(present(value, Some(tag))),
        },
        (Input::Get, Some(Output::Got(None))) => (*state == Register::Absent).then_some(Register::Absent),
        (Input::Get, Some(Output::Got(Some((value, tag))))) => match state {
            Register::Present { value: now, tag: now_tag }
                if now == value && now_tag.as_ref().is_none_or(|t| t == tag) =>
            {
                Some(present(value, Some(tag)))
            }
            _ => None,
        },
        (Input::Delete, None) => Some(Register::Absent),
        (Input::Delete, Some(Output::Deleted { existed })) => {
            (*existed == (*state != Register::Absent)).then_some(Register::Absent)
        }
        (input, output) => panic!("{input:?} answered {output:?}"),
    }
}

/// A few operations of three clients on one key, with results drawn from small sets (so that
/// some histories are linearizable and some not), a quarter of outcomes unknown.
fn random_history(rng: &mut Rng) -> Vec<Operation> {
    let mut free_at = [0; 3];
    let pick = |rng: &mut Rng, from: &[&str]| from[rng.below(from.len() as u64) as usize].to_owned();
    (0..3 + rng.below(5))
        .map(|_| {
            let client = rng.below(3);
            let call = free_at[client as usize] + rng.below(4);
            let ret = call + rng.below(6);
            free_at[client as usize] = ret + 1;
            let (input, output) = match rng.below(3) {
                0 => (Input::Put(pick(rng, &["a", "b"]).into()), Output::Put { tag: pick(rng, &["t1", "t2", "t3"]) }),
                1 => {
                    let seen =
                        (rng.below(4) != 0).then(|| (pick(rng, &["a", "b"]).into(), pick(rng, &["t1", "t2", "t3"])));
                    (Input::Get, Output::Got(seen))
                }
                _ => (Input::Delete, Output::Deleted { existed: rng.below(2) == 0 }),
            };
            let ret = (rng.below(4) != 0).then_some((ret, output));
            Operation { client, key: b"k".to_vec(), input, call, ret }
        })
        .collect()
}

#[test]
fn the_checker_agrees_with_a_brute_force_search() {
    let mut rng = Rng(7);
    let mut linearizable = 0;
    let histories = 3_000;
    for _ in 0..histories {
        let history = random_history(&mut rng);
        let expected = brute_force(&history);
        let verdict = check(&history);
        let listing: Vec<String> = history.iter().map(ToString::to_string).collect();
        assert_eq!(verdict.is_linearizable(), expected, "{verdict}\nhistory:\n{}", listing.join("\n"));
        linearizable += usize::from(expected);
    }
    assert!(linearizable > histories / 10 && linearizable < histories * 9 / 10, "{linearizable} linearizable");
}
