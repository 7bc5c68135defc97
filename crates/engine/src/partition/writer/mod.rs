//! Writer threads and group commit. A partition's writer (its read-write connection and
//! counters) lies in a [`Slot`]; the writer thread owning the partition (partition `p` belongs to
//! thread `p % writer_threads`) takes it out for a round or a control job, and between rounds a
//! single write may take it and run inline on its caller's thread. With the commit log, nothing
//! a transaction wrote is visible before the log holds it durably. A failed commit (other than
//! a full disk) or a panic poisons the partition.
//!
//! - `job`: what a writer thread is sent ([`Job`]), and which thread owns a partition ([`owner`])
//! - `partition_writer`: one partition's writer ([`PartitionWriter`]): its transaction, commit, apply
//! - `thread`: a writer thread and its rounds of group commit ([`WriterThread`])
//! - `inline`: a single write run on its caller's thread ([`Inline`])
//! - `adopt`: a partition taken in from another node ([`Adopt`])

mod adopt;
mod inline;
mod job;
mod partition_writer;
mod replicated;
mod thread;

use std::sync::Arc;

use crossbeam_channel::Sender;

pub use adopt::Adopt;
pub use inline::{Inline, Load};
pub use job::{owner, Job, Maintenance, RequestResult, WriteRequest};
pub use partition_writer::{PartitionWriter, Slot};
pub use replicated::Replicated;
pub use thread::WriterThread;

use crate::{cache::RecordCache, checkpointer::Checkpoints, commitlog::CommitLog, metrics::Metrics, Config};

/// What the writer threads and inline writes share: where each partition's writer lies, and
/// what a commit goes through and reports to.
pub struct Writing {
    /// Every partition's writer slot.
    pub slots: Vec<Slot>,
    /// The shared commit log, when commits are made durable by it.
    pub log: Option<Arc<CommitLog>>,
    /// Store-wide counters.
    pub metrics: Arc<Metrics>,
    /// The store's record cache, which commits invalidate.
    pub cache: Option<Arc<RecordCache>>,
    /// Where checkpoints are asked for.
    pub checkpoints: Checkpoints,
    /// Where partitions whose recent index passed the threshold are sent.
    pub maintenance: Sender<Maintenance>,
    /// The store's configuration.
    pub config: Config,
}
