//! Checking a whole history: validating its operations, partitioning them by key, searching each
//! key's register for a linearization within a step budget, and the [`Verdict`], which names the
//! key that failed and shows how far its search got.

use std::{collections::BTreeMap, fmt};

use crate::{
    model::{Register, Symbols},
    operation::{Operation, Text},
    search::{search, Found, Timed},
};

/// How much work a check may do before it gives up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Steps of the search (an entry or an operation of unknown outcome looked at), over all
    /// keys together; the check is [`Verdict::Undecided`] once they run out.
    pub max_steps: u64,
}

impl Default for Limits {
    /// Ten million steps: a few seconds in a debug build. A linearizable history of thousands of
    /// operations takes thousands; a violation takes more, most where many operations of one key
    /// have unknown outcomes.
    fn default() -> Self {
        Self { max_steps: 10_000_000 }
    }
}

/// What a check concluded.
pub enum Verdict {
    /// Every key's operations have a linearization.
    Linearizable,
    /// A key's operations have none (the first such key, in byte order).
    NotLinearizable(Box<Violation>),
    /// The step budget ran out while searching this key (no key searched before it failed).
    Undecided {
        /// The key being searched.
        key: Vec<u8>,
        /// The steps taken, over all keys.
        steps: u64,
    },
    /// An operation cannot be checked: it returned before it was called, or its output is not the
    /// kind its input gets.
    Invalid {
        /// Its index in the history.
        operation: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl Verdict {
    /// Whether the history is known to be linearizable.
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }

    /// The violation, if the history is known not to be linearizable.
    pub fn violation(&self) -> Option<&Violation> {
        match self {
            Verdict::NotLinearizable(violation) => Some(violation),
            _ => None,
        }
    }
}

/// A key whose operations have no linearization.
#[derive(Clone)]
pub struct Violation {
    /// The key.
    pub key: Vec<u8>,
    /// Its operations by call time, less gets of unknown outcome (which constrain nothing).
    pub operations: Vec<Operation>,
    /// The longest order of some of [`operations`](Self::operations) (their indices) that the
    /// search found to respect real time and explain every result: a linearization of the
    /// history up to where it breaks.
    pub longest_prefix: Vec<usize>,
    /// The register after that prefix.
    pub register: Register,
}

/// Checks that `history` is linearizable, with the default [`Limits`].
pub fn check(history: &[Operation]) -> Verdict {
    check_with(history, Limits::default())
}

/// Checks that `history` is linearizable: that each key, a register of its own, has an order of
/// its operations that respects real time and explains every result. Gives up with
/// [`Verdict::Undecided`] after `limits.max_steps` steps.
pub fn check_with(history: &[Operation], limits: Limits) -> Verdict {
    let keys = match partition(history) {
        Ok(keys) => keys,
        Err(invalid) => return invalid,
    };
    let mut steps = 0;
    for key in keys {
        let (found, taken) = search(&key.timed, limits.max_steps - steps);
        steps += taken;
        match found {
            Found::Linearization => {}
            Found::Nothing { longest, state } => {
                let register = key.symbols.register(state);
                return Verdict::NotLinearizable(Box::new(key.violation(longest, register)));
            }
            Found::OutOfSteps => return Verdict::Undecided { key: key.key.to_vec(), steps },
        }
    }
    Verdict::Linearizable
}

/// One key's operations, ready to search.
struct Key<'a> {
    key: &'a [u8],
    operations: Vec<&'a Operation>,
    symbols: Symbols<'a>,
    timed: Vec<Timed>,
}

impl Key<'_> {
    fn violation(&self, longest_prefix: Vec<usize>, register: Register) -> Violation {
        Violation {
            key: self.key.to_vec(),
            operations: self.operations.iter().map(|&op| op.clone()).collect(),
            longest_prefix,
            register,
        }
    }
}

/// `history`'s keys in byte order, each with its operations by call time; an
/// [`Verdict::Invalid`] for the first operation that cannot be checked.
fn partition(history: &[Operation]) -> Result<Vec<Key<'_>>, Verdict> {
    let mut by_key: BTreeMap<&[u8], Vec<usize>> = BTreeMap::new();
    for (index, op) in history.iter().enumerate() {
        if op.ret.as_ref().is_some_and(|(ret, _)| *ret < op.call) {
            return Err(Verdict::Invalid { operation: index, reason: "it returned before it was called" });
        }
        by_key.entry(&op.key).or_default().push(index);
    }
    by_key.into_iter().map(|(key, indices)| prepare(history, key, indices)).collect()
}

/// The key's operations (`indices` into `history`) interned and timed, by call time.
fn prepare<'a>(history: &'a [Operation], key: &'a [u8], mut indices: Vec<usize>) -> Result<Key<'a>, Verdict> {
    indices.sort_by_key(|&index| history[index].call);
    let mut prepared = Key { key, operations: Vec::new(), symbols: Symbols::new(), timed: Vec::new() };
    for index in indices {
        let operation = &history[index];
        let op = prepared.symbols.op(operation).map_err(|reason| Verdict::Invalid { operation: index, reason })?;
        if let Some(op) = op {
            prepared.operations.push(operation);
            prepared.timed.push(Timed { call: operation.call, ret: operation.ret.as_ref().map(|(ret, _)| *ret), op });
        }
    }
    Ok(prepared)
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Linearizable => f.write_str("linearizable"),
            Verdict::NotLinearizable(violation) => violation.fmt(f),
            Verdict::Undecided { key, steps } => {
                write!(f, "undecided: the search gave up on key {:?} after {steps} steps", Text(key))
            }
            Verdict::Invalid { operation, reason } => write!(f, "invalid history: operation {operation}: {reason}"),
        }
    }
}

/// The same as [`Display`](fmt::Display), which shows the whole report.
impl fmt::Debug for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A report over several lines: the key, its operations numbered, the longest prefix by those
/// numbers and the register after it.
impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.operations.len();
        let key = Text(&self.key);
        let problem = "respects real time and explains every result";
        writeln!(f, "key {key:?} is not linearizable: no order of its {count} operations {problem}")?;
        writeln!(f, "operations, by call time:")?;
        for (index, operation) in self.operations.iter().enumerate() {
            writeln!(f, "  {index:>4}: {operation}")?;
        }
        let prefix: Vec<String> = self.longest_prefix.iter().map(usize::to_string).collect();
        writeln!(f, "longest linearizable prefix ({} of {count}): {}", prefix.len(), prefix.join(", "))?;
        write!(f, "register after it: {}", self.register)
    }
}

/// The same as [`Display`](fmt::Display), which shows the whole report.
impl fmt::Debug for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
