//! The operations a store performs and what they answer.

/// A write's precondition on the record's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Condition {
    /// No condition: upsert, or delete if present.
    #[default]
    None,
    /// The key must not exist (insert only; HTTP `If-None-Match: *`).
    Absent,
    /// The key must exist (update only; HTTP `If-Match: *`).
    Present,
    /// The key must exist with this counter (compare-and-set; HTTP `If-Match: "<counter>"`).
    Counter(u64),
}

impl Condition {
    /// Checks the condition against the current counter (`None`: no record).
    pub fn check(self, current: Option<u64>) -> crate::Result<()> {
        use crate::Error::{ConditionFailed, NotFound};
        match (self, current) {
            (Condition::None, _) | (Condition::Absent, None) | (Condition::Present, Some(_)) => Ok(()),
            (Condition::Counter(want), Some(have)) if want == have => Ok(()),
            (Condition::Present | Condition::Counter(_), None) => Err(NotFound),
            (Condition::Absent | Condition::Counter(_), Some(have)) => Err(ConditionFailed { current: Some(have) }),
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
    /// The update counter: 1 on insert, +1 on every update.
    pub counter: u64,
    /// The value.
    pub value: Vec<u8>,
}

/// The result of a successful put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The record's counter after the write.
    pub counter: u64,
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
    /// A delete: the counter the record had.
    Deleted {
        /// Counter of the deleted record.
        counter: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn conditions_follow_http_semantics() {
        assert_eq!(Condition::None.check(None), Ok(()));
        assert_eq!(Condition::Absent.check(None), Ok(()));
        assert_eq!(Condition::Absent.check(Some(3)), Err(Error::ConditionFailed { current: Some(3) }));
        assert_eq!(Condition::Present.check(None), Err(Error::NotFound));
        assert_eq!(Condition::Counter(2).check(Some(2)), Ok(()));
        assert_eq!(Condition::Counter(2).check(Some(3)), Err(Error::ConditionFailed { current: Some(3) }));
        assert_eq!(Condition::Counter(2).check(None), Err(Error::NotFound));
    }
}
