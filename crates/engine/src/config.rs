//! Engine settings, in two layers: [`CreateOptions`], what is fixed when a data directory is
//! created (partitions, index mode, hash seed, fingerprint width; recorded in its manifest), and
//! [`Config`], the runtime tuning that may change from one open to the next (every SQLite knob
//! the public write-ups measured, `docs/sizing.md`; the group-commit knobs; the resource bounds).

use std::{fmt, str::FromStr, time::Duration};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// How records are found by key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum IndexMode {
    /// The compact hash index: about 6 bytes a record, one index page read per lookup.
    #[default]
    Hash,
    /// A SQLite UNIQUE index on the key: the obvious design, kept as a baseline.
    Sqlite,
    /// No index: append-only, lookups by key are refused.
    None,
}

/// SQLite's journal mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum JournalMode {
    /// Write-ahead log: readers never block the writer.
    #[default]
    Wal,
    /// The rollback journal (SQLite's default): readers and the writer block each other.
    Delete,
}

/// SQLite's `synchronous` setting: what an acknowledged write survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    /// An acknowledged write survives power loss: it is synced before it is acknowledged.
    #[default]
    Full,
    /// In WAL mode, synced only at checkpoints: survives a process crash, not power loss.
    Normal,
    /// No sync at all: for bulk loads and benchmarks of the ceiling only.
    Off,
}

/// How the writer opens its transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum TxMode {
    /// `BEGIN IMMEDIATE`: take the write lock up front, so no upgrade can fail.
    #[default]
    Immediate,
    /// `BEGIN DEFERRED`: SQLite's default, kept to measure the difference.
    Deferred,
}

macro_rules! text_enum {
    ($ty:ty { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $ty {
            /// The word used in flags, config files and the manifest.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $ty {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                match s {
                    $($text => Ok(Self::$variant),)+
                    _ => Err(Error::Config(format!(
                        "`{s}` is not one of: {}", [$($text),+].join(", ")
                    ))),
                }
            }
        }
    };
}
text_enum!(IndexMode { Hash => "hash", Sqlite => "sqlite", None => "none" });
text_enum!(JournalMode { Wal => "wal", Delete => "delete" });
text_enum!(Synchronous { Full => "full", Normal => "normal", Off => "off" });
text_enum!(TxMode { Immediate => "immediate", Deferred => "deferred" });

/// Largest partition count a data directory may have (file names carry four digits).
pub const MAX_PARTITIONS: u32 = 4096;

/// What a data directory is created with, and then is for good: recorded in its manifest
/// ([`crate::Manifest`]). Each setting is optional. One that is given is what a new directory
/// gets, and what an existing one must have been created with (opening refuses a difference,
/// naming it); one that is not given is whatever an existing directory has, or the default
/// for a new one ([`CreateOptions::defaults`]).
///
/// Each field's doc line is also its `shardlite serve` flag's help; the field's name is its
/// TOML key (and, with `-` for `_`, its flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Engine"))]
#[serde(deny_unknown_fields)]
pub struct CreateOptions {
    /// Partitions of a new data directory.
    #[cfg_attr(feature = "cli", arg(long))]
    pub partitions: Option<u32>,
    /// Index mode of a new data directory.
    #[cfg_attr(feature = "cli", arg(long))]
    pub index: Option<IndexMode>,
    /// Key hash seed of a new data directory.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub hash_seed: Option<u64>,
    /// Fingerprint width of a new data directory, bits; below 32 only to force collisions in
    /// tests (so a key of the file, not a flag).
    #[cfg_attr(feature = "cli", arg(skip))]
    pub fingerprint_bits: Option<u8>,
}

impl CreateOptions {
    /// Partitions of a new directory unless given.
    pub const DEFAULT_PARTITIONS: u32 = 256;
    /// Hash seed of a new directory unless given: "SHARDLIT".
    pub const DEFAULT_HASH_SEED: u64 = 0x5348_4152_444C_4954;
    /// Fingerprint width of a new directory unless given.
    pub const DEFAULT_FINGERPRINT_BITS: u8 = 32;

    /// What a new directory gets when nothing is given: every setting at its default.
    pub fn defaults() -> Self {
        Self {
            partitions: Some(Self::DEFAULT_PARTITIONS),
            index: Some(IndexMode::default()),
            hash_seed: Some(Self::DEFAULT_HASH_SEED),
            fingerprint_bits: Some(Self::DEFAULT_FINGERPRINT_BITS),
        }
    }

    /// Rejects given settings no directory can have, saying which and why.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        if let Some(p) = self.partitions.filter(|p| !(1..=MAX_PARTITIONS).contains(p)) {
            return bad(format!("partitions must be 1..={MAX_PARTITIONS}, got {p}"));
        }
        if let Some(bits) = self.fingerprint_bits.filter(|b| !(1..=32).contains(b)) {
            return bad(format!("fingerprint_bits must be 1..=32, got {bits}"));
        }
        Ok(())
    }
}

/// How a [`crate::Store`] runs: everything that may change from one open to the next.
///
/// Each field's doc line is also its `shardlite serve` flag's help; the field's name is its
/// TOML key (and, with `-` for `_`, its flag: `transaction` is `--tx`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Engine"))]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// SQLite journal.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub journal: JournalMode,
    /// What an acknowledged write survives.
    // `full` is kept by the commit log or by each commit's fsync: `Config::uses_commit_log`.
    #[cfg_attr(feature = "cli", arg(long))]
    pub synchronous: Synchronous,
    /// With synchronous=full: make commits durable with one flush of the shared commit log per
    /// round of commits (true), or with an fsync of each partition's WAL (false).
    // One flush for a whole round of commits over any number of partitions (`crate::commitlog`);
    // off is kept to measure the difference.
    #[cfg_attr(feature = "cli", arg(hide = true, long, value_name = "BOOL", action = clap::ArgAction::Set))]
    pub commit_log: bool,
    /// MiB preallocated for each commit log segment.
    // A nearly full disk gets smaller ones: fewer segment switches against more disk held.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub log_segment_mib: u64,
    /// SQLite page size of new partitions, bytes.
    // 512..=65536, a power of two; it takes effect only before a partition's first table.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub page_size: u32,
    /// SQLite mmap_size per connection, bytes.
    // 0: no memory mapping.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub mmap_size: u64,
    /// RAM the store may hold, MiB [default: a quarter of the machine's RAM, or seven eighths of
    /// the container's memory limit if that is less].
    // Divided among index pages, SQLite, the record cache and the recent index entries
    // (`crate::memory`); the data pages are left to the OS page cache.
    #[cfg_attr(feature = "cli", arg(long))]
    pub memory_budget_mib: Option<u64>,
    /// SQLite page cache per connection, KiB (at most: the memory budget may give less).
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub cache_size_kib: u32,
    /// Writer transactions.
    #[cfg_attr(feature = "cli", arg(hide = true, long = "tx"))]
    pub transaction: TxMode,
    /// Largest value, bytes.
    #[cfg_attr(feature = "cli", arg(long))]
    pub max_value: usize,
    /// Group-commit writer threads; 0: sized from the CPUs ([`Config::writers`]).
    // Partition `p` belongs to thread `p % writer_threads`. With the commit log the threads share
    // one flush, and past one a CPU they only wait and wake: on 2 CPUs, 16 of them cost a durable
    // insert 30% more CPU than 2 (docs/decisions/group-commit.md). Without it each commit with
    // `synchronous = full` waits for an fsync of its own, and fsyncs of different files overlap
    // well (measured: 16 threads commit 5x more than 1 with 64 callers on 16 partitions), so
    // then there are more threads than cores on purpose.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub writer_threads: usize,
    /// With the commit log: a single write runs on its caller's thread, not its writer
    /// thread's, while fewer than this many are under way; 0: never.
    // Saves the hand-overs to and from a writer thread and its sleep until the flush, which at
    // a few connections cost more than the transaction (`partition::writer::inline`); under
    // heavier load the writer threads' rounds share flushes better (docs/design.md, "Inline
    // writes").
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub inline_writes_below: usize,
    /// Jobs each writer queue (and the lookup queue) holds before answering 503.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub queue_capacity: usize,
    /// Most write requests per commit; 1 turns group commit off.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub max_batch: usize,
    /// How long a writer waits for more requests after the first, µs.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub max_linger_us: u64,
    /// With the commit log: groups of writes (a writer round's requests for one partition) one
    /// SQLite transaction of the partition may hold, each answered once the log holds it; 1:
    /// each group commits its own.
    // A `COMMIT` of a round's one or two writes per partition (256 partitions) was a fifth of a
    // durable insert's CPU, most of it writing WAL frames; later groups' writes to the same
    // pages share them (`partition::writer::thread`, docs/decisions/held-writes.md).
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub hold_groups: u32,
    /// With the commit log: RAM, KiB, a partition's held writes (answered before their
    /// `COMMIT`) may take, each charged its key and value twice and what holding it costs
    /// besides (`partition::held`); the memory budget lowers it to its share.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub hold_kib: u64,
    /// Threads serving reads; 0: sized from the disk under the data directory (a quarter of its
    /// hardware queue depth, 8 to 64).
    // They serve `Store::submit_get` (reads for callers that must not block) and the writers'
    // warming reads. Each waits on one disk read at a time when the data is cold, so they are
    // what keeps the device's queue full (`crate::lookups`; docs/decisions/cold-reads.md).
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub lookup_threads: usize,
    /// A read that missed the record cache runs on its caller's thread, rather than a lookup
    /// thread, while few reads take longer than this and read the disk, µs; 0: never (every
    /// such read goes to a lookup thread, and the writers always warm their rounds' records).
    // A read from the page cache takes a few µs, one from flash at least about 50 (NVMe:
    // 70-100); `crate::inline_reads` has the rule.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub inline_read_us: u64,
    /// RAM for recently read records, MiB (at most: the memory budget may give less); 0: no
    /// cache.
    // A read of a cached key is answered on the caller's thread without touching SQLite
    // (`crate::cache`).
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub record_cache_mib: u64,
    /// Read-only SQLite connections per partition (at least: a store of fewer partitions than
    /// lookup threads opens up to lookup_threads / partitions; the memory budget may give fewer).
    // Kept per partition, opened on demand.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub readers_per_partition: usize,
    /// WAL pages after which a partition is checkpointed (each partition's threshold lies between
    /// three quarters of this and all of it, so that checkpoints do not come in one wave).
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub checkpoint_pages: u32,
    /// Seconds without a commit after which a partition's WAL is checkpointed and emptied, so
    /// that an idle partition's WAL gives its disk space back (0: never; with --litestream,
    /// never: Litestream checkpoints).
    // A WAL keeps up to checkpoint_pages pages after a checkpoint (journal_size_limit), reused
    // by the next writes: 4 MiB for each of 256 partitions whatever the data's size.
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub idle_wal_secs: u64,
    /// A Litestream process replicates this directory (docs/operations.md): leave checkpoints
    /// to it, checkpointing a partition only when its WAL passes 16 x checkpoint_pages, and then
    /// and at close only without waiting (PASSIVE).
    // Litestream holds a read transaction on every database and checkpoints itself at 1000 WAL
    // pages; checkpoints of ours would only race its WAL restarts (`crate::checkpointer`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub litestream: bool,
    /// Index entries held in RAM before a merge into the index file (at most: the memory budget
    /// may give fewer).
    #[cfg_attr(feature = "cli", arg(hide = true, long))]
    pub merge_threshold: usize,
    /// Open even though a partition's write-ahead log is missing and the commits in it are
    /// lost (refused otherwise, saying so), serving what the database files hold.
    // The loss is logged.
    #[cfg_attr(feature = "cli", arg(long))]
    pub accept_wal_loss: bool,
}

/// Writer threads without the commit log, where each `full` commit waits for its own fsync.
pub const WRITERS_FOR_FSYNCS: usize = 16;

/// The CPUs the process may use (its affinity mask and its cgroup's CPU quota count: `taskset`
/// and containers limit it).
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

impl Default for Config {
    fn default() -> Self {
        Self {
            journal: JournalMode::Wal,
            synchronous: Synchronous::Full,
            commit_log: true,
            log_segment_mib: 64,
            page_size: 4096,
            mmap_size: 0,
            memory_budget_mib: None,
            cache_size_kib: 2048,
            transaction: TxMode::Immediate,
            max_value: 1 << 20,
            writer_threads: 0,
            inline_writes_below: 32,
            queue_capacity: 4096,
            max_batch: 1024,
            max_linger_us: 0,
            hold_groups: 16,
            hold_kib: 256,
            lookup_threads: 0,
            inline_read_us: 50,
            record_cache_mib: 64,
            readers_per_partition: 2,
            checkpoint_pages: 1000,
            idle_wal_secs: 30,
            litestream: false,
            merge_threshold: 1 << 20,
            accept_wal_loss: false,
        }
    }
}

impl Config {
    /// Settings for a tool that opens a directory only to look at it (`check`, `stats --data`):
    /// the defaults without a commit log, whose new segment such an open would create for nothing
    /// (what the log holds is replayed all the same).
    pub fn inspection() -> Self {
        Self { commit_log: false, ..Self::default() }
    }

    /// Whether commits are made durable by the shared commit log: `synchronous = full`, WAL,
    /// and `commit_log` on. Then the partitions' SQLite connections run at `NORMAL`.
    pub fn uses_commit_log(&self) -> bool {
        self.commit_log && self.synchronous == Synchronous::Full && self.journal == JournalMode::Wal
    }

    /// The writer threads to start: `writer_threads`, or if 0, one a CPU the process may use
    /// when the commit log makes commits durable, else [`WRITERS_FOR_FSYNCS`].
    pub fn writers(&self) -> usize {
        match self.writer_threads {
            0 if self.uses_commit_log() => cpus(),
            0 => WRITERS_FOR_FSYNCS,
            n => n,
        }
    }

    /// The linger as a duration.
    pub fn max_linger(&self) -> Duration {
        Duration::from_micros(self.max_linger_us)
    }

    /// Rejects settings the engine cannot run with, saying which and why.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        if !(512..=65536).contains(&self.page_size) || !self.page_size.is_power_of_two() {
            return bad(format!("page_size must be a power of two in 512..=65536, got {}", self.page_size));
        }
        if self.max_value > crate::MAX_VALUE_LIMIT {
            return bad(format!("max_value must be at most {} bytes", crate::MAX_VALUE_LIMIT));
        }
        for (name, v) in [
            ("queue_capacity", self.queue_capacity),
            ("max_batch", self.max_batch),
            ("readers_per_partition", self.readers_per_partition),
            ("merge_threshold", self.merge_threshold),
            ("log_segment_mib", self.log_segment_mib as usize),
        ] {
            if v == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_round_trip_through_text() {
        for mode in [IndexMode::Hash, IndexMode::Sqlite, IndexMode::None] {
            assert_eq!(mode.as_str().parse::<IndexMode>(), Ok(mode));
        }
        for s in [Synchronous::Full, Synchronous::Normal, Synchronous::Off] {
            assert_eq!(s.to_string().parse::<Synchronous>(), Ok(s));
        }
        let err = "fast".parse::<Synchronous>().unwrap_err();
        assert!(err.to_string().contains("full, normal, off"), "{err}");
    }

    #[test]
    fn config_reads_from_toml_with_defaults() {
        let cfg: Config = toml::from_str("synchronous = \"normal\"\nmax_batch = 64\n").unwrap();
        assert_eq!(cfg.synchronous, Synchronous::Normal);
        assert_eq!(cfg.max_batch, 64);
        assert_eq!(cfg.journal, JournalMode::Wal);
        assert!(toml::from_str::<Config>("no_such_knob = 1").is_err());
    }

    #[test]
    fn validate_names_the_bad_field() {
        let cfg = Config { page_size: 3000, ..Config::default() };
        assert!(cfg.validate().unwrap_err().to_string().contains("page_size"));
        let create = CreateOptions { partitions: Some(0), ..CreateOptions::default() };
        assert!(create.validate().unwrap_err().to_string().contains("partitions"));
        assert!(Config::default().validate().is_ok());
        assert!(CreateOptions::defaults().validate().is_ok());
    }
}
