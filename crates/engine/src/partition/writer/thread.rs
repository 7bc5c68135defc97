//! A writer thread ([`WriterThread`]) and its rounds. A round: block for the first job, drain
//! whatever else waits (up to `max_batch`, lingering up to `max_linger`); run each partition's
//! requests in one transaction up to its `COMMIT`, appending it to the commit log; wait once for
//! the log to be durable (one flush, shared with the other threads' rounds under way); then
//! commit each transaction (visible to readers only now) and answer every waiter, each with its
//! own results, or all with the transaction's error.
//!
//! ```text
//! callers --try_send--> [queue, bounded] --> writer thread: per partition BEGIN; ops...
//!                                              --> commit log: append; one flush per round
//!                                              --> per partition COMMIT --> replies
//!                                                  \--(index passed merge threshold)--> maintenance
//! ```

use std::{sync::Arc, time::Instant};

use crossbeam_channel::Receiver;

use super::{
    partition_writer::{PartitionWriter, Prepared},
    Job, WriteRequest, Writing,
};
use crate::{
    checkpointer,
    lookups::LookupQueue,
    partition::{check, compact, snapshot, sql},
};

/// A writer thread: its queue, its partitions, and what it shares with the others.
pub struct WriterThread {
    /// The thread's number (partition `p` belongs to thread `p % writer_threads`).
    pub number: usize,
    /// The thread's queue.
    pub jobs: Receiver<Job>,
    /// The partitions this thread owns.
    pub owned: Vec<u32>,
    /// The writers this thread has checked out of their slots.
    pub out: Vec<PartitionWriter>,
    /// What it shares with the other writer threads and inline writes.
    pub writing: Arc<Writing>,
    /// The lookup threads, which read a round's records side by side (`warm`).
    pub lookups: Arc<LookupQueue>,
}

impl WriterThread {
    /// Serves jobs until every sender is gone, then checkpoints its partitions and hands their
    /// writers back (open: the store closes them once the session is marked closed).
    pub fn run(mut self) -> Vec<PartitionWriter> {
        while let Ok(first) = self.jobs.recv() {
            let jobs = self.drain(first);
            let mut groups: Vec<(u32, Vec<WriteRequest>)> = Vec::new();
            for job in jobs {
                match job {
                    Job::Write(req) => match groups.iter_mut().find(|(p, _)| *p == req.partition) {
                        Some((_, group)) => group.push(req),
                        None => groups.push((req.partition, vec![req])),
                    },
                    control => self.control(control),
                }
            }
            self.commit_round(groups);
            self.put_back();
        }
        self.checkpoint_all()
    }

    /// The first job and whatever else is already waiting (or arrives within the linger).
    fn drain(&self, first: Job) -> Vec<Job> {
        let mut jobs = vec![first];
        let deadline = Instant::now() + self.writing.config.max_linger();
        while jobs.len() < self.writing.config.max_batch {
            let next = match self.jobs.try_recv() {
                Ok(job) => Ok(job),
                Err(_) if self.writing.config.max_linger_us > 0 => self.jobs.recv_deadline(deadline).map_err(|_| ()),
                Err(_) => Err(()),
            };
            match next {
                Ok(job) => jobs.push(job),
                Err(()) => break,
            }
        }
        jobs
    }

    fn writer(&mut self, partition: u32) -> &mut PartitionWriter {
        let at = match self.out.iter().position(|w| w.partition.id == partition) {
            Some(at) => at,
            None => {
                self.out.push(self.writing.slots[partition as usize].take());
                self.out.len() - 1
            }
        };
        &mut self.out[at]
    }

    fn put_back(&mut self) {
        for writer in self.out.drain(..) {
            let id = writer.partition.id;
            self.writing.slots[id as usize].put(writer);
        }
    }

    /// Commits one round: each partition's requests in one transaction, all run up to their
    /// `COMMIT` first; then, with a commit log, one wait for the log to be durable past every
    /// record of the round (one flush, shared with the other writer threads' rounds); then each
    /// transaction commits and its requests are answered, and a checkpoint of its partition asked
    /// for or its recent index frozen if due.
    fn commit_round(&mut self, groups: Vec<(u32, Vec<WriteRequest>)>) {
        let writing = Arc::clone(&self.writing);
        let (tx_mode, log) = (writing.config.transaction, writing.log.as_deref());
        if let Some(log) = log {
            log.hold(self.number);
        }
        // Every index page the round needs is asked for at once, so that on cold data the
        // device reads them side by side while the first transactions run.
        for (partition, reqs) in &groups {
            self.writer(*partition).prefetch(reqs);
        }
        self.warm(&groups);
        let prepared: Vec<(u32, Prepared)> = groups
            .into_iter()
            .map(|(partition, reqs)| (partition, self.writer(partition).prepare(reqs, tx_mode, log)))
            .collect();
        let flushed = match (log, prepared.iter().filter_map(|(_, p)| p.logged.map(|(_, end)| end)).max()) {
            (Some(log), Some(end)) => log.wait_durable(end),
            _ => Ok(()),
        };
        for (partition, group) in prepared {
            let writer = self.writer(partition);
            writer.complete(group, &flushed, &writing);
            writer.after_commit(&writing);
        }
        if let Some(log) = log {
            log.release(self.number);
        }
    }

    /// Has the lookup threads read, side by side, the records that a partition's transaction of
    /// several writes will read one after another: all but its first key (which this thread
    /// reads at once itself), unless the record cache holds them (then their pages were read
    /// lately). On cold data the transaction then finds them in the page cache.
    fn warm(&self, groups: &[(u32, Vec<WriteRequest>)]) {
        for (_, reqs) in groups {
            let keys = reqs.iter().flat_map(|r| r.ops.iter().map(|(op, _)| op.key())).skip(1);
            for key in keys.filter(|key| self.writing.cache.as_ref().is_none_or(|c| !c.holds(key))) {
                self.lookups.warm(key);
            }
        }
    }

    fn control(&mut self, job: Job) {
        match job {
            Job::Write(_) => unreachable!("writes are grouped, not controlled"),
            Job::ClearTombstones { partition, max_seq } => {
                if let Err(err) = sql::clear_tombstones(&self.writer(partition).conn, max_seq) {
                    tracing::warn!(partition, %err, "could not clear tombstones; the next merge will");
                }
            }
            Job::Rebuild { partition, reply } => {
                let _ = reply.send(self.writer(partition).rebuild());
            }
            Job::Check { partition, reply } => {
                let writer = self.writer(partition);
                let _ = reply.send(check::run(&writer.partition, &writer.conn, writer.hasher));
            }
            Job::Snapshot { partition, conn, reply } => {
                let writer = self.writer(partition);
                let _ = reply.send(snapshot::take(&writer.partition, &writer.conn, *conn));
            }
            Job::Compact { partition, reply } => {
                let writing = Arc::clone(&self.writing);
                let writer = self.writer(partition);
                let _ = reply.send(compact::run(&writer.partition, &writer.conn, &writing.config));
            }
            Job::Adopt { partition, step, reply } => {
                let writing = Arc::clone(&self.writing);
                let writer = self.writer(partition);
                let adopted = writer.adopt(step, writing.log.as_deref(), writing.cache.as_deref(), &writing.config);
                // A partition taken in fills its WAL as writes would: checkpointed the same way.
                writing
                    .checkpoints
                    .want(&writer.partition, checkpointer::threshold(&writing.config, writer.partition.id));
                let _ = reply.send(adopted);
            }
            Job::Track { partition, reply } => {
                self.writer(partition).partition.departure.track();
                let _ = reply.send(());
            }
            Job::Replicated { partition, txs, reply } => {
                let writing = Arc::clone(&self.writing);
                let writer = self.writer(partition);
                let applied = writer.apply_replicated(&txs, writing.cache.as_deref());
                if let Err(err) = &applied {
                    writer.partition.poison(format!("applying the owner's transactions failed: {err}"));
                }
                writer.after_commit(&writing);
                if let Some(reply) = reply {
                    let _ = reply.send(applied);
                }
            }
            Job::Freeze { partition, reply } => {
                let froze = self.writer(partition).partition.index.as_ref().is_some_and(|i| i.freeze_if(1));
                let _ = reply.send(froze);
            }
        }
    }

    /// Copies every partition's WAL into its database and empties it, before the close.
    fn checkpoint_all(mut self) -> Vec<PartitionWriter> {
        for p in self.owned.clone() {
            self.writer(p);
        }
        for writer in &self.out {
            writer.partition.readers.close_idle();
            checkpointer::at_close(&writer.partition, &writer.conn, &self.writing.config);
        }
        self.out
    }
}
