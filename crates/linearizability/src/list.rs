//! The search's entries: the call and the return of each operation with a known outcome, in time
//! order, in a doubly linked list through indices so that an operation's pair of entries can be
//! lifted out and put back in constant time (put back in the reverse order of lifting, as the
//! search's backtracking does).

/// No entry: the end of the list.
const NIL: usize = usize::MAX;
/// The index of the list's head, before its first entry.
const HEAD: usize = 0;

/// One call or return.
#[derive(Clone, Copy)]
struct Entry {
    op: usize,
    time: u64,
    /// For a call, its return's index; for a return, `NIL`.
    ret: usize,
    prev: usize,
    next: usize,
}

/// A call or a return, before linking.
struct Event {
    time: u64,
    op: usize,
    is_return: bool,
}

/// The entries not lifted out, in time order after a head.
pub(crate) struct EntryList {
    entries: Vec<Entry>,
}

impl EntryList {
    /// The list of the calls and returns of operations `(op, call, ret)`: in time order, a call
    /// before a return at the same time (operations that only touch overlap).
    pub(crate) fn new(ops: impl IntoIterator<Item = (usize, u64, u64)>) -> Self {
        let mut events: Vec<Event> = ops
            .into_iter()
            .flat_map(|(op, call, ret)| {
                [Event { time: call, op, is_return: false }, Event { time: ret, op, is_return: true }]
            })
            .collect();
        events.sort_by_key(|event| (event.time, event.is_return, event.op));
        Self::linked(&events)
    }

    fn linked(events: &[Event]) -> Self {
        let head = Entry { op: NIL, time: 0, ret: NIL, prev: NIL, next: NIL };
        let mut entries = vec![head; events.len() + 1];
        let mut call_of = vec![NIL; events.iter().map(|event| event.op + 1).max().unwrap_or(0)];
        for (i, event) in events.iter().enumerate() {
            let index = i + 1;
            entries[index] = Entry { op: event.op, time: event.time, ret: NIL, prev: index - 1, next: NIL };
            entries[index - 1].next = index;
            if event.is_return {
                entries[call_of[event.op]].ret = index;
            } else {
                call_of[event.op] = index;
            }
        }
        Self { entries }
    }

    /// The first entry, `None` once every operation is lifted out.
    pub(crate) fn first(&self) -> Option<usize> {
        Some(self.entries[HEAD].next).filter(|&next| next != NIL)
    }

    /// The entry after the call `call`: there is one, at the latest its return.
    pub(crate) fn after_call(&self, call: usize) -> usize {
        self.entries[call].next
    }

    /// Whether `entry` is a call, not a return.
    pub(crate) fn is_call(&self, entry: usize) -> bool {
        self.entries[entry].ret != NIL
    }

    /// The operation `entry` is a call or a return of.
    pub(crate) fn op(&self, entry: usize) -> usize {
        self.entries[entry].op
    }

    /// When `entry` happened.
    pub(crate) fn time(&self, entry: usize) -> u64 {
        self.entries[entry].time
    }

    /// Takes out the call `call` and its return.
    pub(crate) fn lift(&mut self, call: usize) {
        self.unlink(call);
        self.unlink(self.entries[call].ret);
    }

    /// Puts back the call `call` and its return, the last pair lifted out.
    pub(crate) fn unlift(&mut self, call: usize) {
        self.relink(self.entries[call].ret);
        self.relink(call);
    }

    fn unlink(&mut self, entry: usize) {
        let Entry { prev, next, .. } = self.entries[entry];
        self.entries[prev].next = next;
        if next != NIL {
            self.entries[next].prev = prev;
        }
    }

    fn relink(&mut self, entry: usize) {
        let Entry { prev, next, .. } = self.entries[entry];
        self.entries[prev].next = entry;
        if next != NIL {
            self.entries[next].prev = entry;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list's entries from the head: `(op, is_call, time)`.
    fn walk(list: &EntryList) -> Vec<(usize, bool, u64)> {
        let next = |&entry: &usize| Some(list.entries[entry].next).filter(|&next| next != NIL);
        std::iter::successors(list.first(), next)
            .map(|entry| (list.op(entry), list.is_call(entry), list.time(entry)))
            .collect()
    }

    #[test]
    fn entries_are_in_time_order_with_calls_before_returns() {
        let list = EntryList::new([(0, 5, 9), (3, 1, 5), (2, 2, 5)]);
        let expected = [(3, true, 1), (2, true, 2), (0, true, 5), (2, false, 5), (3, false, 5), (0, false, 9)];
        assert_eq!(walk(&list), expected);
    }

    #[test]
    fn lift_and_unlift_restore_the_list() {
        let mut list = EntryList::new([(0, 0, 3), (1, 1, 2), (2, 4, 5)]);
        let before = walk(&list);
        let second_call = list.after_call(list.first().unwrap());
        list.lift(second_call);
        assert_eq!(walk(&list), [(0, true, 0), (0, false, 3), (2, true, 4), (2, false, 5)]);
        let first_call = list.first().unwrap();
        list.lift(first_call);
        assert_eq!(walk(&list), [(2, true, 4), (2, false, 5)]);
        list.unlift(first_call);
        list.unlift(second_call);
        assert_eq!(walk(&list), before);
    }
}
