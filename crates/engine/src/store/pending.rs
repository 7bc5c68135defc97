//! The answers a caller waits for: [`Pending`] (a queued write), [`PendingGet`] (a queued read) and
//! [`PendingBatch`]. Each is both blockable (`wait`) and awaitable, so an async server can await
//! commits without blocking its runtime.

use std::{
    future::{Future, IntoFuture},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use crate::{
    ops::{Outcome, Record},
    partition::{writer::RequestResult, Partition},
    Error, Result,
};

/// A reply channel: blocking until first polled, then async; or an answer known at once.
#[derive(Debug)]
pub(super) enum Reply<T> {
    Ready(T),
    Blocking(oneshot::Receiver<T>),
    Async(oneshot::AsyncReceiver<T>),
    Done,
}

impl<T> Reply<T> {
    /// Blocks for the answer; `Err` if the sender was dropped.
    fn wait(&mut self) -> std::result::Result<T, ()> {
        match std::mem::replace(self, Reply::Done) {
            Reply::Ready(answer) => Ok(answer),
            Reply::Blocking(rx) => rx.recv().map_err(|_| ()),
            Reply::Async(_) | Reply::Done => panic!("a reply is either awaited or waited for, not both"),
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<T, ()>> {
        loop {
            match std::mem::replace(self, Reply::Done) {
                Reply::Ready(answer) => return Poll::Ready(Ok(answer)),
                Reply::Blocking(rx) => *self = Reply::Async(rx.into_future()),
                Reply::Async(mut rx) => {
                    return match Pin::new(&mut rx).poll(cx) {
                        Poll::Ready(result) => Poll::Ready(result.map_err(|_| ())),
                        Poll::Pending => {
                            *self = Reply::Async(rx);
                            Poll::Pending
                        }
                    }
                }
                Reply::Done => panic!("a reply polled after it resolved"),
            }
        }
    }
}

/// The answer to one queued operation, once its transaction commits.
#[derive(Debug)]
#[must_use = "a write is only known to be committed once its Pending resolves"]
pub struct Pending {
    reply: Reply<RequestResult>,
    partition: Arc<Partition>,
}

impl Pending {
    pub(super) fn new(rx: oneshot::Receiver<RequestResult>, partition: Arc<Partition>) -> Self {
        Self { reply: Reply::Blocking(rx), partition }
    }

    /// Blocks until the transaction holding this operation has committed (or failed).
    pub fn wait(self) -> Result<Outcome> {
        single(self.wait_all())
    }

    fn wait_all(mut self) -> RequestResult {
        let result = self.reply.wait();
        all(result, &self.partition)
    }

    fn poll_all(&mut self, cx: &mut Context<'_>) -> Poll<RequestResult> {
        self.reply.poll(cx).map(|result| all(result, &self.partition))
    }
}

impl Future for Pending {
    type Output = Result<Outcome>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.poll_all(cx).map(single)
    }
}

/// The answer to a queued read.
#[derive(Debug)]
#[must_use = "a read's answer arrives through its PendingGet"]
pub struct PendingGet(pub(super) Reply<Result<Option<Record>>>);

impl PendingGet {
    /// Blocks for the record.
    pub fn wait(mut self) -> Result<Option<Record>> {
        self.0.wait().unwrap_or(Err(Error::Closed))
    }
}

impl Future for PendingGet {
    type Output = Result<Option<Record>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.poll(cx).map(|r| r.unwrap_or(Err(Error::Closed)))
    }
}

fn all(result: std::result::Result<RequestResult, ()>, partition: &Partition) -> RequestResult {
    // A dropped reply means the writer died: the partition is poisoned, or the store closed.
    result.unwrap_or_else(|()| Err(partition.poison_error().unwrap_or(Error::Closed)))
}

pub(super) fn single(result: RequestResult) -> Result<Outcome> {
    result?.pop().expect("one operation, one outcome")
}

/// The answers to a queued batch.
#[derive(Debug)]
#[must_use = "a batch is only known to be committed once it resolves"]
pub struct PendingBatch {
    /// Operations in the batch.
    pub(super) len: usize,
    /// Each partition's share: the operations' places in the batch, and its pending answer.
    pub(super) groups: Vec<(Vec<usize>, Result<Pending>)>,
}

impl PendingBatch {
    /// Blocks until every partition's part has committed; results in the batch's order.
    pub fn wait(self) -> Vec<Result<Outcome>> {
        let mut out: Vec<Result<Outcome>> = (0..self.len).map(|_| Err(Error::Closed)).collect();
        for (slots, pending) in self.groups {
            let results = pending.and_then(Pending::wait_all);
            scatter(&mut out, &slots, results);
        }
        out
    }

    /// Awaits every partition's part; results in the batch's order.
    pub async fn resolve(self) -> Vec<Result<Outcome>> {
        let mut out: Vec<Result<Outcome>> = (0..self.len).map(|_| Err(Error::Closed)).collect();
        for (slots, pending) in self.groups {
            let results = match pending {
                Ok(mut p) => std::future::poll_fn(|cx| p.poll_all(cx)).await,
                Err(e) => Err(e),
            };
            scatter(&mut out, &slots, results);
        }
        out
    }
}

fn scatter(out: &mut [Result<Outcome>], slots: &[usize], results: RequestResult) {
    match results {
        Ok(results) => {
            for (slot, result) in slots.iter().zip(results) {
                out[*slot] = result;
            }
        }
        Err(err) => {
            for slot in slots {
                out[*slot] = Err(err.clone());
            }
        }
    }
}
