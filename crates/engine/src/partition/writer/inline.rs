//! Inline writes: a caller runs its partition's transaction itself, on its own thread, instead
//! of handing it to the partition's writer thread (two hand-overs and the writer thread's sleep
//! until the flush, which at a few connections cost more than the transaction itself).
//!
//! An inline write takes the partition's writer out of its [`Slot`](super::Slot) (only if it lies
//! there; else the write goes through the queue), runs the transaction up to its `COMMIT` and
//! appends it to the commit log as a round would, awaits the flush without blocking its thread
//! ([`CommitLog::durable`]), commits, answers, finishes any checkpoint the checkpointer left
//! unfinished (`Checkpoints::finish`) and puts the writer back. Nothing is visible before it is
//! durable. Only while few writes are under way (`inline_writes_below`), and not for a while
//! ([`COOL_DOWN`]) after one read the disk. Dropped unfinished (its caller gone), it still ends,
//! on a thread of its own.

use std::{
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use super::{
    partition_writer::{End, Prepared},
    PartitionWriter, RequestResult, WriteRequest, Writing,
};
use crate::{commitlog::CommitLog, ops::Op, Error, Result};

/// How long writes go through the writer threads after an inline transaction read the disk.
const COOL_DOWN: Duration = Duration::from_millis(100);

/// Everything a caller needs to run its partition's transaction itself.
pub struct Inline {
    /// What it shares with the writer threads.
    pub writing: Arc<Writing>,
    /// The shared commit log (`writing`'s, which inline writes need).
    pub log: Arc<CommitLog>,
    /// How many writer threads there are: the log's holds after theirs are the partitions'.
    pub threads: usize,
    /// How busy writes are.
    pub load: Load,
}

/// How many single writes are under way, and whether transactions ran long lately.
pub struct Load {
    /// Single writes under way, inline or queued.
    under_way: AtomicUsize,
    /// The clock of `cool_until`.
    born: Instant,
    /// Until when (µs after `born`) writes go through the writer threads.
    cool_until: AtomicU64,
}

impl Default for Load {
    fn default() -> Self {
        Self { under_way: AtomicUsize::new(0), born: Instant::now(), cool_until: AtomicU64::new(0) }
    }
}

impl Load {
    fn micros(&self) -> u64 {
        self.born.elapsed().as_micros() as u64
    }
}

/// A single write counted as under way until dropped.
pub struct UnderWay<'a> {
    load: &'a Load,
    /// Whether the write may run inline.
    pub may_inline: bool,
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        self.load.under_way.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Inline {
    /// Counts a single write as under way while the answer lives; it may run inline if fewer
    /// than `inline_writes_below` were, and no transaction ran long lately.
    pub fn enter(&self) -> UnderWay<'_> {
        let load = &self.load;
        let before = load.under_way.fetch_add(1, Ordering::Relaxed);
        let cool = load.micros() < load.cool_until.load(Ordering::Relaxed);
        UnderWay { load, may_inline: before < self.writing.config.inline_writes_below && !cool }
    }

    /// Runs `ops` (all of `partition`) on the calling thread if the partition's writer lies in
    /// its slot; else gives them back, to be queued.
    pub async fn write(
        &self,
        partition: u32,
        ops: Vec<(Op, u32)>,
    ) -> std::result::Result<RequestResult, Vec<(Op, u32)>> {
        let Some(writer) = self.writing.slots[partition as usize].try_take() else { return Err(ops) };
        let (reply, answer) = oneshot::channel();
        self.log.hold(self.hold(partition));
        let mut run = Run { inline: self, writer: Some(writer), prepared: None };
        let writer = run.writer.as_mut().expect("just taken");
        let request = WriteRequest { partition, ops, reply };
        let reads = disk_reads();
        let prepared = writer.prepare(vec![request], self.writing.config.transaction, Some(&self.log));
        if disk_reads() != reads {
            let load = &self.load;
            load.cool_until.store(load.micros() + COOL_DOWN.as_micros() as u64, Ordering::Relaxed);
        }
        let end = prepared.logged.map(|(_, end)| end);
        run.prepared = Some(prepared);
        let flushed = match end {
            Some(end) => self.log.durable(end).await,
            None => Ok(()),
        };
        run.finish(&flushed);
        Ok(answer.await.unwrap_or(Err(Error::Closed)))
    }

    /// The log's hold of `partition`'s inline writes (after the writer threads').
    fn hold(&self, partition: u32) -> usize {
        self.threads + partition as usize
    }
}

/// Blocks the calling thread has read from the disk so far (the engine reads its files with
/// `pread`, so a transaction that waited on the disk shows here).
fn disk_reads() -> i64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_THREAD).map_or(0, |u| u.block_reads())
}

/// An inline write under way: it ends (committed or rolled back, the writer put back) even if
/// its caller stops awaiting it.
struct Run<'a> {
    inline: &'a Inline,
    writer: Option<PartitionWriter>,
    prepared: Option<Prepared>,
}

impl Run<'_> {
    /// Commits (or rolls back, if `flushed` failed) and answers, then puts the writer back.
    fn finish(&mut self, flushed: &Result<()>) {
        let Some(writer) = self.writer.take() else { return };
        let hold = self.inline.hold(writer.partition.id);
        finish(&self.inline.writing, &self.inline.log, hold, writer, self.prepared.take(), flushed);
    }
}

/// Commits `prepared` (or rolls it back, if `flushed` failed) and answers, then puts `writer`
/// back and releases the log's `hold`.
fn finish(
    writing: &Writing,
    log: &CommitLog,
    hold: usize,
    mut writer: PartitionWriter,
    prepared: Option<Prepared>,
    flushed: &Result<()>,
) {
    if let Some(prepared) = prepared {
        writer.complete(prepared, flushed, writing, End::Commit);
        writing.metrics.record_inline();
        writer.after_commit(writing);
    }
    let partition = writer.partition.id;
    writing.slots[partition as usize].put(writer);
    log.release(hold);
}

impl Drop for Run<'_> {
    /// Its caller stopped awaiting it (an HTTP client gone): it ends on a thread of its own.
    /// Not on this one: dropped on an async runtime's thread, a wait for the log there could
    /// hold up what the wait needs (with replicas, the copies' answers come through that
    /// runtime), and the runtime with it.
    fn drop(&mut self) {
        let Some(writer) = self.writer.take() else { return };
        let prepared = self.prepared.take();
        let (writing, log) = (Arc::clone(&self.inline.writing), Arc::clone(&self.inline.log));
        let hold = self.inline.hold(writer.partition.id);
        let ending = move || {
            let flushed = match prepared.as_ref().and_then(|p| p.logged) {
                Some((_, end)) => log.wait_durable(end),
                None => Ok(()),
            };
            finish(&writing, &log, hold, writer, prepared, &flushed);
        };
        on_own_thread(ending);
    }
}

/// Runs `end` on a thread of its own; here if none can be had (it must run: the writer goes back
/// to its slot). Handed over once the thread runs, so that it is still here then.
fn on_own_thread<F: FnOnce() + Send + 'static>(end: F) {
    let (hand, taken) = std::sync::mpsc::channel::<F>();
    let spawned = std::thread::Builder::new().name("shardlite-ending".into()).spawn(move || {
        if let Ok(end) = taken.recv() {
            end();
        }
    });
    let refused = match spawned {
        Ok(_) => hand.send(end).err().map(|std::sync::mpsc::SendError(end)| end),
        Err(err) => {
            tracing::warn!(%err, "ending an abandoned write on the runtime's thread");
            Some(end)
        }
    };
    if let Some(end) = refused {
        end();
    }
}
