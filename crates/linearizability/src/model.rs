//! The register each key is: its states, the operations on it, which results each state allows,
//! and which operations no result can tell apart. The search works on values and tags interned
//! as small numbers ([`Symbols`]), so that a state is a `Copy` value cheap to hash into its cache;
//! [`Register`] is the same state in bytes and text, for reports.

use std::{
    collections::{HashMap, HashSet},
    fmt,
    hash::Hash,
};

use crate::operation::{Input, Operation, Output, Text};

/// A value or a tag, interned.
pub(crate) type Sym = usize;

/// The register's state.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum State {
    Absent,
    /// A value with its tag, `None` while no result has shown it (a put of unknown outcome).
    Present {
        value: Sym,
        tag: Option<Sym>,
    },
}

impl State {
    fn known_tag(self) -> Option<Sym> {
        match self {
            State::Present { tag, .. } => tag,
            State::Absent => None,
        }
    }

    /// Whether a read in this state may return `value` with `tag`.
    fn shows(self, value: Sym, tag: Sym) -> bool {
        matches!(self, State::Present { value: v, tag: t } if v == value && t.is_none_or(|t| t == tag))
    }
}

/// Stands for every value no get returned, in [`Op::as_seen`].
const UNREAD: Sym = Sym::MAX;

/// An operation with its result; `None` where the outcome is unknown.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Op {
    Put { value: Sym, tag: Option<Sym> },
    Get(Option<(Sym, Sym)>),
    Delete { existed: Option<bool> },
}

impl Op {
    /// The state this operation leaves when it takes effect in `state`, or `None` when its result
    /// is impossible there.
    pub(crate) fn apply(self, state: State) -> Option<State> {
        match self {
            Op::Put { value, tag: None } => Some(State::Present { value, tag: None }),
            Op::Put { value, tag: Some(tag) } => {
                (state.known_tag() != Some(tag)).then_some(State::Present { value, tag: Some(tag) })
            }
            Op::Get(None) => (state == State::Absent).then_some(state),
            Op::Get(Some((value, tag))) => state.shows(value, tag).then_some(State::Present { value, tag: Some(tag) }),
            Op::Delete { existed } => {
                let present = state != State::Absent;
                existed.is_none_or(|existed| existed == present).then_some(State::Absent)
            }
        }
    }

    /// The value a get returned, if it returned one.
    pub(crate) fn value_read(self) -> Option<Sym> {
        match self {
            Op::Get(Some((value, _))) => Some(value),
            _ => None,
        }
    }

    /// This operation as far as the results of any operation can tell, given the values some get
    /// returned (`read`): a put of a value none returned is like any other such put.
    pub(crate) fn as_seen(self, read: &HashSet<Sym>) -> Op {
        match self {
            Op::Put { value, tag } if !read.contains(&value) => Op::Put { value: UNREAD, tag },
            op => op,
        }
    }
}

/// The register's state, in the history's bytes and text.
#[derive(Clone, PartialEq, Eq)]
pub enum Register {
    /// No value.
    Absent,
    /// A value and its tag; `None` while unknown (written by a put of unknown outcome and not
    /// read since).
    Present {
        /// The value.
        value: Vec<u8>,
        /// Its tag, if known.
        tag: Option<String>,
    },
}

impl fmt::Display for Register {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Register::Absent => f.write_str("absent"),
            Register::Present { value, tag: Some(tag) } => write!(f, "{:?} tag {tag:?}", Text(value)),
            Register::Present { value, tag: None } => write!(f, "{:?} tag unknown", Text(value)),
        }
    }
}

impl fmt::Debug for Register {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Register::Absent => f.write_str("Absent"),
            Register::Present { value, tag } => {
                f.debug_struct("Present").field("value", &Text(value)).field("tag", tag).finish()
            }
        }
    }
}

/// Distinct items numbered in the order first seen.
struct Interner<'a, T: ?Sized> {
    ids: HashMap<&'a T, Sym>,
    items: Vec<&'a T>,
}

impl<'a, T: ?Sized + Hash + Eq> Interner<'a, T> {
    fn new() -> Self {
        Self { ids: HashMap::new(), items: Vec::new() }
    }

    fn intern(&mut self, item: &'a T) -> Sym {
        *self.ids.entry(item).or_insert_with(|| {
            self.items.push(item);
            self.items.len() - 1
        })
    }
}

/// The values and tags of one key's operations, interned.
pub(crate) struct Symbols<'a> {
    values: Interner<'a, [u8]>,
    tags: Interner<'a, str>,
}

impl<'a> Symbols<'a> {
    pub(crate) fn new() -> Self {
        Self { values: Interner::new(), tags: Interner::new() }
    }

    /// `operation` as the register sees it: `Ok(None)` for a get of unknown outcome (it
    /// constrains nothing), an error when its output is not the kind its input gets.
    pub(crate) fn op(&mut self, operation: &'a Operation) -> Result<Option<Op>, &'static str> {
        let output = operation.ret.as_ref().map(|(_, output)| output);
        Ok(Some(match (&operation.input, output) {
            (Input::Put(value), None) => Op::Put { value: self.values.intern(value), tag: None },
            (Input::Put(value), Some(Output::Put { tag })) => {
                Op::Put { value: self.values.intern(value), tag: Some(self.tags.intern(tag)) }
            }
            (Input::Get, None) => return Ok(None),
            (Input::Get, Some(Output::Got(None))) => Op::Get(None),
            (Input::Get, Some(Output::Got(Some((value, tag))))) => {
                Op::Get(Some((self.values.intern(value), self.tags.intern(tag))))
            }
            (Input::Delete, None) => Op::Delete { existed: None },
            (Input::Delete, Some(Output::Deleted { existed })) => Op::Delete { existed: Some(*existed) },
            (Input::Put(_), Some(_)) => return Err("a put's output is not Output::Put"),
            (Input::Get, Some(_)) => return Err("a get's output is not Output::Got"),
            (Input::Delete, Some(_)) => return Err("a delete's output is not Output::Deleted"),
        }))
    }

    /// `state` in the operations' bytes and text.
    pub(crate) fn register(&self, state: State) -> Register {
        match state {
            State::Absent => Register::Absent,
            State::Present { value, tag } => Register::Present {
                value: self.values.items[value].to_vec(),
                tag: tag.map(|tag| self.tags.items[tag].to_owned()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: Sym = 0;
    const W: Sym = 1;
    const T: Sym = 0;
    const U: Sym = 1;

    fn present(value: Sym, tag: Option<Sym>) -> State {
        State::Present { value, tag }
    }

    #[test]
    fn put_must_change_a_known_tag() {
        let put = Op::Put { value: W, tag: Some(T) };
        assert_eq!(put.apply(State::Absent), Some(present(W, Some(T))));
        assert_eq!(put.apply(present(V, Some(U))), Some(present(W, Some(T))));
        assert_eq!(put.apply(present(V, None)), Some(present(W, Some(T))));
        assert_eq!(put.apply(present(V, Some(T))), None);
    }

    #[test]
    fn put_of_unknown_outcome_leaves_the_tag_unknown() {
        let put = Op::Put { value: W, tag: None };
        assert_eq!(put.apply(present(V, Some(T))), Some(present(W, None)));
    }

    #[test]
    fn get_sees_the_state_and_fixes_an_unknown_tag() {
        assert_eq!(Op::Get(None).apply(State::Absent), Some(State::Absent));
        assert_eq!(Op::Get(None).apply(present(V, None)), None);
        let got = Op::Get(Some((V, T)));
        assert_eq!(got.apply(present(V, Some(T))), Some(present(V, Some(T))));
        assert_eq!(got.apply(present(V, None)), Some(present(V, Some(T))));
        assert_eq!(got.apply(present(V, Some(U))), None);
        assert_eq!(got.apply(present(W, Some(T))), None);
        assert_eq!(got.apply(State::Absent), None);
    }

    #[test]
    fn delete_reports_whether_the_key_existed() {
        let existed = Op::Delete { existed: Some(true) };
        let did_not = Op::Delete { existed: Some(false) };
        assert_eq!(existed.apply(present(V, None)), Some(State::Absent));
        assert_eq!(existed.apply(State::Absent), None);
        assert_eq!(did_not.apply(State::Absent), Some(State::Absent));
        assert_eq!(did_not.apply(present(V, Some(T))), None);
        assert_eq!(Op::Delete { existed: None }.apply(present(V, Some(T))), Some(State::Absent));
    }

    #[test]
    fn symbols_intern_and_give_back_bytes() {
        let put = |value: &[u8], tag: &str| Operation {
            client: 0,
            key: b"k".to_vec(),
            input: Input::Put(value.to_vec()),
            call: 0,
            ret: Some((1, Output::Put { tag: tag.into() })),
        };
        let (a, b, a_again) = (put(b"a", "t1"), put(b"b", "t2"), put(b"a", "t3"));
        let mut symbols = Symbols::new();
        let ops: Vec<_> = [&a, &b, &a_again].map(|op| symbols.op(op).unwrap().unwrap()).into();
        let values: Vec<_> = ops.iter().map(|op| if let Op::Put { value, .. } = op { *value } else { 99 }).collect();
        assert_eq!(values, [0, 1, 0]);
        let register = symbols.register(present(1, Some(2)));
        assert_eq!(register, Register::Present { value: b"b".to_vec(), tag: Some("t3".into()) });
        assert_eq!(register.to_string(), "\"b\" tag \"t3\"");
    }

    #[test]
    fn symbols_drop_unknown_gets_and_refuse_mismatched_outputs() {
        let mut op = Operation { client: 0, key: vec![], input: Input::Get, call: 0, ret: None };
        assert!(Symbols::new().op(&op).unwrap().is_none());
        op.ret = Some((1, Output::Deleted { existed: true }));
        assert!(Symbols::new().op(&op).is_err());
    }
}
