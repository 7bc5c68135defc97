//! The storage a server works on: the [`Backend`] trait and its [`BackendError`]. The handlers
//! talk only to this trait. Every backend takes and answers the engine's operations ([`Op`],
//! [`Outcome`], [`Record`]: counter 1 on insert and +1 per update, conditions checked atomically
//! with the write), fails with a [`BackendError`] and reports typed [`Figures`]; the handlers
//! alone turn those into statuses, JSON and OpenMetrics. Nothing here knows an output format or
//! imports a handler.
//!
//! - `figures`: what a backend reports about itself, as typed values.
//! - `sqlite`: [`SqliteBackend`](sqlite::SqliteBackend), shardlite's engine behind the trait.
//! - `starting`: the backend that answers while the real one opens.
//! - `backup_job`: the one backup the engine's backend runs at a time, on its own thread.
//! - `backup_status`: what a backend says of its backup.
//!
//! PostgreSQL's backend is crate `shardlite-postgres`.

pub mod backup_job;
pub mod backup_status;
pub mod figures;
pub mod sqlite;
pub(crate) mod starting;

use std::{future::Future, path::PathBuf, pin::Pin, sync::Arc, time::Duration};

use shardlite_engine::{
    backup::BackupOptions,
    commitlog::Replicate,
    replication::{Frame, Receipt, Sealed},
    transfer::Received,
    CompactReport, MovePart, Op, Outcome, PartitionCheck, Record, Version, MAX_KEY_LEN,
};

use backup_status::BackupStatus;
use figures::Figures;

/// A boxed, sendable future: what the object-safe [`Backend`] methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The pieces of a byte stream as they arrive (a partition's transfer stream, an export).
pub type Chunks = tokio::sync::mpsc::Receiver<bytes::Bytes>;

/// What a backend can fail with, one variant per answer the HTTP layer gives (its `ApiError`
/// maps each to a status and a code). Variants that only say how storage failed carry the
/// backend's own message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// A condition did not hold: the answer a compare-and-set gets when it lost.
    #[error("{}", condition_failed(current))]
    ConditionFailed {
        /// The record's version when the condition was evaluated (`None`: no record).
        current: Option<Version>,
    },
    /// No record has the key, and the operation needs one.
    #[error("key not found")]
    NotFound,
    /// The key is empty or longer than [`MAX_KEY_LEN`].
    #[error("key length {len} is outside 1..={MAX_KEY_LEN} bytes")]
    InvalidKey {
        /// Length of the key.
        len: usize,
    },
    /// The value is longer than [`Backend::max_value`].
    #[error("value length {len} exceeds the maximum of {max} bytes")]
    ValueTooLarge {
        /// Length of the value.
        len: usize,
        /// The largest value, bytes.
        max: usize,
    },
    /// The storage does not serve this operation (an append-only directory).
    #[error("{0}")]
    Unsupported(String),
    /// Too much is queued; retry later.
    #[error("{0}")]
    Overloaded(String),
    /// The storage is shutting down or closed.
    #[error("the store is closed")]
    Closed,
    /// The disk is full; the write was rolled back and may be retried.
    #[error("disk full: {0}")]
    DiskFull(String),
    /// A partition used all of its record ids.
    #[error("{0}")]
    PartitionFull(String),
    /// A partition refuses writes after a failed commit.
    #[error("{0}")]
    Poisoned(String),
    /// A file failed its format checks.
    #[error("{0}")]
    Corrupt(String),
    /// The operating system failed an I/O.
    #[error("{0}")]
    Io(String),
    /// SQLite failed.
    #[error("{0}")]
    Sqlite(String),
    /// Any other failure of the storage.
    #[error("{0}")]
    Internal(String),
    /// The database cannot be reached right now (no pooled connection in time).
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// The database refused or failed a statement.
    #[error("database error: {0}")]
    Database(String),
    /// The request's query asks for something that is not there (a partition out of range).
    #[error("{0}")]
    BadQuery(String),
    /// The storage cannot do it in its present state (a backup already running, a backup
    /// destination that is not empty).
    #[error("{0}")]
    Conflict(String),
    /// This backend does not serve the operation at all.
    #[error("{0}")]
    NotImplemented(String),
    /// Too few copies held the write in time: it was rolled back, and may be retried.
    #[error("{0}")]
    Unreplicated(String),
}

fn condition_failed(current: &Option<Version>) -> String {
    match current {
        Some(version) => format!("the condition does not hold: the record is now at version {version}"),
        None => "the condition does not hold: no record exists for this key".to_owned(),
    }
}

/// A result of a backend operation.
pub type BackendResult<T> = Result<T, BackendError>;

/// One page of a partition's keys, in a stable order (see [`Backend::keys`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPage {
    /// The storage's partition count: pages go from partition 0 to this one less.
    pub partitions: u32,
    /// The keys, each with its record's version.
    pub keys: Vec<(Vec<u8>, Version)>,
    /// The cursor of the next page; `None` at the partition's end.
    pub next: Option<u64>,
}

/// One partition's records as a stream, in chunks as they are read: a `bin` stream
/// (`shardlite_engine::bin_format`, [`Backend::export`]) or a transfer for a move
/// (`shardlite_engine::transfer`, [`Backend::send_partition`]).
#[derive(Debug)]
pub struct Export {
    /// The storage's partition count.
    pub partitions: u32,
    /// The stream's chunks; it ends after the end marker, or without it if reading failed.
    pub chunks: Chunks,
}

/// The steps of a partition moving away from this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departure {
    /// A move begins: note the ids writes change; refused while another move of the
    /// partition is under way.
    Starting,
    /// The map is about to name the new owner: stop noting changes, take nothing back in.
    Leaving,
    /// The move failed: the partition stays, as it is.
    Kept,
    /// The map names the new owner: empty the stale copy here.
    Gone,
}

/// Storage as the HTTP server sees it. Implementations must not block the async runtime.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Which backend this is (`"sqlite"`, `"postgres"`): the `backend` field of `/stats`.
    fn name(&self) -> &'static str;

    /// The largest value a put may carry, bytes.
    fn max_value(&self) -> usize;

    /// Reads one record (`None`: no such key).
    fn get(&self, key: Vec<u8>) -> BoxFuture<'_, BackendResult<Option<Record>>>;

    /// Runs one write ([`Op::Put`] or [`Op::Delete`]); resolves once it is committed.
    fn write(&self, op: Op) -> BoxFuture<'_, BackendResult<Outcome>>;

    /// Runs many operations, in order; one result per operation. The outer error refuses the
    /// whole batch before anything ran: an operation with a bad key or a value over
    /// [`Backend::max_value`] refuses it all. Each operation's own refusal (not found, condition
    /// failed) is its result; the others still run.
    fn batch(&self, ops: Vec<Op>) -> BoxFuture<'_, BackendResult<Vec<BackendResult<Outcome>>>>;

    /// Up to `limit` keys of `partition` after the cursor `after` (0: from the start), in a
    /// stable order: keys written after a page was read come on later pages, never before it.
    fn keys(&self, partition: u32, after: u64, limit: usize) -> BoxFuture<'_, BackendResult<KeyPage>> {
        let _ = (partition, after, limit);
        Box::pin(
            async move { Err(BackendError::NotImplemented(format!("the {} backend does not list keys", self.name()))) },
        )
    }

    /// Why the backend cannot serve everything now (a poisoned partition, still opening),
    /// for `/readyz`; `None`: ready. Asked at every probe: must be cheap.
    fn unready(&self) -> Option<String> {
        None
    }

    /// Every record of `partition` from one consistent snapshot, streamed as it is read.
    fn export(&self, partition: u32) -> BoxFuture<'_, BackendResult<Export>> {
        let _ = partition;
        Box::pin(async move {
            Err(BackendError::NotImplemented(format!("the {} backend does not export partitions", self.name())))
        })
    }

    /// `part` of `partition` as a transfer stream (`shardlite_engine::transfer`) for a move to
    /// another node: the copy (every record with its id and counter, and its `next_id`, from
    /// one consistent snapshot, while writes go on), or the records changed since the last
    /// stream.
    fn send_partition(&self, partition: u32, part: MovePart) -> BoxFuture<'_, BackendResult<Export>> {
        let _ = (partition, part);
        Box::pin(async move { Err(self.no_moves()) })
    }

    /// Takes `part` of `partition` in from another node, from the `chunks` of its transfer
    /// stream: the copy in place of whatever it held, or a round of changes on top of it; a
    /// stream that fails or is damaged leaves it empty. Resolves to what the stream said.
    fn adopt(&self, partition: u32, part: MovePart, chunks: Chunks) -> BoxFuture<'_, BackendResult<Received>> {
        let _ = (partition, part, chunks);
        Box::pin(async move { Err(self.no_moves()) })
    }

    /// The next step of `partition` moving away from this node. Resolves to the records
    /// emptied ([`Departure::Gone`]; else 0).
    fn depart(&self, partition: u32, step: Departure) -> BoxFuture<'_, BackendResult<u64>> {
        let _ = (partition, step);
        Box::pin(async move { Err(self.no_moves()) })
    }

    /// Has every later commit wait until `replicator` says enough copies hold it (this node
    /// owning partitions of a cluster with replicas).
    fn replicate_with(&self, replicator: Arc<dyn Replicate>) -> BackendResult<()> {
        let _ = replicator;
        Err(self.no_replicas())
    }

    /// Takes in a frame of `owner`'s transactions for the copies this node keeps; resolves once
    /// they are durable here.
    fn receive(&self, owner: String, frame: Frame) -> BoxFuture<'_, BackendResult<Receipt>> {
        let _ = (owner, frame);
        Box::pin(async move { Err(self.no_replicas()) })
    }

    /// Where this node's commit log ends (`None`: no log): a copy that holds the log up to
    /// here holds every write this node committed.
    fn log_end(&self) -> Option<u64> {
        None
    }

    /// The epoch `partition`'s versions carry here (a copy made owner keeps it); `None`: none
    /// to keep.
    fn partition_epoch(&self, partition: u32) -> Option<u64> {
        let _ = partition;
        None
    }

    /// Seals the dead `owner` (a failover): no frame of its is taken any more. Resolves to
    /// where this node's copies of its partitions stand.
    fn seal(&self, owner: String) -> BoxFuture<'_, BackendResult<Sealed>> {
        let _ = owner;
        Box::pin(async move { Err(self.no_replicas()) })
    }

    /// If this node's copy of `partition`, kept for `owner`, follows the owner's stream (a read
    /// of it lags the owner by what is in flight), how long ago it took the owner's last frame;
    /// `None` without replicas.
    fn copy_heard(&self, owner: &str, partition: u32) -> Option<Duration> {
        let _ = (owner, partition);
        None
    }

    /// Takes `owner`'s frames again if a failover sealed it (it came back): whether it was.
    fn unseal(&self, owner: String) -> BackendResult<bool> {
        let _ = owner;
        Err(self.no_replicas())
    }

    /// What a copy of `partition` at `after` in `owner`'s log lacks: a frame's bytes.
    fn tail(&self, owner: String, partition: u32, after: u64) -> BoxFuture<'_, BackendResult<bytes::Bytes>> {
        let _ = (owner, partition, after);
        Box::pin(async move { Err(self.no_replicas()) })
    }

    /// Brings this node's copy of `partition` up to date with `frame` (the bytes of a more
    /// advanced copy's tail) for the sealed `owner`.
    fn catch_up(&self, owner: String, partition: u32, frame: bytes::Bytes) -> BoxFuture<'_, BackendResult<()>> {
        let _ = (owner, partition, frame);
        Box::pin(async move { Err(self.no_replicas()) })
    }

    /// Makes this node's copy of `partition` its own, for the sealed `owner`; resolves to its
    /// live records.
    fn promote(&self, owner: String, partition: u32) -> BoxFuture<'_, BackendResult<u64>> {
        let _ = (owner, partition);
        Box::pin(async move { Err(self.no_replicas()) })
    }

    /// `owner`, alive, hands `partition` over: every transaction of it held through `through`
    /// in `owner`'s log is applied; with `epoch`, this node becomes its owner, its versions
    /// carrying that epoch. Resolves to its live records.
    fn hand_over(
        &self,
        owner: String,
        partition: u32,
        through: u64,
        epoch: Option<u64>,
    ) -> BoxFuture<'_, BackendResult<u64>> {
        let _ = (owner, partition, through, epoch);
        Box::pin(async move { Err(self.no_replicas()) })
    }

    /// `partition` as a transfer stream for a copy brought up to date from a snapshot, and the
    /// position in this node's log the snapshot holds every transaction before.
    fn send_copy(&self, partition: u32) -> BoxFuture<'_, BackendResult<(u64, Chunks)>> {
        let _ = partition;
        Box::pin(async move { Err(self.no_replicas()) })
    }

    /// Takes `owner`'s snapshot of `partition` (at `position` in its log) in from `chunks`, in
    /// place of the copy held, then applies what was held of its log since. What the stream
    /// said.
    fn take_copy(
        &self,
        owner: String,
        partition: u32,
        position: u64,
        chunks: Chunks,
    ) -> BoxFuture<'_, BackendResult<Received>> {
        let _ = (owner, partition, position, chunks);
        Box::pin(async move { Err(self.no_replicas()) })
    }

    /// What a backend that cannot keep copies answers.
    fn no_replicas(&self) -> BackendError {
        BackendError::NotImplemented(format!("the {} backend does not keep copies for other nodes", self.name()))
    }

    /// What a backend that cannot move partitions answers.
    fn no_moves(&self) -> BackendError {
        BackendError::NotImplemented(format!("the {} backend does not move partitions between nodes", self.name()))
    }

    /// Checks every partition of a running store (`/admin/check`): what `shardlite check` does
    /// to a closed directory.
    fn check(&self) -> BoxFuture<'_, BackendResult<Vec<PartitionCheck>>> {
        Box::pin(async move { Err(BackendError::NotImplemented(format!("the {} backend has no check", self.name()))) })
    }

    /// Compacts every partition of a running store (`POST /admin/compact`): the space deletes
    /// left is given back to the file system.
    fn compact(&self) -> BoxFuture<'_, BackendResult<CompactReport>> {
        Box::pin(async move {
            Err(BackendError::NotImplemented(format!(
                "the {} backend does not compact through shardlite: use the database's own tools",
                self.name()
            )))
        })
    }

    /// Starts a backup of all the storage into the directory `to` on the server's machine (new
    /// or empty), running on after the answer: its status at the start.
    fn start_backup(&self, to: PathBuf, options: BackupOptions) -> BoxFuture<'_, BackendResult<BackupStatus>> {
        let _ = (to, options);
        Box::pin(async move { Err(self.no_backups()) })
    }

    /// The status of the backup running or last run.
    fn backup_status(&self) -> BoxFuture<'_, BackendResult<BackupStatus>> {
        Box::pin(async move { Err(self.no_backups()) })
    }

    /// What a backend without backups answers.
    fn no_backups(&self) -> BackendError {
        BackendError::NotImplemented(format!(
            "the {} backend does not make backups through shardlite: use the database's own tools",
            self.name()
        ))
    }

    /// The backend's figures now, for `/stats` and `/metrics`.
    fn figures(&self) -> BoxFuture<'_, BackendResult<Figures>>;

    /// Commits what is pending and releases the storage; later calls fail with `Closed`.
    fn close(&self) -> BoxFuture<'_, ()>;
}
