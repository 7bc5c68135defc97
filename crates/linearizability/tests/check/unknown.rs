//! Operations whose outcome is unknown may take effect at any time after their call, or never;
//! once a read has shown such a put, its tag is known.

use shardlite_linearizability::{check, Input, Operation};

use super::{assert_linearizable, assert_violation, delete, get, put, put_unknown};

#[test]
fn a_put_of_unknown_outcome_may_take_effect_late() {
    assert_linearizable(&[
        put("k", "a", 0, 1, "t1"),
        put_unknown("k", "b", 2),
        get("k", 3, 4, Some(("a", "t1"))),
        get("k", 5, 6, Some(("b", "t7"))),
        get("k", 7, 8, Some(("b", "t7"))),
        put("k", "c", 9, 10, "t8"),
    ]);
}

#[test]
fn a_put_of_unknown_outcome_may_never_take_effect() {
    assert_linearizable(&[
        put("k", "a", 0, 1, "t1"),
        put_unknown("k", "b", 2),
        get("k", 3, 4, Some(("a", "t1"))),
        get("k", 50, 60, Some(("a", "t1"))),
    ]);
}

#[test]
fn once_read_a_put_of_unknown_outcome_keeps_its_tag() {
    let history = [put_unknown("k", "b", 0), get("k", 1, 2, Some(("b", "t5"))), get("k", 3, 4, Some(("b", "t6")))];
    assert_violation(&history, "k");
}

#[test]
fn once_read_a_put_of_unknown_outcome_cannot_be_undone() {
    assert_violation(
        &[
            put("k", "a", 0, 1, "t1"),
            put_unknown("k", "b", 2),
            get("k", 3, 4, Some(("b", "t2"))),
            get("k", 5, 6, Some(("a", "t1"))),
        ],
        "k",
    );
}

#[test]
fn a_put_of_unknown_outcome_cannot_take_effect_before_its_call() {
    assert_violation(&[get("k", 0, 1, Some(("b", "t1"))), put_unknown("k", "b", 2)], "k");
}

#[test]
fn a_delete_of_unknown_outcome_may_take_effect_once() {
    let delete_unknown = Operation { client: 0, key: b"k".to_vec(), input: Input::Delete, call: 2, ret: None };
    let mut history = vec![
        put("k", "a", 0, 1, "t1"),
        delete_unknown,
        get("k", 3, 4, Some(("a", "t1"))),
        get("k", 5, 6, None),
        delete("k", 7, 8, false),
    ];
    assert_linearizable(&history);
    history.push(get("k", 9, 10, Some(("a", "t1"))));
    assert_violation(&history, "k");
}

#[test]
fn gets_of_unknown_outcome_constrain_nothing_and_are_left_out_of_reports() {
    let get_unknown = |call| Operation { client: 0, key: b"k".to_vec(), input: Input::Get, call, ret: None };
    let mut history = vec![get_unknown(0), put("k", "a", 1, 2, "t1"), get_unknown(3)];
    assert!(check(&history).is_linearizable());
    history.push(get("k", 4, 5, None));
    let violation = assert_violation(&history, "k");
    assert_eq!(violation.operations, [history[1].clone(), history[3].clone()]);
}
