//! The lookup threads and their queue: reads for callers that must not block
//! (`Store::submit_get`), and warming reads asked for by writer threads.
//!
//! A warming read ([`warm`]) reads a record a writer's round is about to read, side by side with
//! the round's other records, so on cold data the device serves them at once and the writer finds
//! their pages in the page cache. It answers nobody, fills the record cache like any read, and is
//! dropped when the queue is full.
//!
//! How many threads: `lookup_threads`, or with 0 (the default) [`threads_for`] the disk under the
//! data directory: on cold data each thread waits on one read, and they keep the device's queue busy.
//!
//! [`warm`]: LookupQueue::warm

use std::{
    path::Path,
    sync::{Arc, Mutex, RwLock},
    thread::JoinHandle,
};

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

use crate::{inline_reads::InlineReads, ops::Record, Error, Result};

/// Lookup threads when the disk's queue depth cannot be read (no block device under the data
/// directory: tmpfs, overlay): what the rule gives a virtio disk's 128.
const UNKNOWN_DEVICE_THREADS: usize = 32;
/// The fewest and the most lookup threads sized from the disk.
const DEVICE_THREADS: std::ops::RangeInclusive<usize> = 8..=64;

/// Lookup threads for a store in `dir`: `configured`, or with 0, sized from the disk under it.
pub fn threads_for(dir: &Path, configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    shardlite_proc::block::queue_depth_for_path(dir).map_or(UNKNOWN_DEVICE_THREADS, |depth| {
        (depth as usize / 4).clamp(*DEVICE_THREADS.start(), *DEVICE_THREADS.end())
    })
}

/// What a lookup answers.
pub type Answer = Result<Option<Record>>;

/// How a lookup thread reads a key the record cache missed.
pub type Read = Arc<dyn Fn(&[u8]) -> Answer + Send + Sync>;

/// A read for the lookup threads: answered through `reply`, or a warming read (none).
struct LookupJob {
    key: Vec<u8>,
    reply: Option<oneshot::Sender<Answer>>,
}

/// The lookup threads' queue, shared by the store and its writer threads; closed by the store.
pub struct LookupQueue {
    queue: RwLock<Option<Sender<LookupJob>>>,
    jobs: Receiver<LookupJob>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Whether reads find their pages in memory (then they need no warming).
    reads: Arc<InlineReads>,
}

impl LookupQueue {
    /// A queue of `capacity` jobs, served by no thread until [`LookupQueue::start`]; `reads`
    /// tells whether reads are fast.
    pub fn new(capacity: usize, reads: Arc<InlineReads>) -> Arc<Self> {
        let (queue, jobs) = bounded(capacity);
        Arc::new(Self { queue: RwLock::new(Some(queue)), jobs, threads: Mutex::new(Vec::new()), reads })
    }

    /// Starts `threads` threads that serve each job with `read` (the record cache missed).
    pub fn start(
        &self,
        threads: usize,
        read: Read,
        spawn: impl Fn(String, Box<dyn FnOnce() + Send>) -> Result<JoinHandle<()>>,
    ) -> Result<()> {
        let mut started = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        for i in 0..threads {
            let (jobs, read) = (self.jobs.clone(), Arc::clone(&read));
            started.push(spawn(
                format!("shardlite-lookup-{i}"),
                Box::new(move || {
                    for job in jobs {
                        let answer = read(&job.key);
                        if let Some(reply) = job.reply {
                            let _ = reply.send(answer);
                        }
                    }
                }),
            )?);
        }
        Ok(())
    }

    /// Queues a read of `key`; its answer arrives on the returned receiver. Fails with
    /// `Overloaded` (naming `partition_of(key)`) when the queue is full, `Closed` once closed.
    pub fn submit(&self, key: Vec<u8>, partition_of: impl Fn(&[u8]) -> u32) -> Result<oneshot::Receiver<Answer>> {
        let (reply, rx) = oneshot::channel();
        let queue = self.queue.read().unwrap_or_else(|p| p.into_inner());
        let Some(queue) = queue.as_ref() else { return Err(Error::Closed) };
        match queue.try_send(LookupJob { key, reply: Some(reply) }) {
            Ok(()) => Ok(rx),
            Err(TrySendError::Full(job)) => Err(Error::Overloaded { partition: partition_of(&job.key) }),
            Err(TrySendError::Disconnected(_)) => Err(Error::Closed),
        }
    }

    /// Queues a warming read of `key`, unless the queue is full or closed, or reads find their
    /// pages in memory: then the writer's own read is as fast, and a warming read would only
    /// cost two thread wake-ups (with new keys, 5% of a durable insert's CPU, measured with
    /// `perf`).
    pub fn warm(&self, key: &[u8]) {
        if self.reads.allowed() {
            return;
        }
        if let Some(queue) = self.queue.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = queue.try_send(LookupJob { key: key.to_vec(), reply: None });
        }
    }

    /// Jobs waiting.
    pub fn queued(&self) -> usize {
        self.jobs.len()
    }

    /// Refuses new jobs, lets the threads finish the queued ones, and waits for them.
    pub fn close(&self) {
        drop(self.queue.write().unwrap_or_else(|p| p.into_inner()).take());
        let threads: Vec<_> = self.threads.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_kept_and_zero_is_sized_from_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(threads_for(dir.path(), 5), 5);
        let sized = threads_for(dir.path(), 0);
        assert!(DEVICE_THREADS.contains(&sized), "{sized}");
        match shardlite_proc::block::queue_depth_for_path(dir.path()) {
            Some(depth) => assert_eq!(sized, (depth as usize / 4).clamp(8, 64)),
            None => assert_eq!(sized, UNKNOWN_DEVICE_THREADS),
        }
    }
}
