//! [`RecordCache`]: records read recently, kept in RAM (`record_cache_mib`), so that reading a
//! hot key costs a hash-map probe on the caller's thread instead of an index page, a SQLite
//! read and two thread hand-offs. Eviction is `quick_cache`'s (S3-FIFO, weighted by bytes).
//!
//! The cache holds only what SQLite holds, and a reader never sees a key go back in time. Only
//! reads fill it; only writers change what it may hold, through a per-partition generation used
//! like a sequence lock: odd while a commit is under way (the keys it wrote removed first), and a
//! read fills the cache only if the generation is the same even number it saw before it read
//! SQLite. Tested below and in `tests/cache.rs` (concurrent readers and writers).
//!
//! A full cache that few reads hit (data much larger than it, read evenly) gains nothing from
//! caching every miss: each fill evicts an entry as unlikely to be read again, and costs more
//! than the hits it brings. Then only one miss in [`SAMPLED_ONE_IN`] is cached: the cache stays
//! full of as good a sample, at a fraction of the work. Looked at again every [`WINDOW`] misses.

use std::sync::{
    atomic::{AtomicBool, AtomicU64, Ordering},
    Mutex,
};

use quick_cache::{sync::Cache, Weighter};

use crate::ops::Record;

/// Bytes charged per entry besides its key and value (the entry, the table slot, ghost
/// entries, allocations), so that the cache's real footprint is what it is charged: measured,
/// `quick_cache` holding 81,920 entries of 32-byte keys and values in 10 MiB of charges took
/// 17.7 MB, 221 bytes an entry.
const ENTRY_OVERHEAD: u64 = 160;

/// Average entry size assumed when sizing the table up front.
const ESTIMATED_ENTRY: u64 = 256;

/// Misses between two looks at whether fills are sampled.
const WINDOW: u64 = 1 << 16;
/// Fills are sampled while the cache is at least this full (percent of its bytes)...
const FULL_PCT: u64 = 90;
/// ... and fewer than this share of the reads in the last window hit it (percent).
const FEW_HITS_PCT: u64 = 20;
/// While sampled, one miss in this many is cached.
const SAMPLED_ONE_IN: u64 = 8;

#[derive(Debug, Clone)]
struct Bytes;

impl Weighter<Vec<u8>, Record> for Bytes {
    fn weight(&self, key: &Vec<u8>, record: &Record) -> u64 {
        key.len() as u64 + record.value.len() as u64 + ENTRY_OVERHEAD
    }
}

/// The store's cache of records, shared by readers and writers.
#[derive(Debug)]
pub struct RecordCache {
    records: Cache<Vec<u8>, Record, Bytes>,
    /// Per partition: twice the commits begun, plus one while a commit is under way.
    generations: Vec<Mutex<u64>>,
    hits: AtomicU64,
    misses: AtomicU64,
    /// The hits counted when the current window of misses began.
    window_hits: AtomicU64,
    /// Only one miss in [`SAMPLED_ONE_IN`] is cached.
    sampled: AtomicBool,
    /// Fills asked for while sampled.
    offered: AtomicU64,
}

/// Hits and misses so far, and the size now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheStats {
    /// Reads answered from the cache.
    pub hits: u64,
    /// Reads that went to SQLite.
    pub misses: u64,
    /// Bytes the cached entries are charged for.
    pub bytes: u64,
    /// Entries cached.
    pub entries: u64,
}

impl RecordCache {
    /// A cache of about `bytes` for a store of `partitions`; `None` when `bytes` is 0.
    pub fn new(bytes: u64, partitions: u32) -> Option<Self> {
        (bytes > 0).then(|| Self {
            records: Cache::with_weighter((bytes / ESTIMATED_ENTRY).max(16) as usize, bytes, Bytes),
            generations: (0..partitions).map(|_| Mutex::new(0)).collect(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            window_hits: AtomicU64::new(0),
            sampled: AtomicBool::new(false),
            offered: AtomicU64::new(0),
        })
    }

    /// The cached record of `key`, counting a hit or a miss.
    pub fn get(&self, key: &[u8]) -> Option<Record> {
        let found = self.records.get(key);
        match found {
            Some(_) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                if (self.misses.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(WINDOW) {
                    self.window_ended();
                }
            }
        }
        found
    }

    /// A window of [`WINDOW`] misses ended: fills are sampled for the next one if the cache is
    /// full and few of the window's reads hit it.
    fn window_ended(&self) {
        let hits = self.hits.load(Ordering::Relaxed);
        let window_hits = hits.saturating_sub(self.window_hits.swap(hits, Ordering::Relaxed));
        let full = self.records.weight() * 100 >= self.records.capacity() * FULL_PCT;
        let few_hits = window_hits * 100 < (window_hits + WINDOW) * FEW_HITS_PCT;
        self.sampled.store(full && few_hits, Ordering::Relaxed);
    }

    /// Whether this fill is one of those sampled out.
    fn sampled_out(&self) -> bool {
        self.sampled.load(Ordering::Relaxed)
            && !self.offered.fetch_add(1, Ordering::Relaxed).is_multiple_of(SAMPLED_ONE_IN)
    }

    /// Whether the cache holds `key` (neither a hit nor a miss: nobody reads the record).
    pub fn holds(&self, key: &[u8]) -> bool {
        self.records.contains_key(key)
    }

    /// Partition `p`'s generation: note it before reading SQLite, for [`RecordCache::fill`].
    pub fn generation(&self, p: u32) -> u64 {
        *self.lock(p)
    }

    /// Caches what a read found, if no commit of partition `p` began or was under way since
    /// `generation` was noted (and it is not sampled out).
    pub fn fill(&self, p: u32, generation: u64, key: &[u8], record: &Record) {
        if self.sampled_out() {
            return;
        }
        let current = self.lock(p);
        if *current == generation && generation.is_multiple_of(2) {
            self.records.insert(key.to_vec(), record.clone());
        }
    }

    /// A commit of partition `p` writing `keys` is about to run: forget them, refuse fills.
    pub fn commit_begins<'a>(&self, p: u32, keys: impl IntoIterator<Item = &'a Vec<u8>>) {
        let mut current = self.lock(p);
        if current.is_multiple_of(2) {
            *current += 1;
        }
        for key in keys {
            self.records.remove(key.as_slice());
        }
    }

    /// The commit of partition `p` has ended (committed or failed): fills may resume.
    pub fn commit_ended(&self, p: u32) {
        let mut current = self.lock(p);
        if !current.is_multiple_of(2) {
            *current += 1;
        }
    }

    /// Hits, misses and size now.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes: self.records.weight(),
            entries: self.records.len() as u64,
        }
    }

    fn lock(&self, p: u32) -> std::sync::MutexGuard<'_, u64> {
        self.generations[p as usize].lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(counter: u64) -> Record {
        Record { version: crate::Version { epoch: 1, id: 1, counter }, value: vec![b'v'; 10] }
    }

    #[test]
    fn fills_that_raced_a_commit_are_dropped_and_commits_remove_their_keys() {
        let cache = RecordCache::new(1 << 20, 2).unwrap();
        let key = b"k".to_vec();
        let before = cache.generation(0);
        cache.commit_begins(0, [&key]);
        let during = cache.generation(0);
        cache.fill(0, before, &key, &record(1));
        cache.fill(0, during, &key, &record(1));
        cache.commit_ended(0);
        cache.fill(0, during, &key, &record(1));
        assert_eq!(cache.get(&key), None, "read before or during the commit: not cached");
        cache.fill(0, cache.generation(0), &key, &record(2));
        assert_eq!(cache.get(&key), Some(record(2)));
        cache.commit_begins(1, [&b"other".to_vec()]);
        cache.commit_ended(1);
        assert_eq!(cache.get(&key), Some(record(2)), "another partition's commit changes nothing here");
        cache.commit_begins(0, [&key]);
        assert_eq!(cache.get(&key), None, "a commit writing the key removes it");
        cache.commit_ended(0);
        assert_eq!((cache.stats().hits, cache.stats().misses), (2, 2));
    }

    #[test]
    fn a_full_cache_that_few_reads_hit_caches_a_sample_of_its_misses() {
        let cache = RecordCache::new(64 * 1024, 1).unwrap();
        let absent = |cache: &RecordCache, n: u64| (0..n).for_each(|i| assert!(cache.get(&i.to_le_bytes()).is_none()));
        let cached = |cache: &RecordCache, keys: std::ops::Range<u32>| {
            keys.filter(|i| {
                cache.fill(0, 0, &i.to_be_bytes(), &record(1));
                cache.holds(&i.to_be_bytes())
            })
            .count()
        };
        absent(&cache, WINDOW);
        assert_eq!(cached(&cache, 0..100), 100, "not full yet: every miss is cached, hits or none");
        cached(&cache, 100..10_000);
        absent(&cache, WINDOW);
        let sampled = cached(&cache, 10_000..10_800);
        assert_eq!(sampled, 800 / SAMPLED_ONE_IN as usize, "full, no hits: one miss in {SAMPLED_ONE_IN}");
        // Reads hit again, half of them: every miss is cached again.
        let hot = 10_000u32.to_be_bytes();
        cache.fill(0, 0, &hot, &record(1));
        for i in 0..WINDOW {
            assert!(cache.get(&i.to_le_bytes()).is_none());
            assert!(cache.get(&hot).is_some());
        }
        assert_eq!(cached(&cache, 20_000..20_100), 100);
    }

    #[test]
    fn the_cache_stays_within_its_bytes() {
        let cache = RecordCache::new(64 * 1024, 1).unwrap();
        for i in 0..10_000u32 {
            cache.fill(0, 0, &i.to_be_bytes(), &record(1));
        }
        let stats = cache.stats();
        assert!(stats.bytes <= 64 * 1024 && stats.entries > 100, "{stats:?}");
        assert!(RecordCache::new(0, 1).is_none());
    }
}
