//! shardlite's storage engine: records in many SQLite partitions, found through a compact hash
//! index, written by group commit. Synchronous Rust; no HTTP, no async runtime.
//!
//! ```text
//!  Store::get/submit_get ──> record cache ──miss──> partition p ──index page──> read pool
//! Store::put/delete/batch ──hash──> queue of writer thread (p % W)   [bounded: Overloaded]
//!                                     │ drain ≤ max_batch, one BEGIN..COMMIT per partition
//!                                     ├─> answer every waiter after the commit (Pending)
//!                                     └─> recent index full? freeze ──> maintenance thread
//!                                                                      (merge into pNNNN.idx)
//! ```
//!
//! Threads: `writer_threads` writers, one checkpointer, one maintenance thread, `lookup_threads`
//! lookups and, for inline writes, the commit log's flusher; callers' own threads for `get`, and
//! for `submit_get` while reads find their pages in memory.
//!
//! # Layout
//!
//! - [`store`]: the entry point, [`Store`]: open, read, write, batch, check, stats, backup, move, close
//! - [`partition`]: one partition: its SQL, writer threads and group commit, read pool, recovery
//! - [`commitlog`]: the log shared by every partition, so that one flush makes a round durable
//! - [`index`]: the compact hash index (fingerprint -> record ids) and its file format
//! - [`cache`]: recently read records, kept in RAM and never stale
//! - [`lookups`]: the lookup threads: `submit_get`'s reads and the writers' warming reads
//! - `inline_reads`: whether a read runs on its caller's thread, from how long reads take
//! - `checkpointer`: the checkpointer thread: WAL checkpoints off the writers' path
//! - `maintenance`: the maintenance thread: index merges, commit log trims, index pages into RAM
//! - `opening`: opening a directory (lock, commit log, WALs, epoch, partitions) in the right order
//! - [`keyhash`]: key -> (partition, fingerprint), stable forever
//! - [`ops`]: operations, conditions, outcomes, records and their [`Version`]s
//! - [`config`]: settings fixed at creation ([`CreateOptions`]) and at each open ([`Config`])
//! - [`memory`]: the memory budget and its parts
//! - [`manifest`], [`layout`], [`dirlock`]: what a directory is, where its files are, who has it open
//! - [`backup`]: backups of an open store, and their restore
//! - [`transfer`]: the stream a partition moves in between nodes
//! - [`bulk`]: the offline bulk loader of a deterministic data set
//! - [`import`] (with `import_runs`, its staged runs): importing users' records, all or nothing
//! - [`bin_format`]: the `bin` record stream of export and import
//! - [`error`]: the one error type; [`metrics`]: the writers' counters

pub mod backup;
pub mod bin_format;
pub mod bulk;
pub mod cache;
mod checkpointer;
pub mod commitlog;
pub mod config;
pub mod dirlock;
pub mod error;
pub mod import;
mod import_runs;
pub mod index;
pub(crate) mod inline_reads;
pub mod keyhash;
pub mod layout;
pub mod lookups;
mod maintenance;
pub mod manifest;
pub mod memory;
pub mod metrics;
mod opening;
pub mod ops;
pub mod partition;
pub mod replication;
pub mod store;
pub mod transfer;

pub use config::{Config, CreateOptions, IndexMode, JournalMode, Synchronous, TxMode};
pub use error::{Error, Result};
pub use keyhash::{KeyHash, KeyHasher};
pub use manifest::Manifest;
pub use ops::{Condition, Op, Outcome, Record, Version, Written};
pub use partition::{
    check::PartitionCheck,
    compact::{CompactReport, PartitionCompaction},
};
pub use store::{send_database, Adoption, MovePart, PartitionStats, Pending, PendingBatch, Scanned, Store, StoreStats};

/// Longest key accepted, bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// Largest `max_value` a configuration may set, bytes.
pub const MAX_VALUE_LIMIT: usize = 64 << 20;
