//! The memory budget (`memory_budget_mib`): how much RAM the store may hold, and how it is
//! divided. The data itself is left to the OS page cache; the store's own memory is what must stay
//! within the budget, at any partition count and any load. The process's mapped files are set
//! aside first ([`mapped_files`]); the parts share the rest:
//! - index pages, [`INDEX_PAGES_SHARE`]: index files' pages held in RAM ([`crate::index::resident`]);
//! - SQLite, [`SQLITE_SHARE`]: every connection's page cache, schema and statements;
//! - the record cache, [`RECORD_CACHE_SHARE`];
//! - the recent index entries, [`RECENT_INDEX_SHARE`], held in RAM until merged into the file;
//! - held writes, [`HELD_WRITES_SHARE`]: writes answered before their `COMMIT`
//!   ([`crate::partition::held`]);
//! - the rest: threads, queues, requests in flight, the index files' overflow sections.
//!
//! `cache_size_kib`, `record_cache_mib`, `merge_threshold` and `hold_kib` stay ceilings: a part takes the
//! smaller of its setting and its share. The default budget is a quarter of the machine's RAM
//! ([`MACHINE_FRACTION`]) or, in a container with less, seven eighths of its limit
//! ([`CONTAINER_FRACTION`]); raised to what the partitions need ([`minimum_budget`]) if that is at most half.

use serde::{Deserialize, Serialize};

use crate::{Config, Error, Result};

/// The executable's and its libraries' resident pages, set aside from every budget. Measured:
/// 12.5 MiB of the release binary's and libc's pages resident under GET and PUT load.
pub const EXECUTABLE_BYTES: u64 = 16 << 20;
/// A partition's WAL-index (its `-shm` file), mapped by each of its connections: one 32 KiB
/// region covers 4,096 WAL frames, more than a WAL holds between checkpoints. Measured: 5.1 MiB
/// resident for 256 partitions, a writer and a reader each.
pub const WAL_INDEX_BYTES: u64 = 32 << 10;
/// The budget (less the mapped files) index pages in RAM may take, at most, besides what the
/// other parts' settings leave of their shares.
pub const INDEX_PAGES_SHARE: f64 = 0.60;
/// The part of the working memory SQLite's connections may use.
pub const SQLITE_SHARE: f64 = 0.50;
/// The part of the working memory for the record cache.
pub const RECORD_CACHE_SHARE: f64 = 0.15;
/// The part of the working memory for recent index entries.
pub const RECENT_INDEX_SHARE: f64 = 0.15;
/// The part of the working memory for held writes, all partitions together.
pub const HELD_WRITES_SHARE: f64 = 0.05;
/// Bytes a recent index entry costs in RAM (an 8-byte entry in a `BTreeSet`: 15.4 measured for
/// random inserts, allocator slack on top).
pub const RECENT_ENTRY_BYTES: u64 = 16;
/// What a SQLite connection holds besides its page cache (schema, prepared statements, the
/// allocator's slack). Measured: 512 connections of 256 partitions, 64 KiB caches, after GET
/// load held 53 MB of libc's heaps, 41 KiB each besides the cache.
pub const CONNECTION_BYTES: u64 = 48 << 10;
/// The smallest page cache a connection is given, KiB (the pages of one lookup; the rest of
/// the B-tree is read from the OS page cache).
pub const MIN_CACHE_KIB: u32 = 16;
/// The fewest entries a partition gathers before a merge (smaller makes merges a burden).
pub const MIN_MERGE_THRESHOLD: usize = 1024;
/// The default budget on a machine: its RAM times this.
pub const MACHINE_FRACTION: f64 = 0.25;
/// The default budget in a container with a smaller memory limit: the limit times this.
pub const CONTAINER_FRACTION: f64 = 0.875;

/// Where the budget came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetSource {
    /// `memory_budget_mib`.
    Configured,
    /// A quarter of the machine's RAM.
    Machine,
    /// Seven eighths of the container's (cgroup's) memory limit.
    Container,
}

/// The budget and its parts, in bytes, for a store of some partitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MemoryPlan {
    /// The whole budget.
    pub budget: u64,
    /// Set aside for the process's mapped files (executable, libraries, WAL-indexes).
    pub mapped_files: u64,
    /// Index files' pages held in RAM, at most.
    pub index_pages: u64,
    /// Where it came from.
    pub source: BudgetSource,
    /// SQLite's part: its connections' page caches and what each holds besides.
    pub sqlite: u64,
    /// Read-only connections a partition may open.
    pub readers_per_partition: usize,
    /// SQLite connections the store may hold at once.
    pub connections: u64,
    /// Each connection's page cache, KiB.
    pub cache_kib: u32,
    /// The record cache.
    pub record_cache: u64,
    /// Recent index entries of all partitions.
    pub recent_index: u64,
    /// Entries a partition gathers before a merge.
    pub merge_threshold: usize,
    /// Held writes of all partitions, at most.
    pub held_writes: u64,
    /// Held writes of one partition, at most, KiB.
    pub hold_kib: u64,
}

impl MemoryPlan {
    /// The plan for `config` and a store of `partitions`; refuses a budget too small for them.
    pub fn new(config: &Config, partitions: u32) -> Result<Self> {
        let (budget, source) = budget(config, partitions)?;
        let mapped_files = mapped_files(partitions);
        let parts = budget.saturating_sub(mapped_files);
        let index_share =
            ((parts as f64 * INDEX_PAGES_SHARE) as u64).min(budget.saturating_sub(minimum_budget(partitions)));
        let working = parts - index_share;
        let share = |part: f64| (working as f64 * part) as u64;
        let connections = |readers: usize| u64::from(partitions) * (1 + readers as u64) + 1;
        let cache_kib =
            |readers: usize| (share(SQLITE_SHARE) / connections(readers)).saturating_sub(CONNECTION_BYTES) >> 10;
        let readers = (1..=wanted_readers(config, partitions))
            .rev()
            .find(|&r| cache_kib(r) >= u64::from(MIN_CACHE_KIB))
            .unwrap_or(1);
        // Active and frozen entries of every partition.
        let entry_pair = 2 * RECENT_ENTRY_BYTES * u64::from(partitions);
        let per_partition = share(RECENT_INDEX_SHARE) / entry_pair;
        if cache_kib(readers) < u64::from(MIN_CACHE_KIB) || per_partition < MIN_MERGE_THRESHOLD as u64 {
            let needed = minimum_budget(partitions);
            return Err(Error::Config(format!(
                "a memory budget of {} MiB is too small for {partitions} partitions: give at least {} MiB \
                 (memory_budget_mib)",
                budget >> 20,
                needed.div_ceil(1 << 20)
            )));
        }
        // Each part takes the smaller of its share and what its setting lets it use.
        let cache_kib = (cache_kib(readers) as u32).min(config.cache_size_kib);
        let sqlite = connections(readers) * (CONNECTION_BYTES + (u64::from(cache_kib) << 10));
        let record_cache = share(RECORD_CACHE_SHARE).min(config.record_cache_mib << 20);
        let merge_threshold = (per_partition as usize).min(config.merge_threshold);
        let recent_index = entry_pair * merge_threshold as u64;
        let hold_kib = ((share(HELD_WRITES_SHARE) / u64::from(partitions)) >> 10).min(config.hold_kib);
        let held_writes = (hold_kib << 10) * u64::from(partitions);
        // What the settings leave of the shares goes to index pages; the rest's share stays.
        let unused =
            share(SQLITE_SHARE) + share(RECORD_CACHE_SHARE) + share(RECENT_INDEX_SHARE) + share(HELD_WRITES_SHARE)
                - sqlite
                - record_cache
                - recent_index
                - held_writes;
        Ok(Self {
            budget,
            mapped_files,
            index_pages: index_share + unused,
            source,
            sqlite,
            readers_per_partition: readers,
            connections: connections(readers),
            cache_kib,
            record_cache,
            recent_index,
            merge_threshold,
            held_writes,
            hold_kib,
        })
    }

    /// `config` with each part's setting lowered to what the plan gives it.
    pub fn apply(&self, config: &Config) -> Config {
        Config {
            cache_size_kib: self.cache_kib,
            readers_per_partition: self.readers_per_partition,
            record_cache_mib: self.record_cache >> 20,
            merge_threshold: self.merge_threshold,
            hold_kib: self.hold_kib,
            ..config.clone()
        }
    }
}

/// Readers a partition may open before the budget has its say: the setting, or, in a store of
/// fewer partitions than lookup threads, enough for every lookup thread to read at once (on cold
/// data each waits on a disk read; fewer readers would leave the device's queue short).
fn wanted_readers(config: &Config, partitions: u32) -> usize {
    let per_partition = config.lookup_threads.div_ceil(partitions.max(1) as usize);
    config.readers_per_partition.max(per_partition).max(1)
}

/// The smallest budget that gives `partitions` (one reader each) their minimums (and index
/// pages nothing), the mapped files set aside.
pub fn minimum_budget(partitions: u32) -> u64 {
    let connections = u64::from(partitions) * 2 + 1;
    let sqlite = connections * (CONNECTION_BYTES + (u64::from(MIN_CACHE_KIB) << 10));
    let recent = 2 * RECENT_ENTRY_BYTES * MIN_MERGE_THRESHOLD as u64 * u64::from(partitions);
    mapped_files(partitions) + ((sqlite as f64 / SQLITE_SHARE).max(recent as f64 / RECENT_INDEX_SHARE)) as u64
}

/// What the process's mapped files hold resident: the executable and every partition's
/// WAL-index, mapped by its writer and its readers.
pub fn mapped_files(partitions: u32) -> u64 {
    EXECUTABLE_BYTES + u64::from(partitions) * WAL_INDEX_BYTES
}

/// The configured budget, or the default: seven eighths of a container's limit or a quarter of
/// the RAM, raised to the minimum for `partitions` if half of the memory allows.
fn budget(config: &Config, partitions: u32) -> Result<(u64, BudgetSource)> {
    if let Some(mib) = config.memory_budget_mib {
        return Ok((mib << 20, BudgetSource::Configured));
    }
    let machine = shardlite_proc::cgroup::machine_memory()
        .ok_or_else(|| Error::Config("cannot read the machine's memory: set memory_budget_mib".into()))?;
    let (memory, fraction, source) = match shardlite_proc::cgroup::memory_limit() {
        Some(limit) if limit < machine => (limit, CONTAINER_FRACTION, BudgetSource::Container),
        _ => (machine, MACHINE_FRACTION, BudgetSource::Machine),
    };
    Ok((((memory as f64 * fraction) as u64).max(minimum_budget(partitions).min(memory / 2)), source))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(budget_mib: u64, partitions: u32) -> Result<MemoryPlan> {
        MemoryPlan::new(&Config { memory_budget_mib: Some(budget_mib), ..Config::default() }, partitions)
    }

    #[test]
    fn the_parts_fit_the_budget_at_any_partition_count() {
        for partitions in [1, 16, 256, 1024] {
            let budget = minimum_budget(partitions).div_ceil(1 << 20).max(64);
            let plan = plan(budget, partitions).unwrap();
            let sqlite = plan.connections * (CONNECTION_BYTES + (u64::from(plan.cache_kib) << 10));
            let recent = 2 * RECENT_ENTRY_BYTES * plan.merge_threshold as u64 * u64::from(partitions);
            assert!(sqlite <= plan.sqlite, "{plan:?}");
            assert!(recent <= plan.recent_index, "{plan:?}");
            assert_eq!(plan.held_writes, (plan.hold_kib << 10) * u64::from(partitions));
            let parts = plan.index_pages + plan.sqlite + plan.record_cache + plan.recent_index + plan.held_writes;
            assert!(plan.mapped_files + parts <= plan.budget, "{plan:?}");
            assert_eq!(plan.mapped_files, EXECUTABLE_BYTES + u64::from(partitions) * WAL_INDEX_BYTES);
        }
    }

    #[test]
    fn settings_are_ceilings_within_the_budget() {
        let big = plan(64 << 10, 16).unwrap();
        let defaults = Config::default();
        assert_eq!(big.cache_kib, defaults.cache_size_kib);
        assert_eq!(big.record_cache, defaults.record_cache_mib << 20);
        assert_eq!(big.merge_threshold, defaults.merge_threshold);
        assert_eq!(big.hold_kib, defaults.hold_kib);
        let small = plan(100, 256).unwrap();
        assert!(small.hold_kib < defaults.hold_kib, "{small:?}");
        assert_eq!(small.apply(&defaults).hold_kib, small.hold_kib);
        assert!(small.cache_kib < defaults.cache_size_kib && small.cache_kib >= MIN_CACHE_KIB);
        assert!(small.record_cache < defaults.record_cache_mib << 20);
        assert!(small.merge_threshold < defaults.merge_threshold);
    }

    #[test]
    fn partitions_get_fewer_readers_before_the_budget_is_refused() {
        let config = Config { readers_per_partition: 4, ..Config::default() };
        let roomy = MemoryPlan::new(&Config { memory_budget_mib: Some(4096), ..config.clone() }, 256).unwrap();
        assert_eq!(roomy.readers_per_partition, 4);
        let tight = minimum_budget(256).div_ceil(1 << 20);
        let plan = MemoryPlan::new(&Config { memory_budget_mib: Some(tight), ..config.clone() }, 256).unwrap();
        assert_eq!(plan.readers_per_partition, 1);
        assert_eq!(plan.apply(&config).readers_per_partition, 1);
    }

    /// A store of fewer partitions than lookup threads gives each partition enough readers for
    /// all of them to read at once; a store of many keeps the setting.
    #[test]
    fn few_partitions_get_a_reader_for_each_lookup_thread() {
        let config = |mib: u64| Config { memory_budget_mib: Some(mib), lookup_threads: 32, ..Config::default() };
        assert_eq!(MemoryPlan::new(&config(2048), 1).unwrap().readers_per_partition, 32);
        assert_eq!(MemoryPlan::new(&config(2048), 4).unwrap().readers_per_partition, 8);
        let many = MemoryPlan::new(&config(4096), 256).unwrap();
        assert_eq!(many.readers_per_partition, Config::default().readers_per_partition);
    }

    /// Index pages take their share of a roomy budget, give way to the other parts' minimums in
    /// a tight one, and get
    /// only the page caches' rounding from the least budget the partitions need.
    #[test]
    fn index_pages_come_after_the_minimums() {
        let roomy = plan(1024, 256).unwrap();
        let rounding = (64 << 10) + (256 << 10);
        let share = ((roomy.budget - roomy.mapped_files) as f64 * INDEX_PAGES_SHARE) as u64;
        // Only the page caches' and the held writes' rounding to whole KiB is left over by the
        // other parts.
        assert!((share..share + (1 << 20) + rounding).contains(&roomy.index_pages), "{roomy:?}");
        let least = minimum_budget(256).div_ceil(1 << 20);
        let tight = plan(least + 10, 256).unwrap();
        let at_least = |plan: &MemoryPlan| plan.budget - minimum_budget(256);
        assert!((at_least(&tight)..at_least(&tight) + rounding).contains(&tight.index_pages), "{tight:?}");
        assert!(tight.index_pages < (tight.budget as f64 * INDEX_PAGES_SHARE) as u64);
        let least = plan(least, 256).unwrap();
        assert!((at_least(&least)..at_least(&least) + rounding).contains(&least.index_pages), "{least:?}");
    }

    /// At one partition the settings cap SQLite's caches, the record cache, the recent entries
    /// and the held writes far below their shares of a 2 GiB budget: what they leave goes to
    /// index pages, and the rest keeps its share of the working memory.
    #[test]
    fn what_the_settings_leave_goes_to_index_pages() {
        let plan = plan(2048, 1).unwrap();
        let parts = plan.budget - plan.mapped_files;
        let share = (parts as f64 * INDEX_PAGES_SHARE) as u64;
        assert!(plan.index_pages > share + (256 << 20), "{plan:?}");
        let rest = parts - plan.index_pages - plan.sqlite - plan.record_cache - plan.recent_index - plan.held_writes;
        let working = parts - share;
        let rest_share = 1.0 - SQLITE_SHARE - RECORD_CACHE_SHARE - RECENT_INDEX_SHARE - HELD_WRITES_SHARE;
        assert!(
            rest + 5 >= (working as f64 * rest_share) as u64,
            "the rest keeps its share: {rest} of {working}: {plan:?}"
        );
    }

    #[test]
    fn a_budget_too_small_is_refused_saying_how_much_is_needed() {
        let err = plan(8, 256).unwrap_err().to_string();
        let needed = minimum_budget(256).div_ceil(1 << 20);
        assert!(err.contains(&format!("give at least {needed} MiB")), "{err}");
        assert!(plan(needed, 256).is_ok());
    }
}
