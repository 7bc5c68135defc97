//! Recording a history while clients run, from any number of threads or async tasks at once:
//! each operation is noted when called, with the time since the history began, and completed
//! when it returns; one never completed has an unknown outcome.

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Instant,
};

use crate::operation::{Input, Operation, Output};

/// A history being recorded; clones record into the same one.
#[derive(Clone, Debug)]
pub struct History {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    origin: Instant,
    operations: Mutex<Vec<Operation>>,
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

impl History {
    /// An empty history whose times count from now.
    pub fn new() -> Self {
        Self { inner: Arc::new(Inner { origin: Instant::now(), operations: Mutex::new(Vec::new()) }) }
    }

    /// Records that `client` calls `input` on `key` now; call this before sending the request,
    /// and [`Pending::returned`] once the answer is in.
    pub fn call(&self, client: u64, key: impl Into<Vec<u8>>, input: Input) -> Pending {
        let operation = Operation { client, key: key.into(), input, call: self.now(), ret: None };
        let mut operations = self.lock();
        operations.push(operation);
        Pending { history: self.clone(), index: operations.len() - 1 }
    }

    /// The operations recorded so far, in the order they were called; those still pending have
    /// an unknown outcome.
    pub fn operations(&self) -> Vec<Operation> {
        self.lock().clone()
    }

    /// Nanoseconds since the history began.
    fn now(&self) -> u64 {
        u64::try_from(self.inner.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Operation>> {
        self.inner.operations.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An operation called and not yet answered. Dropped without [`returned`](Self::returned), its
/// outcome stays unknown.
#[derive(Debug)]
#[must_use = "an operation never returned has an unknown outcome"]
pub struct Pending {
    history: History,
    index: usize,
}

impl Pending {
    /// Records that the operation returned `output` now.
    pub fn returned(self, output: Output) {
        let time = self.history.now();
        self.history.lock()[self.index].ret = Some((time, output));
    }

    /// Records that the operation's outcome is unknown (an error or a timeout: it may or may not
    /// have taken effect); the same as dropping it.
    pub fn unknown(self) {}
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;

    #[test]
    fn history_is_shared_between_threads() {
        fn shareable<T: Send + Sync + Clone + 'static>() {}
        shareable::<History>();
        let history = History::new();
        let threads: Vec<_> = (0..4)
            .map(|client| {
                let history = history.clone();
                thread::spawn(move || {
                    for i in 0..25 {
                        let value = format!("{client}-{i}").into_bytes();
                        let pending = history.call(client, "k", Input::Put(value));
                        pending.returned(Output::Put { tag: format!("t{client}-{i}") });
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let operations = history.operations();
        assert_eq!(operations.len(), 100);
        assert!(operations.iter().all(|op| op.ret.as_ref().is_some_and(|(ret, _)| *ret >= op.call)));
    }

    #[test]
    fn an_operation_not_returned_has_an_unknown_outcome() {
        let history = History::new();
        history.call(1, "a", Input::Get).unknown();
        drop(history.call(2, "b", Input::Delete));
        let put = history.call(3, "c", Input::Put(b"v".to_vec()));
        assert!(history.operations().iter().all(|op| op.ret.is_none()));
        put.returned(Output::Put { tag: "t".into() });
        let operations = history.operations();
        assert_eq!(operations.iter().map(|op| op.client).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(operations[2].ret.as_ref().map(|(_, output)| output), Some(&Output::Put { tag: "t".into() }));
        assert!(operations[0].call <= operations[1].call && operations[1].call <= operations[2].call);
    }
}
