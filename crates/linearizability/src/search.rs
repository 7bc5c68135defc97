//! The search for a linearization of one key's operations: Porcupine's (after Lowe), with the
//! operations of unknown outcome kept out of its list.
//!
//! The operations of known outcome are entries in a list, calls and returns in time order. The
//! search walks it: at a call whose operation the register accepts in its current state, and
//! where that leads somewhere not seen before, it linearizes the operation (lifts its entries
//! out) and starts again from the first entry; at a return (an operation that had to take effect
//! by then and has not) it tries the operations of unknown outcome called by then, then
//! backtracks: it puts back the last operation linearized and goes on after it. It has found a
//! linearization once the list is empty (what is left of unknown outcome takes effect after
//! everything, or never), and there is none once it backtracks with nothing left to put back.
//!
//! Porcupine gives an operation of unknown outcome a return after every other entry, so that its
//! search tries each such operation everywhere and in every combination: proving a violation
//! late in a long history takes time exponential in their number. Four rules cut that down while
//! keeping a linearization within reach whenever there is one (each order they skip can be
//! rewritten into one they keep):
//! - an operation of unknown outcome is tried only once the known calls have been;
//! - never two in a row: the second leaves the same state with or without the first, which may
//!   as well take effect after everything;
//! - of those that no result can tell apart (deletes; puts of values no get returned; puts of the
//!   same value), the earliest called is used first;
//! - the cache prunes a state reached with the same known operations linearized and the same
//!   register as one seen before, and a superset of its operations of unknown outcome: whatever
//!   follows from there could follow from the other, the extra ones left for the end.

use std::collections::{HashMap, HashSet};

use crate::{
    bitset::BitSet,
    list::EntryList,
    model::{Op, State, Sym},
};

/// An operation with the times of its call and return (`None`: unknown outcome, no return).
pub(crate) struct Timed {
    pub(crate) call: u64,
    pub(crate) ret: Option<u64>,
    pub(crate) op: Op,
}

/// What a search found.
#[derive(Debug, PartialEq)]
pub(crate) enum Found {
    /// An order of the operations that respects real time and explains every result.
    Linearization,
    /// No such order: the longest prefix of one the search built (operations' indices, in
    /// order) and the state after it.
    Nothing { longest: Vec<usize>, state: State },
    /// The step budget ran out first.
    OutOfSteps,
}

/// Searches `ops` for a linearization, in at most `budget` steps; also says how many it took.
pub(crate) fn search(ops: &[Timed], budget: u64) -> (Found, u64) {
    let mut search = Search::new(ops);
    let mut next = search.restart();
    let mut steps = 0;
    loop {
        let cursor = match next {
            Next::At(cursor) => cursor,
            Next::Linearized => return (Found::Linearization, steps),
            Next::Stuck => return (Found::Nothing { longest: search.longest, state: search.longest_state }, steps),
        };
        if steps == budget {
            return (Found::OutOfSteps, steps);
        }
        steps += 1;
        next = search.step(cursor);
    }
}

/// For each operation of `ops` at `slots`, the slot of the last one before it with the same
/// effect on every result.
fn twins_before(ops: &[Timed], slots: &[usize]) -> Vec<Option<usize>> {
    let read: HashSet<Sym> = ops.iter().filter_map(|op| op.op.value_read()).collect();
    let mut last = HashMap::new();
    slots.iter().enumerate().map(|(slot, &op)| last.insert(ops[op].op.as_seen(&read), slot)).collect()
}

/// Where the search looks.
#[derive(Clone, Copy)]
enum Cursor {
    /// An entry of the list.
    Entry(usize),
    /// The operation of unknown outcome at `slot` (by call time); `frontier` is the time of the
    /// list's first return, before which an operation must have been called to take effect now.
    Unknown { slot: usize, frontier: u64 },
}

/// What the search does after a step.
enum Next {
    At(Cursor),
    Linearized,
    Stuck,
}

/// An operation linearized: where the search found it, and the state before it.
struct Frame {
    cursor: Cursor,
    state: State,
}

/// The search's state.
struct Search<'a> {
    ops: &'a [Timed],
    list: EntryList,
    /// The operations of unknown outcome, by call time.
    unknown: Vec<usize>,
    /// For each of those, the slot of the last one before it that no result could tell from it.
    twin_before: Vec<Option<usize>>,
    /// The operations of known outcome linearized.
    known_done: BitSet,
    /// The operations of unknown outcome linearized, by slot in `unknown`.
    unknown_done: BitSet,
    /// For each pair (known operations linearized, state) reached, the sets of operations of
    /// unknown outcome linearized with it.
    seen: HashMap<(BitSet, State), Vec<BitSet>>,
    frames: Vec<Frame>,
    state: State,
    longest: Vec<usize>,
    longest_state: State,
}

impl<'a> Search<'a> {
    fn new(ops: &'a [Timed]) -> Self {
        let known = ops.iter().enumerate().filter_map(|(i, op)| op.ret.map(|ret| (i, op.call, ret)));
        let mut unknown: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].ret.is_none()).collect();
        unknown.sort_by_key(|&i| ops[i].call);
        Self {
            ops,
            list: EntryList::new(known),
            twin_before: twins_before(ops, &unknown),
            known_done: BitSet::new(ops.len()),
            unknown_done: BitSet::new(unknown.len()),
            unknown,
            seen: HashMap::new(),
            frames: Vec::new(),
            state: State::Absent,
            longest: Vec::new(),
            longest_state: State::Absent,
        }
    }

    /// The list's first entry, or done when no entry is left.
    fn restart(&self) -> Next {
        self.list.first().map_or(Next::Linearized, |entry| Next::At(Cursor::Entry(entry)))
    }

    fn step(&mut self, cursor: Cursor) -> Next {
        match cursor {
            Cursor::Entry(entry) if self.list.is_call(entry) => {
                if self.enter(cursor) {
                    self.restart()
                } else {
                    Next::At(Cursor::Entry(self.list.after_call(entry)))
                }
            }
            Cursor::Entry(_) if self.after_unknown() => self.backtrack(),
            Cursor::Entry(entry) => Next::At(Cursor::Unknown { slot: 0, frontier: self.list.time(entry) }),
            Cursor::Unknown { slot, frontier } => match self.unknown.get(slot) {
                Some(&op) if self.ops[op].call <= frontier => {
                    if self.may_enter_unknown(slot) && self.enter(cursor) {
                        self.restart()
                    } else {
                        Next::At(Cursor::Unknown { slot: slot + 1, frontier })
                    }
                }
                _ => self.backtrack(),
            },
        }
    }

    /// Whether the last operation linearized is of unknown outcome: then no other such operation
    /// is worth trying next (the state after the second is the same with or without the first).
    fn after_unknown(&self) -> bool {
        matches!(self.frames.last(), Some(Frame { cursor: Cursor::Unknown { .. }, .. }))
    }

    /// Whether the operation of unknown outcome at `slot` may be linearized now: it is not yet,
    /// nor is a twin called before it (twins are used in call order: any order of them could be
    /// swapped for that one).
    fn may_enter_unknown(&self, slot: usize) -> bool {
        !self.unknown_done.contains(slot) && self.twin_before[slot].is_none_or(|twin| self.unknown_done.contains(twin))
    }

    /// Linearizes the operation at `cursor` if the register accepts it and that leads somewhere
    /// no state seen before covers; whether it did.
    fn enter(&mut self, cursor: Cursor) -> bool {
        let Some(state) = self.ops[self.op_at(cursor)].op.apply(self.state) else { return false };
        self.mark(cursor, true);
        if !self.unseen(state) {
            self.mark(cursor, false);
            return false;
        }
        self.frames.push(Frame { cursor, state: self.state });
        self.state = state;
        if let Cursor::Entry(call) = cursor {
            self.list.lift(call);
        }
        self.note_longest();
        true
    }

    /// Puts back the last operation linearized and moves past it; stuck when there is none.
    fn backtrack(&mut self) -> Next {
        let Some(Frame { cursor, state }) = self.frames.pop() else { return Next::Stuck };
        self.mark(cursor, false);
        self.state = state;
        Next::At(match cursor {
            Cursor::Entry(call) => {
                self.list.unlift(call);
                Cursor::Entry(self.list.after_call(call))
            }
            Cursor::Unknown { slot, frontier } => Cursor::Unknown { slot: slot + 1, frontier },
        })
    }

    /// Records that the current sets of operations linearized lead to `state`, unless a state
    /// already seen covers it: the same known operations and register, with a subset of the
    /// unknown ones. Whether it was not covered.
    fn unseen(&mut self, state: State) -> bool {
        let covering = self.seen.entry((self.known_done.clone(), state)).or_default();
        if covering.iter().any(|done| done.is_subset(&self.unknown_done)) {
            return false;
        }
        covering.push(self.unknown_done.clone());
        true
    }

    fn op_at(&self, cursor: Cursor) -> usize {
        match cursor {
            Cursor::Entry(entry) => self.list.op(entry),
            Cursor::Unknown { slot, .. } => self.unknown[slot],
        }
    }

    /// Marks the operation at `cursor` linearized, or not.
    fn mark(&mut self, cursor: Cursor, done: bool) {
        let (set, member) = match cursor {
            Cursor::Entry(entry) => (&mut self.known_done, self.list.op(entry)),
            Cursor::Unknown { slot, .. } => (&mut self.unknown_done, slot),
        };
        if done {
            set.insert(member);
        } else {
            set.remove(member);
        }
    }

    fn note_longest(&mut self) {
        if self.frames.len() > self.longest.len() {
            self.longest = self.frames.iter().map(|frame| self.op_at(frame.cursor)).collect();
            self.longest_state = self.state;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: u64 = 1_000_000;

    fn put(call: u64, ret: Option<u64>, value: usize, tag: usize) -> Timed {
        Timed { call, ret, op: Op::Put { value, tag: ret.map(|_| tag) } }
    }

    fn get(call: u64, ret: u64, seen: Option<(usize, usize)>) -> Timed {
        Timed { call, ret: Some(ret), op: Op::Get(seen) }
    }

    #[test]
    fn an_empty_history_is_linearizable() {
        assert_eq!(search(&[], BIG), (Found::Linearization, 0));
    }

    #[test]
    fn overlapping_operations_may_take_effect_in_either_order() {
        let ops = [get(0, 10, Some((0, 0))), put(1, Some(5), 0, 0)];
        assert_eq!(search(&ops, BIG).0, Found::Linearization);
    }

    #[test]
    fn a_read_before_the_write_was_called_has_no_linearization() {
        let ops = [put(0, Some(1), 0, 0), get(2, 3, Some((1, 1))), put(4, Some(5), 1, 1)];
        let (found, _) = search(&ops, BIG);
        let longest = vec![0];
        assert_eq!(found, Found::Nothing { longest, state: State::Present { value: 0, tag: Some(0) } });
    }

    #[test]
    fn a_put_of_unknown_outcome_may_take_effect_late_or_never() {
        let late = [put(0, None, 0, 0), get(1, 2, None), get(3, 4, Some((0, 7)))];
        assert_eq!(search(&late, BIG).0, Found::Linearization);
        let never = [put(0, None, 0, 0), get(1, 2, None), get(3, 4, None)];
        assert_eq!(search(&never, BIG).0, Found::Linearization);
        let too_early = [get(0, 1, Some((0, 7))), put(2, None, 0, 0)];
        assert_eq!(search(&too_early, BIG).0, Found::Nothing { longest: vec![], state: State::Absent });
    }

    #[test]
    fn operations_of_unknown_outcome_called_at_a_return_may_take_effect_before_it() {
        let ops = [put(0, Some(1), 0, 0), get(1, 2, Some((1, 7))), put(2, None, 1, 0)];
        assert_eq!(search(&ops, BIG).0, Found::Linearization);
        let later = [put(0, Some(1), 0, 0), get(1, 2, Some((1, 7))), put(3, None, 1, 0)];
        assert!(matches!(search(&later, BIG).0, Found::Nothing { .. }));
    }

    #[test]
    fn a_put_of_unknown_outcome_can_explain_a_delete() {
        let delete = |existed| Timed { call: 1, ret: Some(2), op: Op::Delete { existed: Some(existed) } };
        assert_eq!(search(&[put(0, None, 0, 0), delete(true)], BIG).0, Found::Linearization);
        assert_eq!(search(&[put(0, None, 0, 0), delete(false)], BIG).0, Found::Linearization);
        assert!(matches!(search(&[delete(true)], BIG).0, Found::Nothing { .. }));
    }

    #[test]
    fn many_operations_of_unknown_outcome_before_a_violation_are_searched_quickly() {
        let unknown_delete = |call| Timed { call, ret: None, op: Op::Delete { existed: None } };
        let mut ops: Vec<Timed> = (0..40).map(|i| put(i, None, 1000 + i as usize, 0)).collect();
        ops.extend((0..20).map(unknown_delete));
        for i in 0..30 {
            let time = 100 + 10 * i;
            ops.push(put(time, Some(time + 5), i as usize, i as usize));
            ops.push(get(time + 2, time + 8, Some((i as usize, i as usize))));
        }
        ops.push(get(1000, 1001, Some((3, 3))));
        let (found, steps) = search(&ops, BIG);
        assert!(matches!(found, Found::Nothing { .. }), "{found:?}");
        assert!(steps < 100_000, "{steps} steps");
    }

    #[test]
    fn the_budget_bounds_the_steps() {
        let ops = [put(0, Some(1), 0, 0), get(2, 3, Some((0, 0)))];
        let (_, steps) = search(&ops, BIG);
        assert_eq!(search(&ops, steps), (Found::Linearization, steps));
        assert_eq!(search(&ops, steps - 1), (Found::OutOfSteps, steps - 1));
    }
}
