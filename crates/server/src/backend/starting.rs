//! [`Starting`]: the backend of a server that answers before its storage is open. Until
//! [`Starting::ready`] hands it the real backend, every storage request answers 503
//! `unavailable` and `/readyz` says the storage is opening, while `/healthz` (liveness) already
//! answers: a directory that takes minutes to recover is not mistaken for a dead process.

use std::{
    path::PathBuf,
    sync::{Arc, OnceLock},
};

use bytes::Bytes;
use shardlite_engine::{
    backup::BackupOptions,
    commitlog::Replicate,
    replication::{Frame, Receipt, Sealed},
    transfer::Received,
    CompactReport, MovePart, Op, Outcome, PartitionCheck, Record,
};

use super::{
    backup_status::BackupStatus, figures::Figures, Backend, BackendError, BackendResult, BoxFuture, Chunks, Departure,
    Export, KeyPage,
};

/// What `/readyz` and storage requests answer while the storage opens.
const OPENING: &str = "the storage is opening (recovering the data directory, or connecting)";

/// A backend that is the real one once [`Starting::ready`] was called, and "opening" before.
#[derive(Debug)]
pub struct Starting {
    backend: OnceLock<Arc<dyn Backend>>,
    /// The largest value the backend will take, so that bodies are bounded (and then refused
    /// with 503) before it is open.
    max_value: usize,
}

impl Starting {
    /// A backend still opening, which will take values up to `max_value` bytes.
    pub fn new(max_value: usize) -> Arc<Self> {
        Arc::new(Self { backend: OnceLock::new(), max_value })
    }

    /// From now on, serves `backend`. Later calls are ignored.
    pub fn ready(&self, backend: Arc<dyn Backend>) {
        let _ = self.backend.set(backend);
    }

    fn opened(&self) -> BackendResult<&Arc<dyn Backend>> {
        self.backend.get().ok_or_else(|| BackendError::Unavailable(OPENING.into()))
    }
}

impl Backend for Starting {
    fn name(&self) -> &'static str {
        self.backend.get().map_or("opening", |b| b.name())
    }

    fn max_value(&self) -> usize {
        self.backend.get().map_or(self.max_value, |b| b.max_value())
    }

    fn get(&self, key: Vec<u8>) -> BoxFuture<'_, BackendResult<Option<Record>>> {
        Box::pin(async move { self.opened()?.get(key).await })
    }

    fn write(&self, op: Op) -> BoxFuture<'_, BackendResult<Outcome>> {
        Box::pin(async move { self.opened()?.write(op).await })
    }

    fn batch(&self, ops: Vec<Op>) -> BoxFuture<'_, BackendResult<Vec<BackendResult<Outcome>>>> {
        Box::pin(async move { self.opened()?.batch(ops).await })
    }

    fn keys(&self, partition: u32, after: u64, limit: usize) -> BoxFuture<'_, BackendResult<KeyPage>> {
        Box::pin(async move { self.opened()?.keys(partition, after, limit).await })
    }

    fn export(&self, partition: u32) -> BoxFuture<'_, BackendResult<Export>> {
        Box::pin(async move { self.opened()?.export(partition).await })
    }

    fn send_partition(&self, partition: u32, part: MovePart) -> BoxFuture<'_, BackendResult<Export>> {
        Box::pin(async move { self.opened()?.send_partition(partition, part).await })
    }

    fn adopt(&self, partition: u32, part: MovePart, chunks: Chunks) -> BoxFuture<'_, BackendResult<Received>> {
        Box::pin(async move { self.opened()?.adopt(partition, part, chunks).await })
    }

    fn replicate_with(&self, replicator: Arc<dyn Replicate>) -> BackendResult<()> {
        self.opened()?.replicate_with(replicator)
    }

    fn receive(&self, owner: String, frame: Frame) -> BoxFuture<'_, BackendResult<Receipt>> {
        Box::pin(async move { self.opened()?.receive(owner, frame).await })
    }

    fn partition_epoch(&self, partition: u32) -> Option<u64> {
        self.opened().ok()?.partition_epoch(partition)
    }

    fn seal(&self, owner: String) -> BoxFuture<'_, BackendResult<Sealed>> {
        Box::pin(async move { self.opened()?.seal(owner).await })
    }

    fn log_end(&self) -> Option<u64> {
        self.opened().ok().and_then(|b| b.log_end())
    }

    fn copy_heard(&self, owner: &str, partition: u32) -> Option<std::time::Duration> {
        self.opened().ok().and_then(|b| b.copy_heard(owner, partition))
    }

    fn unseal(&self, owner: String) -> BackendResult<bool> {
        self.opened()?.unseal(owner)
    }

    fn tail(&self, owner: String, partition: u32, after: u64) -> BoxFuture<'_, BackendResult<Bytes>> {
        Box::pin(async move { self.opened()?.tail(owner, partition, after).await })
    }

    fn catch_up(&self, owner: String, partition: u32, frame: Bytes) -> BoxFuture<'_, BackendResult<()>> {
        Box::pin(async move { self.opened()?.catch_up(owner, partition, frame).await })
    }

    fn promote(&self, owner: String, partition: u32) -> BoxFuture<'_, BackendResult<u64>> {
        Box::pin(async move { self.opened()?.promote(owner, partition).await })
    }

    fn hand_over(
        &self,
        owner: String,
        partition: u32,
        through: u64,
        epoch: Option<u64>,
    ) -> BoxFuture<'_, BackendResult<u64>> {
        Box::pin(async move { self.opened()?.hand_over(owner, partition, through, epoch).await })
    }

    fn send_copy(&self, partition: u32) -> BoxFuture<'_, BackendResult<(u64, Chunks)>> {
        Box::pin(async move { self.opened()?.send_copy(partition).await })
    }

    fn take_copy(
        &self,
        owner: String,
        partition: u32,
        position: u64,
        chunks: Chunks,
    ) -> BoxFuture<'_, BackendResult<Received>> {
        Box::pin(async move { self.opened()?.take_copy(owner, partition, position, chunks).await })
    }

    fn depart(&self, partition: u32, step: Departure) -> BoxFuture<'_, BackendResult<u64>> {
        Box::pin(async move { self.opened()?.depart(partition, step).await })
    }

    fn check(&self) -> BoxFuture<'_, BackendResult<Vec<PartitionCheck>>> {
        Box::pin(async move { self.opened()?.check().await })
    }

    fn compact(&self) -> BoxFuture<'_, BackendResult<CompactReport>> {
        Box::pin(async move { self.opened()?.compact().await })
    }

    fn start_backup(&self, to: PathBuf, options: BackupOptions) -> BoxFuture<'_, BackendResult<BackupStatus>> {
        Box::pin(async move { self.opened()?.start_backup(to, options).await })
    }

    fn backup_status(&self) -> BoxFuture<'_, BackendResult<BackupStatus>> {
        Box::pin(async move { self.opened()?.backup_status().await })
    }

    fn unready(&self) -> Option<String> {
        match self.backend.get() {
            Some(backend) => backend.unready(),
            None => Some(OPENING.into()),
        }
    }

    fn figures(&self) -> BoxFuture<'_, BackendResult<Figures>> {
        Box::pin(async move { self.opened()?.figures().await })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(backend) = self.backend.get() {
                backend.close().await;
            }
        })
    }
}
