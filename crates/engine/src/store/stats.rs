//! The store's figures ([`Store::stats`]): [`StoreStats`], one [`PartitionStats`] per partition
//! and the memory budget's [`MemoryStats`].

use std::{path::Path, sync::atomic::Ordering};

use crossbeam_channel::Sender;
use serde::{Deserialize, Serialize};

use super::Store;
use crate::{
    cache::CacheStats,
    commitlog::LogStats,
    manifest::Manifest,
    memory::{self, MemoryPlan},
    metrics::MetricsSnapshot,
};

impl Store {
    /// Sizes, counts and health of every partition, and the writers' counters.
    pub fn stats(&self) -> StoreStats {
        let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len());
        let partitions: Vec<PartitionStats> = self
            .shared
            .partitions
            .iter()
            .map(|p| {
                let index = p.index.as_ref().map(|i| i.sizes()).unwrap_or_default();
                PartitionStats {
                    partition: p.id,
                    records: p.counters.records.load(Ordering::Relaxed),
                    db_bytes: size(&p.db_path),
                    wal_bytes: size(&p.wal_path),
                    index_bytes: index.file_bytes,
                    index_file_entries: index.file_entries,
                    index_recent_entries: index.recent_entries,
                    commits: p.counters.commits.load(Ordering::Relaxed),
                    ops: p.counters.ops.load(Ordering::Relaxed),
                    merges: p.counters.merges.load(Ordering::Relaxed),
                    checkpoints: p.counters.checkpoints.load(Ordering::Relaxed),
                    readers_open: p.readers.open_connections(),
                    poisoned: p.poisoned(),
                }
            })
            .collect();
        let queue_depths =
            self.shared.writers.read().unwrap_or_else(|p| p.into_inner()).iter().map(Sender::len).collect();
        let lookup_queue_depth = self.lookups.queued();
        let record_cache = self.shared.cache.as_ref().map(|c| c.stats());
        let recent_entries: u64 = partitions.iter().map(|p: &PartitionStats| p.index_recent_entries).sum();
        let memory = MemoryStats {
            plan: self.memory,
            record_cache_bytes: record_cache.map_or(0, |c| c.bytes),
            recent_index_bytes: recent_entries * memory::RECENT_ENTRY_BYTES,
            index_pages_bytes: self.index_pages.used(),
        };
        StoreStats {
            memory,
            log: self.log.as_ref().map(|log| log.stats()),
            lookup_queue_depth,
            inline_reads: self.shared.inline_reads.count(),
            record_cache,
            data_dir: self.layout.dir().display().to_string(),
            manifest: self.manifest.clone(),
            partitions,
            queue_depths,
            writers: self.metrics.snapshot(),
        }
    }
}

/// One partition's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartitionStats {
    /// The partition.
    pub partition: u32,
    /// Live records.
    pub records: u64,
    /// Bytes of the SQLite database file.
    pub db_bytes: u64,
    /// Bytes of its WAL.
    pub wal_bytes: u64,
    /// Bytes of the index file.
    pub index_bytes: u64,
    /// Entries in the index file.
    pub index_file_entries: u64,
    /// Index entries in RAM, not yet merged.
    pub index_recent_entries: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Operations committed.
    pub ops: u64,
    /// Index merges completed since open.
    pub merges: u64,
    /// WAL checkpoints run by the writer since open.
    pub checkpoints: u64,
    /// Read connections open.
    pub readers_open: usize,
    /// Why writes are refused, if they are.
    pub poisoned: Option<String>,
}

/// The whole store's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoreStats {
    /// The data directory.
    pub data_dir: String,
    /// Its manifest.
    pub manifest: Manifest,
    /// Each partition.
    pub partitions: Vec<PartitionStats>,
    /// Jobs waiting in each writer thread's queue.
    pub queue_depths: Vec<usize>,
    /// Reads waiting for the lookup threads.
    pub lookup_queue_depth: usize,
    /// Reads that missed the record cache and ran on their caller's thread rather than a
    /// lookup thread, since start (`crate::inline_reads`).
    #[serde(default)]
    pub inline_reads: u64,
    /// The record cache's hits, misses and size (`None`: no cache).
    pub record_cache: Option<CacheStats>,
    /// Commit counters and the requests-per-commit histogram.
    pub writers: MetricsSnapshot,
    /// The commit log's figures (`None`: commits do not go through it).
    pub log: Option<LogStats>,
    /// The memory budget, its parts and what each holds now.
    pub memory: MemoryStats,
}

/// The memory budget's parts and what each holds now, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MemoryStats {
    /// The budget and its parts.
    pub plan: MemoryPlan,
    /// What the record cache's entries are charged for.
    pub record_cache_bytes: u64,
    /// What the recent index entries of all partitions cost.
    pub recent_index_bytes: u64,
    /// Index files' pages held in RAM.
    pub index_pages_bytes: u64,
}

impl StoreStats {
    /// The sum over the partitions of one of their figures.
    pub fn sum(&self, figure: fn(&PartitionStats) -> u64) -> u64 {
        self.partitions.iter().map(figure).sum()
    }
}
