//! Each key is a register of its own; a history that cannot be checked says which operation is
//! at fault.

use shardlite_linearizability::{check, Input, Operation, Output, Verdict};

use super::{assert_linearizable, assert_violation, delete, get, put};

#[test]
fn a_violation_on_one_key_is_reported_for_that_key() {
    let history = [
        put("a", "1", 0, 1, "t1"),
        put("b", "1", 0, 1, "t2"),
        put("c", "1", 0, 1, "t3"),
        put("b", "2", 2, 3, "t4"),
        get("a", 4, 5, Some(("1", "t1"))),
        get("b", 4, 5, Some(("1", "t2"))),
        delete("c", 4, 5, true),
    ];
    let violation = assert_violation(&history, "b");
    assert_eq!(violation.operations.len(), 3);
    let fixed: Vec<_> = history.iter().filter(|op| op.call != 4 || op.key != b"b").cloned().collect();
    assert_linearizable(&fixed);
}

#[test]
fn a_write_to_one_key_is_not_seen_on_another() {
    assert_violation(&[put("a", "1", 0, 1, "t1"), get("b", 2, 3, Some(("1", "t1")))], "b");
}

#[test]
fn the_same_tag_on_different_keys_is_fine() {
    assert_linearizable(&[put("a", "1", 0, 1, "t1"), put("b", "2", 2, 3, "t1")]);
}

#[test]
fn an_operation_that_returned_before_its_call_is_invalid() {
    let history = [put("a", "1", 0, 1, "t1"), get("a", 5, 4, None)];
    assert!(matches!(check(&history), Verdict::Invalid { operation: 1, .. }), "{}", check(&history));
}

#[test]
fn an_output_of_the_wrong_kind_is_invalid() {
    let wrong = Operation {
        client: 7,
        key: b"a".to_vec(),
        input: Input::Delete,
        call: 0,
        ret: Some((1, Output::Put { tag: "t".into() })),
    };
    let verdict = check(&[put("b", "1", 0, 1, "t1"), wrong]);
    assert!(matches!(verdict, Verdict::Invalid { operation: 1, .. }), "{verdict}");
    assert_eq!(verdict.to_string(), "invalid history: operation 1: a delete's output is not Output::Deleted");
}
