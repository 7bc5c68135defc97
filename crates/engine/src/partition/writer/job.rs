//! What a writer thread is sent ([`Job`]), which thread owns a partition ([`owner`]), and what
//! writers send the maintenance thread ([`Maintenance`]).

use rusqlite::Connection;

use super::{Adopt, Replicated};
use crate::{
    ops::{Op, Outcome},
    partition::{check, compact, snapshot},
    Error, Result,
};

/// Per-operation results of one request, or the error of its whole transaction.
pub type RequestResult = Result<Vec<Result<Outcome>>>;

/// Operations for one partition, committed together, answered together.
#[derive(Debug)]
pub struct WriteRequest {
    /// The partition all `ops` belong to.
    pub partition: u32,
    /// The operations with their keys' fingerprints, applied in order.
    pub ops: Vec<(Op, u32)>,
    /// Where the answer goes.
    pub reply: oneshot::Sender<RequestResult>,
}

/// Work for a writer thread. Every job names the `partition` it is for (one the thread owns);
/// a job with a `reply` answers there once done, with what its variant says.
#[derive(Debug)]
// `partition` and `reply` mean the same in every variant (said above); the variant's doc or the
// field's own says what any other field is.
#[allow(missing_docs)]
pub enum Job {
    /// Writes (and the reads of a batch) to group-commit.
    Write(WriteRequest),
    /// Forget tombstones up to `max_seq`: a merge has dropped their entries.
    ClearTombstones {
        partition: u32,
        /// Highest tombstone sequence the merge applied.
        max_seq: i64,
    },
    /// Rebuild the partition's index from SQLite.
    Rebuild { partition: u32, reply: oneshot::Sender<Result<()>> },
    /// Check the partition's SQLite file and index.
    Check { partition: u32, reply: oneshot::Sender<Result<check::PartitionCheck>> },
    /// Take a backup's snapshot of the partition through `conn` ([`snapshot::take`]).
    Snapshot {
        partition: u32,
        /// A read connection of the backup's, for the snapshot's read transaction.
        conn: Box<Connection>,
        reply: oneshot::Sender<Result<snapshot::Snapshot>>,
    },
    /// Compact the partition's database ([`compact::run`]).
    Compact { partition: u32, reply: oneshot::Sender<Result<compact::PartitionCompaction>> },
    /// Take `step`, one step of taking the partition in from another node ([`Adopt`]).
    Adopt { partition: u32, step: Adopt, reply: oneshot::Sender<Result<()>> },
    /// Start the notes of the ids each commit changes over, for a move copying the partition
    /// away ([`crate::partition::departure::Departure::track`]): between two rounds, so no
    /// commit escapes both the copy and the notes. Answered once noting has started.
    Track { partition: u32, reply: oneshot::Sender<Result<()>> },
    /// Freeze the recent index now (a forced merge); answers whether anything was frozen.
    Freeze { partition: u32, reply: oneshot::Sender<bool> },
    /// Commit the transaction kept open with answered writes, if one is: before a read that
    /// does not ask by key (a scan).
    Settle { partition: u32, reply: oneshot::Sender<Result<()>> },
    /// Apply the owner's transactions to this node's copy of the partition, in order
    /// ([`Replicated`]); a failure poisons the copy (and is the answer, if one is awaited).
    Replicated { partition: u32, txs: Vec<Replicated>, reply: Option<oneshot::Sender<Result<()>>> },
}

impl Job {
    /// The partition the job is for.
    pub fn partition(&self) -> u32 {
        match self {
            Job::Write(req) => req.partition,
            Job::ClearTombstones { partition, .. }
            | Job::Rebuild { partition, .. }
            | Job::Check { partition, .. }
            | Job::Snapshot { partition, .. }
            | Job::Compact { partition, .. }
            | Job::Adopt { partition, .. }
            | Job::Track { partition, .. }
            | Job::Freeze { partition, .. }
            | Job::Settle { partition, .. }
            | Job::Replicated { partition, .. } => *partition,
        }
    }

    /// Answers the job with `err` instead of running it: a freeze as nothing frozen, tombstones
    /// left for the next merge.
    pub fn refuse(self, err: &Error) {
        fn answer<T>(reply: oneshot::Sender<Result<T>>, err: &Error) {
            let _ = reply.send(Err(err.clone()));
        }
        match self {
            Job::Write(req) => answer(req.reply, err),
            Job::ClearTombstones { .. } => {}
            Job::Rebuild { reply, .. } | Job::Adopt { reply, .. } => answer(reply, err),
            Job::Track { reply, .. } | Job::Settle { reply, .. } => answer(reply, err),
            Job::Check { reply, .. } => answer(reply, err),
            Job::Snapshot { reply, .. } => answer(reply, err),
            Job::Compact { reply, .. } => answer(reply, err),
            Job::Freeze { reply, .. } => {
                let _ = reply.send(false);
            }
            Job::Replicated { reply, .. } => {
                if let Some(reply) = reply {
                    answer(reply, err);
                }
            }
        }
    }
}

/// The writer thread that owns partition `p` when there are `threads` of them.
pub fn owner(partition: u32, threads: usize) -> usize {
    partition as usize % threads.max(1)
}

/// Messages for the maintenance thread.
#[derive(Debug)]
pub enum Maintenance {
    /// Merge this partition's frozen index entries into its file.
    Merge(u32),
    /// Finish the merge under way and exit.
    Stop,
}
