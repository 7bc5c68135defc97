//! The checker against histories: small ones written by hand (one register after another, reads
//! overlapping writes, outcomes unknown, several keys), small random ones against a brute-force
//! search, and large ones from a simulated server.

mod concurrent;
mod keys;
mod oracle;
mod random;
mod sequential;
mod unknown;

use shardlite_linearizability::{check, Input, Operation, Output, Violation};

/// A put of `value` on `key`, called at `call`, that returned `tag` at `ret`.
fn put(key: &str, value: &str, call: u64, ret: u64, tag: &str) -> Operation {
    operation(key, Input::Put(value.into()), call, Some((ret, Output::Put { tag: tag.into() })))
}

/// A put of `value` on `key`, called at `call`, whose outcome is unknown.
fn put_unknown(key: &str, value: &str, call: u64) -> Operation {
    operation(key, Input::Put(value.into()), call, None)
}

/// A get on `key` that saw `seen` (value and tag), or an absent key.
fn get(key: &str, call: u64, ret: u64, seen: Option<(&str, &str)>) -> Operation {
    let seen = seen.map(|(value, tag)| (value.into(), tag.into()));
    operation(key, Input::Get, call, Some((ret, Output::Got(seen))))
}

/// A delete on `key` that returned whether the key `existed`.
fn delete(key: &str, call: u64, ret: u64, existed: bool) -> Operation {
    operation(key, Input::Delete, call, Some((ret, Output::Deleted { existed })))
}

fn operation(key: &str, input: Input, call: u64, ret: Option<(u64, Output)>) -> Operation {
    Operation { client: 0, key: key.into(), input, call, ret }
}

#[track_caller]
fn assert_linearizable(history: &[Operation]) {
    let verdict = check(history);
    assert!(verdict.is_linearizable(), "expected linearizable, got {verdict}");
}

/// Asserts that `history` is not linearizable on `key`; the violation.
#[track_caller]
fn assert_violation(history: &[Operation], key: &str) -> Violation {
    let verdict = check(history);
    let Some(violation) = verdict.violation() else { panic!("expected a violation on key {key:?}, got {verdict}") };
    assert_eq!(violation.key, key.as_bytes(), "{violation}");
    assert!(violation.operations.iter().all(|op| op.key == key.as_bytes()), "{violation}");
    violation.clone()
}
