//! The model of conditional writes that the engine's model test (`tests/model.rs`) and the
//! backends' (`crates/shardlite/tests/http/model.rs`, which includes this file) share: what
//! the model knows of a key, the operations on it, conditions chosen relative to it, and when
//! one holds — the model's own rules (RFC 9110), not the engine's `Condition::check`.

use proptest::prelude::*;
use shardlite_engine::{Condition, Version};

/// One key as the model knows it.
#[derive(Debug, Default, Clone)]
pub struct KeyModel {
    /// The current record: its version and value.
    pub current: Option<(Version, Vec<u8>)>,
    /// Every version the store answered for this key, in any epoch.
    pub seen: Vec<Version>,
}

/// One operation on key `K` of the model, its condition relative to it.
#[derive(Debug, Clone)]
pub enum Item<K> {
    Put(K, Vec<u8>, Cond),
    Delete(K, Cond),
    Get(K),
}

/// A condition, chosen relative to the model so that matches (and near misses) are likely.
#[derive(Debug, Clone, Copy)]
pub enum Cond {
    None,
    Absent,
    Present,
    /// The current version (if absent: the key's most recent earlier version, if any).
    Current,
    /// The n-th most recent version seen for the key (a stale one, mostly).
    Seen(usize),
    /// A version the store never issued.
    Unknown,
}

/// Conditions, `Current` `current` times as likely as `Absent`, and `Seen` of the `depth`
/// latest versions `seen` times.
pub fn cond(current: u32, seen: u32, depth: usize) -> impl Strategy<Value = Cond> {
    prop_oneof![
        3 => Just(Cond::None),
        1 => Just(Cond::Absent),
        1 => Just(Cond::Present),
        current => Just(Cond::Current),
        seen => (0..depth).prop_map(Cond::Seen),
        1 => Just(Cond::Unknown),
    ]
}

/// The condition `c` stands for, for `key` as the model knows it now.
pub fn resolve(c: Cond, key: &KeyModel) -> Condition {
    let latest = |n: usize| key.seen.iter().rev().nth(n).copied();
    match c {
        Cond::None => Condition::None,
        Cond::Absent => Condition::Absent,
        Cond::Present => Condition::Present,
        Cond::Current => {
            key.current.as_ref().map(|(v, _)| *v).or(latest(0)).map_or(Condition::Present, Condition::Version)
        }
        Cond::Seen(n) => latest(n).map_or(Condition::UnknownVersion, Condition::Version),
        Cond::Unknown => Condition::UnknownVersion,
    }
}

/// Whether `c` holds for the key's current record.
pub fn holds(c: Condition, current: Option<Version>) -> bool {
    match (c, current) {
        (Condition::None, _) | (Condition::Absent, None) | (Condition::Present, Some(_)) => true,
        (Condition::Version(want), Some(have)) => want == have,
        _ => false,
    }
}
