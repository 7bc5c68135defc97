//! Operations that overlap in time may take effect in either order, but in one order for every
//! client.

use super::{assert_linearizable, assert_violation, get, put};

#[test]
fn a_read_overlapping_a_put_sees_the_old_or_the_new_value() {
    let before = put("k", "a", 0, 1, "t1");
    let during = put("k", "b", 2, 10, "t2");
    assert_linearizable(&[before.clone(), during.clone(), get("k", 3, 5, Some(("a", "t1")))]);
    assert_linearizable(&[before.clone(), during.clone(), get("k", 3, 5, Some(("b", "t2")))]);
    assert_violation(&[before, during, get("k", 3, 5, None)], "k");
}

#[test]
fn once_a_read_saw_the_new_value_a_later_read_cannot_see_the_old() {
    let history = [
        put("k", "a", 0, 1, "t1"),
        put("k", "b", 2, 20, "t2"),
        get("k", 3, 5, Some(("b", "t2"))),
        get("k", 6, 8, Some(("a", "t1"))),
    ];
    assert_violation(&history, "k");
    let old_then_new = [get("k", 3, 5, Some(("a", "t1"))), get("k", 6, 8, Some(("b", "t2")))];
    assert_linearizable(&[&history[..2], &old_then_new].concat());
}

#[test]
fn operations_that_only_touch_may_take_effect_in_either_order() {
    assert_linearizable(&[put("k", "a", 0, 1, "t1"), put("k", "b", 2, 5, "t2"), get("k", 5, 6, Some(("a", "t1")))]);
}

#[test]
fn two_readers_must_see_concurrent_puts_in_one_order() {
    let puts = [put("k", "v1", 0, 10, "t1"), put("k", "v2", 0, 10, "t2")];
    let reader_a = [get("k", 1, 2, Some(("v2", "t2"))), get("k", 3, 4, Some(("v1", "t1")))];
    let reader_b = [get("k", 1, 2, Some(("v1", "t1"))), get("k", 3, 4, Some(("v2", "t2")))];
    assert_linearizable(&[puts.as_slice(), &reader_a].concat());
    assert_linearizable(&[puts.as_slice(), &reader_b].concat());
    assert_violation(&[puts.as_slice(), &reader_a, &reader_b].concat(), "k");
}

#[test]
fn reads_after_both_puts_returned_must_agree_on_the_last() {
    let puts = [put("k", "v1", 0, 10, "t1"), put("k", "v2", 0, 10, "t2")];
    let reader_a = [get("k", 11, 12, Some(("v2", "t2"))), get("k", 13, 14, Some(("v2", "t2")))];
    let reader_b = [get("k", 11, 12, Some(("v1", "t1"))), get("k", 13, 14, Some(("v1", "t1")))];
    assert_linearizable(&[puts.as_slice(), &reader_a].concat());
    assert_linearizable(&[puts.as_slice(), &reader_b].concat());
    assert_violation(&[puts.as_slice(), &reader_a, &reader_b].concat(), "k");
    let flipping = [get("k", 11, 12, Some(("v2", "t2"))), get("k", 13, 14, Some(("v1", "t1")))];
    assert_violation(&[puts.as_slice(), &flipping].concat(), "k");
}
