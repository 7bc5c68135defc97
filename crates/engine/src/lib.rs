//! shardlite's storage engine: records in many SQLite partitions, found through a compact hash
//! index, written by group commit. Synchronous Rust; no HTTP, no async runtime.
//!
//! ```text
//!   Store::get/submit_get ──> record cache ──miss──> partition p ──index page──> read pool ──> pNNNN.db
//!  Store::put/delete/batch ──hash──> queue of writer thread (p % W)   [bounded: Overloaded]
//!                                      │ drain ≤ max_batch, one BEGIN..COMMIT per partition
//!                                      ├─> answer every waiter after the commit (Pending)
//!                                      └─> recent index full? freeze ──> maintenance thread
//!                                                                       (merge into pNNNN.idx)
//! ```
//!
//! Threads: `writer_threads` writers, each owning the read-write connection of its partitions
//! (and invalidating the record cache around each commit); one maintenance thread for index
//! merges; `lookup_threads` for `submit_get` misses and the writers' warming reads
//! ([`lookups`]); callers' own threads for `get`. Modules: [`store`] (the entry point), [`keyhash`] (key -> partition, fingerprint), [`partition`]
//! (SQL, writer, readers, recovery, the WAL check, check), [`cache`] (recently read records),
//! [`index`] (the compact index and its file format),
//! [`manifest`], [`layout`] and [`dirlock`] (what the directory is, where its files are, who has
//! it open), [`config`], [`memory`] (the memory budget and its parts), [`backup`] (backups of an
//! open store, each partition from a snapshot its writer takes, and their restore).

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
