//! The maintenance thread: merges partitions' frozen index entries into their files, one at a
//! time (merges are sequential I/O and must not compete with each other), off the writers' path.
//! A merge that fails is retried a few seconds later; meanwhile lookups still see the frozen
//! entries, so nothing is lost, only RAM is held longer.

use std::{
    collections::BTreeSet,
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::{
    index::Tombstones,
    partition::{
        sql,
        writer::{self, Job, Maintenance},
        Partition,
    },
    Result,
};

const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Runs until told to stop (or every sender is gone).
pub fn run(jobs: Receiver<Maintenance>, partitions: Vec<Arc<Partition>>, writers: Vec<Sender<Job>>) {
    let mut failed = BTreeSet::new();
    loop {
        let wait = if failed.is_empty() { Duration::from_secs(3600) } else { RETRY_AFTER };
        match jobs.recv_timeout(wait) {
            Ok(Maintenance::Merge(p)) => {
                failed.remove(&p);
                if merge(&partitions[p as usize], &writers).is_err() {
                    failed.insert(p);
                }
            }
            Ok(Maintenance::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                failed.retain(|p| merge(&partitions[*p as usize], &writers).is_err());
            }
        }
    }
}

/// Merges one partition's frozen entries into its index file and tells its writer which
/// tombstones are now applied.
pub fn merge(partition: &Partition, writers: &[Sender<Job>]) -> Result<()> {
    let Some(index) = &partition.index else { return Ok(()) };
    let started = std::time::Instant::now();
    let merged = index.merge(|| {
        let (ids, max_seq) = partition.readers.with(sql::tombstones)?;
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
