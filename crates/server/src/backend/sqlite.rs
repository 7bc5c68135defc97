//! [`SqliteBackend`]: the [`Backend`] of shardlite's own engine (a [`Store`]): reads on its
//! lookup threads, writes through its writer queues, figures read off the async runtime; and
//! the one mapping of the engine's errors into [`BackendError`].

use std::{path::PathBuf, sync::Arc};

use bytes::Bytes;
use shardlite_engine::{
    backup::BackupOptions,
    bin_format,
    commitlog::Replicate,
    replication::{Frame, Receipt, Sealed},
    transfer::Received,
    Adoption, CompactReport, Error as EngineError, MovePart, Op, Outcome, PartitionCheck, Record, Store,
};

use super::{
    backup_job::BackupJob,
    backup_status::BackupStatus,
    figures::{Figures, SqliteFigures},
    Backend, BackendError, BackendResult, BoxFuture, Chunks, Departure, Export, KeyPage,
};

/// shardlite's own engine: SQLite partitions, compact index, group commit.
#[derive(Debug, Clone)]
pub struct SqliteBackend {
    store: Arc<Store>,
    /// The backup running or last run.
    backup: Arc<BackupJob>,
}

impl SqliteBackend {
    /// Serves `store`.
    pub fn new(store: Arc<Store>) -> Self {
        Self { store, backup: Arc::default() }
    }
}

/// Bytes of an export's chunk.
const EXPORT_CHUNK: usize = 256 << 10;
/// Chunks an export reads ahead of a slow client.
const EXPORT_AHEAD: usize = 4;

impl SqliteBackend {
    /// The partition's snapshot, encoded and sent chunk by chunk; ends early (without the end
    /// marker) if reading fails or the client goes away.
    fn stream_partition(store: &Store, partition: u32, chunks: &tokio::sync::mpsc::Sender<Bytes>) {
        let mut chunk = Vec::with_capacity(EXPORT_CHUNK + 4096);
        chunk.extend_from_slice(bin_format::MAGIC);
        let mut records = 0u64;
        let send = |chunk: &mut Vec<u8>| {
            let full = std::mem::replace(chunk, Vec::with_capacity(EXPORT_CHUNK + 4096));
            chunks.blocking_send(Bytes::from(full)).map_err(|_| EngineError::Closed)
        };
        let read = store.snapshot(partition, |r| {
            bin_format::put_record(&mut chunk, r.key, r.value, r.version.counter);
            records += 1;
            match chunk.len() >= EXPORT_CHUNK {
                true => send(&mut chunk),
                false => Ok(()),
            }
        });
        match read {
            Ok(()) => {
                bin_format::put_end(&mut chunk, records);
                let _ = send(&mut chunk);
            }
            Err(EngineError::Closed) => {}
            Err(e) => tracing::warn!(partition, "export stopped after {records} records: {e}"),
        }
    }
}

/// Takes `part` of partition `partition` in from the `chunks` of a transfer stream; on any
/// failure the partition is emptied again. What the stream said.
fn adopt(
    store: &Store,
    partition: u32,
    part: MovePart,
    mut chunks: tokio::sync::mpsc::Receiver<Bytes>,
) -> Result<Received, EngineError> {
    let mut adoption = store.adopt(partition, part)?;
    let mut pull = || {
        while let Some(piece) = chunks.blocking_recv() {
            adoption.push(store, &piece)?;
        }
        Ok::<_, EngineError>(())
    };
    let taken = pull().and_then(|()| adoption.finish(store));
    if taken.is_err() {
        if let Err(err) = Adoption::abandon(store, partition) {
            tracing::error!(partition, %err, "emptying a partition after a failed move failed");
        }
    }
    taken
}

/// The store's partition count, if `partition` is one of them; else a `BadQuery` naming them.
fn existing(store: &Store, partition: u32) -> BackendResult<u32> {
    let partitions = store.manifest().partitions;
    match partition < partitions {
        true => Ok(partitions),
        false => Err(BackendError::BadQuery(format!(
            "partition {partition} does not exist: the partitions are 0..{partitions}"
        ))),
    }
}

impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn max_value(&self) -> usize {
        self.store.config().max_value
    }

    fn get(&self, key: Vec<u8>) -> BoxFuture<'_, BackendResult<Option<Record>>> {
        Box::pin(async move { Ok(self.store.submit_get(key)?.await?) })
    }

    fn write(&self, op: Op) -> BoxFuture<'_, BackendResult<Outcome>> {
        Box::pin(async move { Ok(self.store.write(op).await?) })
    }

    fn batch(&self, ops: Vec<Op>) -> BoxFuture<'_, BackendResult<Vec<BackendResult<Outcome>>>> {
        Box::pin(async move {
            let outcomes = self.store.submit_batch(ops)?.resolve().await;
            Ok(outcomes.into_iter().map(|r| r.map_err(BackendError::from)).collect())
        })
    }

    fn export(&self, partition: u32) -> BoxFuture<'_, BackendResult<Export>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            let partitions = existing(&store, partition)?;
            let (sender, chunks) = tokio::sync::mpsc::channel(EXPORT_AHEAD);
            tokio::task::spawn_blocking(move || Self::stream_partition(&store, partition, &sender));
            Ok(Export { partitions, chunks })
        })
    }

    fn send_partition(&self, partition: u32, part: MovePart) -> BoxFuture<'_, BackendResult<Export>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            let partitions = existing(&store, partition)?;
            if part == MovePart::Changes && !store.moving_away(partition)? {
                return Err(BackendError::Conflict(format!(
                    "no move is copying partition {partition} away: its changes are not noted"
                )));
            }
            let (sender, chunks) = tokio::sync::mpsc::channel(EXPORT_AHEAD);
            tokio::task::spawn_blocking(move || {
                let send = |piece: Vec<u8>| sender.blocking_send(Bytes::from(piece)).map_err(|_| EngineError::Closed);
                match store.send_partition(partition, part, EXPORT_CHUNK, send) {
                    Ok(()) | Err(EngineError::Closed) => {}
                    Err(err) => tracing::warn!(partition, %err, "sending the partition for a move stopped"),
                }
            });
            Ok(Export { partitions, chunks })
        })
    }

    fn adopt(
        &self,
        partition: u32,
        part: MovePart,
        chunks: tokio::sync::mpsc::Receiver<Bytes>,
    ) -> BoxFuture<'_, BackendResult<Received>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            existing(&store, partition)?;
            tokio::task::spawn_blocking(move || adopt(&store, partition, part, chunks))
                .await
                .map_err(|e| BackendError::Internal(format!("taking the partition in failed: {e}")))?
                .map_err(BackendError::from)
        })
    }

    fn replicate_with(&self, replicator: Arc<dyn Replicate>) -> BackendResult<()> {
        Ok(self.store.replicate_with(replicator)?)
    }

    fn receive(&self, owner: String, frame: Frame) -> BoxFuture<'_, BackendResult<Receipt>> {
        let store = Arc::clone(&self.store);
        Box::pin(blocking(move || store.receive(&owner, frame)))
    }

    fn log_end(&self) -> Option<u64> {
        self.store.log_position()
    }

    fn partition_epoch(&self, partition: u32) -> Option<u64> {
        self.store.epoch_of(partition).ok()
    }

    fn seal(&self, owner: String) -> BoxFuture<'_, BackendResult<Sealed>> {
        Box::pin(async move { Ok(self.store.seal(&owner)) })
    }

    fn copy_heard(&self, owner: &str, partition: u32) -> Option<std::time::Duration> {
        self.store.copy_heard(owner, partition)
    }

    fn unseal(&self, owner: String) -> BackendResult<bool> {
        Ok(self.store.unseal(&owner))
    }

    fn tail(&self, owner: String, partition: u32, after: u64) -> BoxFuture<'_, BackendResult<Bytes>> {
        let store = Arc::clone(&self.store);
        Box::pin(blocking(move || store.tail(&owner, partition, after).map(|frame| Bytes::from(frame.encode()))))
    }

    fn catch_up(&self, owner: String, partition: u32, frame: Bytes) -> BoxFuture<'_, BackendResult<()>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            let frame = Frame::decode(&frame)?;
            let catch_up = move || store.catch_up(&owner, partition, frame);
            blocking(catch_up).await
        })
    }

    fn promote(&self, owner: String, partition: u32) -> BoxFuture<'_, BackendResult<u64>> {
        let store = Arc::clone(&self.store);
        Box::pin(blocking(move || store.promote(&owner, partition)))
    }

    fn hand_over(
        &self,
        owner: String,
        partition: u32,
        through: u64,
        epoch: Option<u64>,
    ) -> BoxFuture<'_, BackendResult<u64>> {
        let store = Arc::clone(&self.store);
        Box::pin(blocking(move || store.hand_over(&owner, partition, through, epoch)))
    }

    fn send_copy(&self, partition: u32) -> BoxFuture<'_, BackendResult<(u64, Chunks)>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            existing(&store, partition)?;
            let position = store.copy_position()?;
            let (sender, chunks) = tokio::sync::mpsc::channel(EXPORT_AHEAD);
            tokio::task::spawn_blocking(move || {
                let send = |piece: Vec<u8>| sender.blocking_send(Bytes::from(piece)).map_err(|_| EngineError::Closed);
                match store.send_copy(partition, EXPORT_CHUNK, send) {
                    Ok(()) | Err(EngineError::Closed) => {}
                    Err(err) => tracing::warn!(partition, %err, "sending a copy's snapshot stopped"),
                }
            });
            Ok((position, chunks))
        })
    }

    fn take_copy(
        &self,
        owner: String,
        partition: u32,
        position: u64,
        chunks: Chunks,
    ) -> BoxFuture<'_, BackendResult<Received>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            existing(&store, partition)?;
            let take = move || {
                let received = adopt(&store, partition, MovePart::Copy, chunks)?;
                store.resynced(&owner, partition, position).map(|()| received)
            };
            blocking(take).await
        })
    }

    fn depart(&self, partition: u32, step: Departure) -> BoxFuture<'_, BackendResult<u64>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            existing(&store, partition)?;
            let run = move || match step {
                Departure::Starting => {
                    store.begin_departure(partition).map(|()| 0).map_err(|err| BackendError::Conflict(err.to_string()))
                }
                Departure::Leaving => store.leave_partition(partition).map(|()| 0).map_err(BackendError::from),
                Departure::Kept => store.keep_partition(partition).map(|()| 0).map_err(BackendError::from),
                Departure::Gone => store.drop_partition(partition).map_err(BackendError::from),
            };
            tokio::task::spawn_blocking(run)
                .await
                .map_err(|e| BackendError::Internal(format!("a step of the partition's move failed: {e}")))?
        })
    }

    fn keys(&self, partition: u32, after: u64, limit: usize) -> BoxFuture<'_, BackendResult<KeyPage>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            let partitions = existing(&store, partition)?;
            // One more than asked for says whether the partition goes on.
            let read = move || {
                let mut keys = Vec::with_capacity(limit + 1);
                store.scan(partition, after, limit as u64 + 1, false, |r| {
                    keys.push((r.key.to_vec(), r.version));
                    Ok(())
                })?;
                let more = keys.len() > limit;
                keys.truncate(limit);
                let next = if more { keys.last().map(|(_, v)| v.id) } else { None };
                Ok::<_, EngineError>(KeyPage { partitions, keys, next })
            };
            let page = tokio::task::spawn_blocking(read)
                .await
                .map_err(|e| BackendError::Internal(format!("listing keys failed: {e}")))??;
            Ok(page)
        })
    }

    fn check(&self) -> BoxFuture<'_, BackendResult<Vec<PartitionCheck>>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.check())
                .await
                .map_err(|e| BackendError::Internal(format!("checking the store failed: {e}")))?
                .map_err(BackendError::from)
        })
    }

    fn compact(&self) -> BoxFuture<'_, BackendResult<CompactReport>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.compact())
                .await
                .map_err(|e| BackendError::Internal(format!("compacting the store failed: {e}")))?
                .map_err(BackendError::from)
        })
    }

    fn unready(&self) -> Option<String> {
        let faults = self.store.faults();
        (!faults.is_empty()).then(|| faults.join("; "))
    }

    fn start_backup(&self, to: PathBuf, options: BackupOptions) -> BoxFuture<'_, BackendResult<BackupStatus>> {
        let (store, job) = (Arc::clone(&self.store), Arc::clone(&self.backup));
        Box::pin(async move {
            // Checking the destination touches the disk: off the runtime.
            tokio::task::spawn_blocking(move || job.start(store, to, options))
                .await
                .map_err(|e| BackendError::Internal(format!("starting the backup failed: {e}")))?
        })
    }

    fn backup_status(&self) -> BoxFuture<'_, BackendResult<BackupStatus>> {
        Box::pin(async move { Ok(self.backup.status()) })
    }

    fn figures(&self) -> BoxFuture<'_, BackendResult<Figures>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            // The figures include file sizes: read them on a blocking thread.
            let read = move || SqliteFigures {
                stats: store.stats(),
                created: store.manifest().created_with(),
                config: store.config().clone(),
            };
            let figures = tokio::task::spawn_blocking(read)
                .await
                .map_err(|e| BackendError::Internal(format!("reading the store's figures failed: {e}")))?;
            Ok(Figures::Sqlite(Box::new(figures)))
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        let (store, backup) = (Arc::clone(&self.store), Arc::clone(&self.backup));
        Box::pin(async move {
            let close = move || {
                backup.cancel();
                store.close();
            };
            if let Err(err) = tokio::task::spawn_blocking(close).await {
                tracing::error!(%err, "closing the store failed");
            }
        })
    }
}

/// Runs `f`, which blocks on the store, on a blocking thread, not the runtime's: its result.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, EngineError> + Send + 'static) -> BackendResult<T> {
    Ok(tokio::task::spawn_blocking(f).await.map_err(|e| BackendError::Internal(e.to_string()))??)
}

impl From<EngineError> for BackendError {
    fn from(err: EngineError) -> Self {
        match err {
            EngineError::InvalidKey { len, .. } => Self::InvalidKey { len },
            EngineError::ValueTooLarge { len, max } => Self::ValueTooLarge { len, max },
            EngineError::NotFound => Self::NotFound,
            EngineError::ConditionFailed { current } => Self::ConditionFailed { current },
            EngineError::Closed => Self::Closed,
            EngineError::DiskFull(what) => Self::DiskFull(what),
            // The rest keep the engine's own words.
            err @ EngineError::Unsupported { .. } => Self::Unsupported(err.to_string()),
            err @ EngineError::Overloaded { .. } => Self::Overloaded(err.to_string()),
            err @ EngineError::PartitionFull { .. } => Self::PartitionFull(err.to_string()),
            err @ EngineError::Poisoned { .. } => Self::Poisoned(err.to_string()),
            err @ EngineError::Corrupt { .. } => Self::Corrupt(err.to_string()),
            err @ EngineError::Io { .. } => Self::Io(err.to_string()),
            err @ EngineError::Sqlite(_) => Self::Sqlite(err.to_string()),
            err @ EngineError::Unreplicated(_) => Self::Unreplicated(err.to_string()),
            err @ EngineError::Replication(_) => Self::BadQuery(err.to_string()),
            // Manifest, Config and any variant added later: none is the client's doing.
            err => Self::Internal(err.to_string()),
        }
    }
}
