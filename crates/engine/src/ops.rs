//! The operations a store performs and what they answer, and [`Version`]: which state of a
//! record an answer describes.

use std::{fmt, str::FromStr};

/// One state of a record, never given to another state of the same key in the life of a data
/// directory: the record's id (assigned at insert, never reused, so a key deleted and created
/// again has a new one), its update counter, and the directory's epoch (bumped whenever the
/// directory may have lost state that was already shown, so versions shown before cannot come
/// back naming other values). `docs/design.md`, "Versions", says why this is enough.
///
/// Its text form `<epoch>.<id>.<counter>` is what the HTTP server quotes as the entity tag;
/// clients must treat it as opaque.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Version {
    /// The data directory's epoch when this version was read or written.
    pub epoch: u64,
    /// The record's id in its partition.
    pub id: u64,
    /// The update counter: 1 on insert, +1 on every update.
    pub counter: u64,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.epoch, self.id, self.counter)
    }
}

impl FromStr for Version {
    type Err = ();

    /// Parses the text form; anything else (including a form with leading zeros or signs,
    /// which [`Version`]'s `Display` never writes) is `Err`: no version of this store.
    fn from_str(s: &str) -> Result<Self, ()> {
        let mut parts = s.split('.').map(|part| {
            let canonical = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) && !part.starts_with("0");
            if canonical || part == "0" {
                part.parse::<u64>().map_err(|_| ())
            } else {
                Err(())
            }
        });
        let mut next = || parts.next().ok_or(())?;
        let version = Version { epoch: next()?, id: next()?, counter: next()? };
        match parts.next() {
            None => Ok(version),
            Some(_) => Err(()),
        }
    }
}

/// A write's precondition on the record's current state (HTTP's conditional requests, with
/// RFC 9110's answers: any condition on an absent record fails, except "absent" itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Condition {
    /// No condition: upsert, or delete if present.
    #[default]
    None,
    /// The key must not exist (insert only; HTTP `If-None-Match: *`).
    Absent,
    /// The key must exist (update only; HTTP `If-Match: *`).
    Present,
    /// The key must exist at exactly this version (compare-and-set; HTTP `If-Match: "<tag>"`).
    Version(Version),
    /// The caller named a version this store never issued (a foreign or weak tag): it can
    /// match nothing, so the write fails like a stale compare-and-set.
    UnknownVersion,
}

impl Condition {
    /// Checks the condition against the current version (`None`: no record).
    pub fn check(self, current: Option<Version>) -> crate::Result<()> {
        match (self, current) {
            (Condition::None, _) | (Condition::Absent, None) | (Condition::Present, Some(_)) => Ok(()),
            (Condition::Version(want), Some(have)) if want == have => Ok(()),
            _ => Err(crate::Error::ConditionFailed { current }),
        }
    }
}

/// One operation of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Read a record.
    Get {
        /// The key.
        key: Vec<u8>,
    },
    /// Insert or replace a record.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The new value.
        value: Vec<u8>,
        /// What must hold first.
        condition: Condition,
    },
    /// Delete a record.
    Delete {
        /// The key.
        key: Vec<u8>,
        /// What must hold first.
        condition: Condition,
    },
}

impl Op {
    /// The key the operation concerns.
    pub fn key(&self) -> &[u8] {
        match self {
            Op::Get { key } | Op::Put { key, .. } | Op::Delete { key, .. } => key,
        }
    }
}

/// A stored record as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Which state of the record this is (its update counter is `version.counter`).
    pub version: Version,
    /// The value.
    pub value: Vec<u8>,
}

/// The result of a successful put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The record's version after the write.
    pub version: Version,
    /// Whether the put inserted a new record (else it updated one).
    pub created: bool,
}

/// The result of one successful operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A get: the record, or `None`.
    Found(Option<Record>),
    /// A put.
    Written(Written),
    /// A delete: the version the record had.
    Deleted {
        /// Version of the deleted record.
        version: Version,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    const fn v(id: u64, counter: u64) -> Version {
        Version { epoch: 7, id, counter }
    }

    #[test]
    fn conditions_follow_http_semantics() {
        let failed = |current| Err(Error::ConditionFailed { current });
        assert_eq!(Condition::None.check(None), Ok(()));
        assert_eq!(Condition::Absent.check(None), Ok(()));
        assert_eq!(Condition::Absent.check(Some(v(1, 3))), failed(Some(v(1, 3))));
        assert_eq!(Condition::Present.check(Some(v(1, 3))), Ok(()));
        assert_eq!(Condition::Present.check(None), failed(None), "If-Match on an absent key is 412");
        assert_eq!(Condition::Version(v(1, 2)).check(Some(v(1, 2))), Ok(()));
        assert_eq!(Condition::Version(v(1, 2)).check(Some(v(1, 3))), failed(Some(v(1, 3))));
        assert_eq!(Condition::Version(v(1, 2)).check(Some(v(4, 2))), failed(Some(v(4, 2))), "another life");
        let other_epoch = Version { epoch: 8, ..v(1, 2) };
        assert_eq!(Condition::Version(other_epoch).check(Some(v(1, 2))), failed(Some(v(1, 2))));
        assert_eq!(Condition::Version(v(1, 2)).check(None), failed(None));
        assert_eq!(Condition::UnknownVersion.check(Some(v(1, 1))), failed(Some(v(1, 1))));
        assert_eq!(Condition::UnknownVersion.check(None), failed(None));
    }

    #[test]
    fn versions_round_trip_through_their_text_and_nothing_else_parses() {
        for version in
            [v(1, 1), Version { epoch: 0, id: 0, counter: 0 }, Version { epoch: u64::MAX, id: 9, counter: 1 }]
        {
            assert_eq!(version.to_string().parse::<Version>(), Ok(version));
        }
        assert_eq!(v(12, 3).to_string(), "7.12.3");
        for foreign in
            ["", "1", "1.2", "1.2.3.4", "1..3", "01.2.3", "+1.2.3", "1.2.x", "1.2.18446744073709551616", " 1.2.3"]
        {
            assert_eq!(foreign.parse::<Version>(), Err(()), "{foreign:?}");
        }
    }
}
