//! A writer thread ([`WriterThread`]) and its rounds. A round: block for the first job, drain
//! whatever else waits (up to `max_batch`, lingering up to `max_linger`); run each partition's
//! requests in one transaction up to its `COMMIT`, appending it to the commit log; wait once for
//! the log to be durable (one flush, shared with the other threads' rounds under way); then
//! commit each transaction (visible to readers only now) and answer every waiter, each with its
//! own results, or all with the transaction's error.
//!
//! With the commit log a partition's transaction may stay open for up to `hold_groups` of its
//! groups, [`HOLD_AT_MOST`] and `hold_kib` of RAM at most: their writes are answered once the log
//! holds them, and held ([`crate::partition::held`]), and one `COMMIT` ends them all. The
//! partition's writer stays with the thread meanwhile (inline writes queue), and the thread
//! commits it before any other job for it, when no job comes for [`SETTLE_IDLE`], and before it
//! stops. Not while a move copies the partition away (the move reads what each commit changed),
//! nor without an index to read by key.
//!
//! ```text
//! callers --try_send--> [queue, bounded] --> writer thread: per partition BEGIN; ops...
//!                                              --> commit log: append; one flush per round
//!                                              --> per partition COMMIT --> replies
//!                                                  \--(index passed merge threshold)--> maintenance
//! ```

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::{
    partition_writer::{End, PartitionWriter, Prepared},
    Job, WriteRequest, Writing,
};
use crate::{
    checkpointer,
    config::IndexMode,
    lookups::LookupQueue,
    partition::{check, compact, snapshot, sql},
};

/// How long a thread with transactions kept open waits for a job before it commits them.
const SETTLE_IDLE: Duration = Duration::from_millis(2);

/// How long a thread whose answered writes wait to be applied again (their `COMMIT` failed for
/// want of disk space) waits for a job before it tries again.
const RETRY_UNAPPLIED: Duration = Duration::from_secs(1);

/// How long a transaction is kept open at most, whatever its groups. At 256 partitions and
/// 40,000 writes a second, sixteen groups of a partition come within about 100 ms.
const HOLD_AT_MOST: Duration = Duration::from_millis(100);

/// A writer thread: its queue, its partitions, and what it shares with the others.
pub struct WriterThread {
    /// The thread's number (partition `p` belongs to thread `p % writer_threads`).
    number: usize,
    /// The thread's queue.
    jobs: Receiver<Job>,
    /// The partitions this thread owns.
    owned: Vec<u32>,
    /// The writers this thread has checked out of their slots: with held writes, most of its
    /// partitions' under writes that never stop.
    out: Vec<PartitionWriter>,
    /// Per partition of the store, where its writer is in `out` ([`NOT_OUT`] if it is not).
    out_at: Vec<usize>,
    /// What it shares with the other writer threads and inline writes.
    writing: Arc<Writing>,
    /// The lookup threads, which read a round's records side by side (`warm`).
    lookups: Arc<LookupQueue>,
}

/// `WriterThread::out_at` of a partition whose writer is not checked out.
const NOT_OUT: usize = usize::MAX;

impl WriterThread {
    /// Writer thread `number`, serving `owned` from `jobs`.
    pub fn new(
        number: usize,
        jobs: Receiver<Job>,
        owned: Vec<u32>,
        writing: Arc<Writing>,
        lookups: Arc<LookupQueue>,
    ) -> Self {
        let out_at = vec![NOT_OUT; writing.slots.len()];
        Self { number, jobs, owned, out: Vec::new(), out_at, writing, lookups }
    }

    /// Serves jobs until every sender is gone, then checkpoints its partitions and hands their
    /// writers back (open: the store closes them once the session is marked closed).
    pub fn run(mut self) -> Vec<PartitionWriter> {
        while let Some(first) = self.next_job() {
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

    /// The next job, waiting as long as it takes; with transactions kept open, they are
    /// committed first if none comes within [`SETTLE_IDLE`] ([`RETRY_UNAPPLIED`] if one waits to
    /// be applied again). `None` once every sender is gone.
    fn next_job(&mut self) -> Option<Job> {
        while self.out.iter().any(|w| w.keeps()) {
            let wait = match self.out.iter().any(|w| w.unapplied()) {
                true => RETRY_UNAPPLIED,
                false => SETTLE_IDLE,
            };
            match self.jobs.recv_timeout(wait) {
                Ok(job) => return Some(job),
                Err(RecvTimeoutError::Timeout) => self.settle_all(),
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
        self.jobs.recv().ok()
    }

    /// Commits every transaction kept open and puts their writers back, releasing the log as
    /// far as nothing answered waits for SQLite ([`PartitionWriter::settle`] says what a failed
    /// `COMMIT` leaves).
    fn settle_all(&mut self) {
        let writing = Arc::clone(&self.writing);
        for writer in &mut self.out {
            let _ = writer.settle(&writing);
        }
        self.put_back();
        self.hold_log(true);
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
        let p = partition as usize;
        if self.out_at[p] == NOT_OUT {
            self.out_at[p] = self.out.len();
            self.out.push(self.writing.slots[p].take());
        }
        &mut self.out[self.out_at[p]]
    }

    /// Puts back the writers checked out, but those whose answered writes are not in SQLite yet.
    fn put_back(&mut self) {
        let mut at = 0;
        while at < self.out.len() {
            if self.out[at].keeps() {
                at += 1;
                continue;
            }
            let writer = self.out.swap_remove(at);
            self.out_at[writer.partition.id as usize] = NOT_OUT;
            if let Some(moved) = self.out.get(at) {
                self.out_at[moved.partition.id as usize] = at;
            }
            self.writing.slots[writer.partition.id as usize].put(writer);
        }
    }

    /// How a partition's group ends: its transaction kept open while the log makes it durable,
    /// the partition can be read by key and no move copies it away, for `hold_groups` groups,
    /// [`HOLD_AT_MOST`] and `hold_kib` at most (a transaction past it commits with its next
    /// group; a group that writes nothing starts none).
    fn end_of(writer: &PartitionWriter, group: &Prepared, writing: &Writing) -> End {
        let partition = &writer.partition;
        let may_keep = writing.log.is_some() && partition.mode != IndexMode::None && !partition.departure.tracking();
        if !may_keep {
            return End::Commit;
        }
        let (bytes, most) = (group.bytes(), (writing.config.hold_kib << 10) as usize);
        let room = match writer.holding() {
            None => writing.config.hold_groups > 1 && bytes > 0 && bytes <= most,
            Some(h) => {
                h.groups + 1 < writing.config.hold_groups && h.bytes + bytes <= most && h.began.elapsed() < HOLD_AT_MOST
            }
        };
        match room {
            true => End::Keep,
            false => End::Commit,
        }
    }

    /// Commits the transactions kept open for [`HOLD_AT_MOST`].
    fn settle_due(&mut self) {
        let (writing, now) = (Arc::clone(&self.writing), Instant::now());
        for writer in &mut self.out {
            if writer.holding().is_some_and(|h| now.duration_since(h.began) >= HOLD_AT_MOST) {
                let _ = writer.settle(&writing);
            }
        }
    }

    /// Holds the commit log for this round: from its end now, or from the first record of the
    /// oldest transaction kept open; with none kept and `round_over`, releases it.
    fn hold_log(&self, round_over: bool) {
        let Some(log) = &self.writing.log else { return };
        match self.out.iter().filter_map(|w| w.kept_from()).min() {
            Some(from) => log.hold_from(self.number, from),
            None if round_over => log.release(self.number),
            None => log.hold(self.number),
        }
    }

    /// Commits one round: each partition's requests in one transaction, all run up to their
    /// `COMMIT` first; then, with a commit log, one wait for the log to be durable past every
    /// record of the round (one flush, shared with the other writer threads' rounds); then each
    /// transaction commits and its requests are answered, and a checkpoint of its partition asked
    /// for or its recent index frozen if due.
    ///
    /// A transaction kept open ([`WriterThread::end_of`]) is answered without its `COMMIT`; the
    /// thread's hold on the log then lasts until none is kept.
    fn commit_round(&mut self, groups: Vec<(u32, Vec<WriteRequest>)>) {
        let writing = Arc::clone(&self.writing);
        let (tx_mode, log) = (writing.config.transaction, writing.log.as_deref());
        self.hold_log(false);
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
        if let (Some(log), Some(end)) = (log, prepared.iter().filter_map(|(_, p)| p.logged.map(|(_, end)| end)).max()) {
            // One wait for the whole round; each group's outcome is then its own record's.
            let _ = log.wait_durable(end);
        }
        for (partition, group) in prepared {
            // The round's records may have gone out in more than one flush, and the copies may
            // have refused one shipment and taken the next: a group is answered as its own
            // record's shipment went (at once: the wait above covered it).
            let flushed = match (log, group.logged) {
                (Some(log), Some((_, end))) => log.wait_durable(end),
                _ => Ok(()),
            };
            let writer = self.writer(partition);
            let end = Self::end_of(writer, &group, &writing);
            writer.complete(group, &flushed, &writing, end);
            if writer.holding().is_none() {
                writer.after_commit(&writing);
            }
        }
        self.settle_due();
        self.hold_log(true);
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

    /// Runs a control job, the partition's transaction kept open committed first; refused if the
    /// partition's files lack writes it answered (a failed `COMMIT` poisoned it).
    fn control(&mut self, job: Job) {
        let writing = Arc::clone(&self.writing);
        if let Err(err) = self.writer(job.partition()).settle(&writing) {
            return job.refuse(&err);
        }
        match job {
            Job::Write(_) => unreachable!("writes are grouped, not controlled"),
            Job::Settle { reply, .. } => {
                let _ = reply.send(Ok(()));
            }
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
                let _ = reply.send(Ok(()));
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
        self.settle_all();
        for writer in self.out.iter().filter(|w| w.unapplied()) {
            // Its answered writes are in the commit log only: the close must keep the log.
            writer.partition.poison("closing with answered writes not applied for want of disk space".into());
        }
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
