//! Opening a data directory, in the order that keeps every promise, for the store and for the
//! bulk loader alike:
//!
//! 1. take the directory's lock ([`DirLock::acquire`]);
//! 2. read the commit log ([`Recovery::read`]): what each partition may have to replay;
//! 3. check the WALs (unless the log keeps a base and judges them), start a new epoch if the
//!    last session did not close, forget it ([`DirLock::begin`]);
//! 4. open every partition: each replays what its database lacks, and says how far into the log
//!    it has applied and whether commits known durable were lost (an accepted loss);
//! 5. after an accepted loss, start a new epoch (written before anything is served);
//! 6. make the replayed state durable, drop the old segments, keep or remove the base file
//!    ([`commitlog::finish_recovery`]);
//! 7. start a new log past every position used so far, if commits go through it.
//!
//! The caller then starts its threads and marks the session open ([`DirLock::opened`]).

use crate::{
    commitlog::{self, CommitLog, Durable, Recovery},
    dirlock::DirLock,
    layout::Layout,
    partition::recovery::PartitionLog,
    Config, Manifest, Result,
};

/// A directory opened: its lock, its partitions as the caller opened them, and the commit log.
pub struct Opened<T> {
    /// The directory's lock, session not yet marked open.
    pub lock: DirLock,
    /// What the caller's `open` returned for each partition, in order.
    pub parts: Vec<T>,
    /// The new commit log, if `use_log`.
    pub log: Option<CommitLog>,
}

/// What opening one partition says: the caller's value, how far its database is (the commit
/// log position it applied, its next record id), and whether a loss of durable commits was
/// accepted.
pub type OpenedPartition<T> = (T, Durable, bool);

/// Opens the directory of `layout` (whose `manifest` may get a new epoch) with `config`: each
/// of the manifest's partitions through `open`, given what the log holds for it. With `use_log`, starts a commit
/// log with a hold for each of `writers` writer threads and each partition (its inline writes).
pub fn open_directory<T>(
    layout: &Layout,
    config: &Config,
    manifest: &mut Manifest,
    use_log: bool,
    writers: usize,
    mut open: impl FnMut(u32, PartitionLog<'_>) -> Result<OpenedPartition<T>>,
) -> Result<Opened<T>> {
    let mut lock = DirLock::acquire(layout)?;
    let partitions = manifest.partitions;
    let recovery = Recovery::read(layout, partitions)?;
    lock.begin(layout, config, manifest, recovery.base.is_none())?;
    let mut parts = Vec::with_capacity(partitions as usize);
    let mut durable = Vec::with_capacity(partitions as usize);
    let mut lost = false;
    for p in 0..partitions {
        let log =
            PartitionLog { txs: &recovery.txs[p as usize], base: recovery.base.as_ref().map(|base| base[p as usize]) };
        let (part, at, lost_here) = open(p, log)?;
        parts.push(part);
        durable.push(at);
        lost |= lost_here;
    }
    if lost {
        manifest.start_epoch();
        manifest.write(&layout.manifest())?;
    }
    let start = durable.iter().map(|d| d.applied).fold(recovery.end, u64::max);
    commitlog::finish_recovery(layout, &recovery, &durable, start, use_log)?;
    let log = if use_log {
        Some(CommitLog::start(layout, &recovery, start, config.log_segment_mib << 20, writers + partitions as usize)?)
    } else {
        None
    };
    Ok(Opened { lock, parts, log })
}
