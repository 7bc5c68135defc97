//! The maintenance thread, off the writers' path: merges partitions' frozen index entries into
//! their files, one at a time (merges are sequential I/O and must not compete with each other);
//! drops the commit log's segments once what they hold is durable elsewhere ([`CommitLog::trim`]),
//! looking every [`TRIM_EVERY`]; and after the store opens, reads each partition's index file into
//! RAM ([`crate::index::resident`]) whenever no other work waits. A merge that fails is retried a
//! few seconds later; lookups still see the frozen entries meanwhile.
//!
//! A merge forgets the entries of deleted records, so their deletes must be durable first: with
//! the commit log or at `synchronous = full` they are; at `normal` the merge syncs the WAL first.

use std::{
    collections::{BTreeSet, VecDeque},
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::{
    commitlog::CommitLog,
    index::{IndexPages, Tombstones},
    layout,
    partition::{
        sql,
        writer::{self, Job, Maintenance},
        Partition,
    },
    Result,
};

const RETRY_AFTER: Duration = Duration::from_secs(5);

/// How often the thread looks for commit log segments to drop.
pub const TRIM_EVERY: Duration = Duration::from_millis(500);

/// What the maintenance thread looks after.
pub struct Work {
    /// Every partition.
    pub partitions: Vec<Arc<Partition>>,
    /// The writer threads' queues.
    pub writers: Vec<Sender<Job>>,
    /// The commit log, if commits go through it.
    pub log: Option<Arc<CommitLog>>,
    /// Sync a partition's WAL before publishing a merge (`synchronous = normal`).
    pub sync_wal_before_merge: bool,
    /// The budget's part for index pages in RAM (`None`: none is kept).
    pub index_pages: Option<Arc<IndexPages>>,
}

/// Runs until told to stop (or every sender is gone).
pub fn run(jobs: Receiver<Maintenance>, work: Work) {
    let mut failed = BTreeSet::new();
    let mut trimmed = Instant::now();
    let mut to_load: VecDeque<&Arc<Partition>> = match &work.index_pages {
        Some(_) => work.partitions.iter().collect(),
        None => VecDeque::new(),
    };
    loop {
        let wait = match (&work.log, failed.is_empty()) {
            _ if !to_load.is_empty() => Duration::ZERO,
            (Some(_), _) => TRIM_EVERY,
            (None, false) => RETRY_AFTER,
            (None, true) => Duration::from_secs(3600),
        };
        match jobs.recv_timeout(wait) {
            Ok(Maintenance::Merge(p)) => {
                failed.remove(&p);
                if merge(&work.partitions[p as usize], &work.writers, work.sync_wal_before_merge).is_err() {
                    failed.insert(p);
                }
            }
            Ok(Maintenance::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => match (to_load.pop_front(), &work.index_pages) {
                (Some(partition), Some(pages)) => keep_index_in_ram(partition, pages),
                _ => failed.retain(|p| {
                    merge(&work.partitions[*p as usize], &work.writers, work.sync_wal_before_merge).is_err()
                }),
            },
        }
        if trimmed.elapsed() >= TRIM_EVERY {
            trimmed = Instant::now();
            trim(&work);
        }
    }
}

/// Reads one partition's index file into RAM, as far as the part has room.
fn keep_index_in_ram(partition: &Partition, pages: &Arc<IndexPages>) {
    if let Some(index) = &partition.index {
        index.keep_in_ram(Arc::clone(pages));
    }
}

/// Drops the commit log's segments that are no longer needed, if any, and keeps a spare
/// segment ready. Nothing is dropped while a partition is poisoned: its own files may not hold
/// what it committed (or answered: held writes), so the log keeps it for a restart. Asked again
/// once the writers' holds are read: a writer poisons a partition before it lets go of its hold.
fn trim(work: &Work) {
    let Some(log) = &work.log else { return };
    let healthy = || work.partitions.iter().all(|p| p.poisoned().is_none());
    if log.has_closed_segments() && healthy() {
        let durable = || healthy().then(|| work.partitions.iter().map(|p| p.durable()).collect());
        if let Err(err) = log.trim(durable) {
            tracing::error!(%err, "could not drop commit log segments; they are kept and retried");
        }
    }
    if let Err(err) = log.prepare_spare() {
        tracing::warn!(%err, "could not prepare a spare commit log segment; a switch will allocate one");
    }
}

/// Merges one partition's frozen entries into its index file and tells its writer which
/// tombstones are now applied. `sync_wal`: make the deletes behind the tombstones durable
/// before the file that forgets their entries is written.
pub fn merge(partition: &Partition, writers: &[Sender<Job>], sync_wal: bool) -> Result<()> {
    let Some(index) = &partition.index else { return Ok(()) };
    let started = Instant::now();
    let merged = index.merge(|| {
        let (ids, max_seq) = partition.readers.with(sql::tombstones)?;
        if sync_wal {
            layout::sync_file(&partition.wal_path)?;
        }
        Ok(Tombstones { ids: ids.into_iter().collect(), max_seq })
    });
    match merged {
        Ok(Some(tombstones)) => {
            partition.counters.merges.fetch_add(1, Ordering::Relaxed);
            let sizes = index.sizes();
            tracing::info!(
                partition = partition.id,
                entries = sizes.file_entries,
                bytes = sizes.file_bytes,
                dropped = tombstones.ids.len(),
                ms = started.elapsed().as_millis() as u64,
                "index merged"
            );
            if tombstones.max_seq > 0 {
                let writer = &writers[writer::owner(partition.id, writers.len())];
                let _ = writer.send(Job::ClearTombstones { partition: partition.id, max_seq: tombstones.max_seq });
            }
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(err) => {
            tracing::error!(partition = partition.id, %err, "index merge failed; will retry");
            Err(err)
        }
    }
}
