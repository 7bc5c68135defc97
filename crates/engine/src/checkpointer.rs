//! The checkpointer thread: copies partitions' WALs into their databases off the writers' path.
//!
//! A checkpoint writes up to `checkpoint_pages` pages into the database and syncs the WAL before
//! and the database after (SQLite's protocol at `synchronous` NORMAL or FULL): milliseconds
//! of I/O. Run by a writer thread, it held up every partition that thread owns (measured: p99
//! of durable PUTs 22 ms with checkpoints on the writers, 9 ms without). So the writer only
//! notes, after a commit, that its partition's WAL passed the threshold ([`Checkpoints::want`]),
//! and this thread runs a `PASSIVE` checkpoint on a connection of its own, opened for that
//! checkpoint and closed after it (kept open, one per partition would hold memory the budget
//! gives to caches; an open costs far less than the checkpoint's I/O): SQLite lets a checkpoint run beside the one writer, which goes on
//! appending to the WAL meanwhile and restarts it at its next transaction once every frame is
//! copied. A writer that commits faster than a checkpoint takes appends frames during every one,
//! and the WAL would never start over (seen: 15 MB against a 64 KiB threshold, one partition
//! written in a loop). So when this thread's checkpoint leaves frames behind, the writer
//! finishes it between two transactions ([`Checkpoints::finish`]): it copies only what was
//! appended since, and nothing can be appended meanwhile. A failed checkpoint poisons its
//! partition (its own files may not hold what it committed; with the commit log, the log keeps
//! it for a restart).

use std::{
    sync::{atomic::Ordering, Arc},
    time::Instant,
};

use crossbeam_channel::{Receiver, Sender};
use rusqlite::Connection;

use crate::{
    partition::{sql, Partition},
    Config,
};

/// Work for the checkpointer.
#[derive(Debug)]
pub enum Job {
    /// Checkpoint this partition.
    Checkpoint(u32),
    /// Close the connections and exit.
    Stop,
}

/// The writers' handle: asks for checkpoints, each partition queued at most once at a time.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    jobs: Sender<Job>,
}

impl Checkpoints {
    /// A handle sending to `jobs`.
    pub fn new(jobs: Sender<Job>) -> Self {
        Self { jobs }
    }

    /// Asks for a checkpoint of `partition` if its WAL holds `threshold` pages or more and none
    /// is queued yet.
    pub fn want(&self, partition: &Partition, threshold: u32) {
        if partition.wal_pages() < threshold.max(1) || partition.checkpoint_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        if self.jobs.send(Job::Checkpoint(partition.id)).is_err() {
            // Closing: the writer's final checkpoint copies everything.
            partition.checkpoint_queued.store(false, Ordering::Release);
        }
    }

    /// Tells the thread to stop.
    pub fn stop(&self) {
        let _ = self.jobs.send(Job::Stop);
    }

    /// On the writer, between transactions: finishes the checkpoint this thread left
    /// unfinished, if it did, on the writer's connection `conn`.
    pub fn finish(partition: &Partition, conn: &Connection) {
        if !partition.checkpoint_unfinished.swap(false, Ordering::AcqRel) {
            return;
        }
        match sql::checkpoint_passive(conn) {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(partition = partition.id, "a reader holds old WAL frames: checkpoint again later")
            }
            Err(err) => partition.poison(format!("checkpoint failed: {err}")),
        }
    }
}

/// Runs checkpoints as they are asked for until told to stop.
pub fn run(jobs: Receiver<Job>, partitions: Vec<Arc<Partition>>, config: Config) {
    for job in jobs {
        let Job::Checkpoint(p) = job else { break };
        let partition = &partitions[p as usize];
        partition.checkpoint_queued.store(false, Ordering::Release);
        if partition.poisoned().is_some() {
            continue;
        }
        let started = Instant::now();
        let done = sql::open_checkpointer(&partition.db_path, &config).and_then(|conn| sql::checkpoint_passive(&conn));
        match done {
            Ok(complete) => {
                partition.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
                partition.checkpoint_unfinished.store(!complete, Ordering::Release);
                tracing::debug!(partition = p, complete, us = started.elapsed().as_micros() as u64, "checkpoint");
            }
            Err(err) => partition.poison(format!("checkpoint failed: {err}")),
        }
    }
}
