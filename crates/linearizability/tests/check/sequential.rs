//! One operation after another on one key: every result must follow from the ones before.

use shardlite_linearizability::Register;

use super::{assert_linearizable, assert_violation, delete, get, put};

#[test]
fn legal_sequential_histories_pass() {
    assert_linearizable(&[]);
    assert_linearizable(&[
        get("k", 0, 1, None),
        put("k", "a", 2, 3, "t1"),
        get("k", 4, 5, Some(("a", "t1"))),
        put("k", "b", 6, 7, "t2"),
        put("k", "b", 8, 9, "t3"),
        get("k", 10, 11, Some(("b", "t3"))),
        delete("k", 12, 13, true),
        get("k", 14, 15, None),
        delete("k", 16, 17, false),
        put("k", "a", 18, 19, "t1"),
        get("k", 20, 21, Some(("a", "t1"))),
    ]);
}

#[test]
fn a_read_of_a_value_never_written_is_a_violation() {
    assert_violation(&[put("k", "a", 0, 1, "t1"), get("k", 2, 3, Some(("z", "t1")))], "k");
    assert_violation(&[get("k", 0, 1, Some(("z", "t1")))], "k");
}

#[test]
fn a_stale_read_after_a_later_write_returned_is_a_violation() {
    let violation = assert_violation(
        &[put("k", "a", 0, 1, "t1"), put("k", "b", 2, 3, "t2"), get("k", 4, 5, Some(("a", "t1")))],
        "k",
    );
    assert_eq!(violation.longest_prefix, [0, 1]);
    assert_eq!(violation.register, Register::Present { value: b"b".to_vec(), tag: Some("t2".into()) });
    let report = violation.to_string();
    assert!(report.starts_with("key \"k\" is not linearizable"), "{report}");
    assert!(report.contains("longest linearizable prefix (2 of 3): 0, 1"), "{report}");
    assert!(report.contains("get -> \"a\" tag \"t1\""), "{report}");
}

#[test]
fn a_read_of_a_deleted_key_is_a_violation() {
    assert_violation(&[put("k", "a", 0, 1, "t1"), delete("k", 2, 3, true), get("k", 4, 5, Some(("a", "t1")))], "k");
}

#[test]
fn a_lost_acknowledged_write_is_a_violation() {
    assert_violation(
        &[
            put("k", "a", 0, 1, "t1"),
            put("k", "b", 2, 3, "t2"),
            get("k", 4, 5, Some(("b", "t2"))),
            get("k", 6, 7, Some(("a", "t1"))),
        ],
        "k",
    );
    assert_violation(&[put("k", "a", 0, 1, "t1"), get("k", 2, 3, None)], "k");
}

#[test]
fn a_read_with_the_wrong_tag_is_a_violation() {
    assert_violation(&[put("k", "a", 0, 1, "t1"), get("k", 2, 3, Some(("a", "t2")))], "k");
}

#[test]
fn a_put_returning_the_tag_it_replaced_is_a_violation() {
    assert_violation(&[put("k", "a", 0, 1, "t1"), put("k", "b", 2, 3, "t1")], "k");
}

#[test]
fn a_delete_must_say_whether_the_key_existed() {
    assert_violation(&[delete("k", 0, 1, true)], "k");
    assert_violation(&[put("k", "a", 0, 1, "t1"), delete("k", 2, 3, false)], "k");
}
