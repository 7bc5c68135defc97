//! [`SqliteBackend`]: the [`Backend`] of shardlite's own engine (a [`Store`]): reads on its
//! lookup threads, writes through its writer queues, figures read off the async runtime; and
//! the one mapping of the engine's errors into [`BackendError`].

use std::{path::PathBuf, sync::Arc};

use shardlite_engine::{backup::BackupOptions, Error as EngineError, Op, Outcome, Record, Store};

use crate::{
    backend::{Backend, BackendError, BackendResult, BoxFuture, KeyPage},
    backup_job::{BackupJob, BackupStatus},
    figures::{Figures, SqliteFigures},
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
        Box::pin(async move { Ok(self.store.submit(op)?.await?) })
    }

    fn batch(&self, ops: Vec<Op>) -> BoxFuture<'_, BackendResult<Vec<BackendResult<Outcome>>>> {
        Box::pin(async move {
            let outcomes = self.store.submit_batch(ops)?.resolve().await;
            Ok(outcomes.into_iter().map(|r| r.map_err(BackendError::from)).collect())
        })
    }

    fn keys(&self, partition: u32, after: u64, limit: usize) -> BoxFuture<'_, BackendResult<KeyPage>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            let partitions = store.manifest().partitions;
            if partition >= partitions {
                let message = format!("partition {partition} does not exist: the partitions are 0..{partitions}");
                return Err(BackendError::BadQuery(message));
            }
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
            // Manifest, Config and any variant added later: none is the client's doing.
            err => Self::Internal(err.to_string()),
        }
    }
}
