//! [`Backend`]: the seam between the HTTP layer and storage. The handlers only talk to this
//! trait; [`SqliteBackend`] delegates to shardlite's engine ([`Store`]) and
//! [`crate::postgres::PgBackend`] to a PostgreSQL server. Both speak the engine's vocabulary
//! ([`Op`], [`Outcome`], [`Record`], [`EngineError`]): counter 1 on insert and +1 per update,
//! conditions checked atomically with the write, `NotFound` / `ConditionFailed { current }`.

use std::{future::Future, pin::Pin, sync::Arc};

use prometheus_client::encoding::DescriptorEncoder;
use shardlite_engine::{Error as EngineError, Op, Outcome, Record, Store};

use crate::metrics;

/// A boxed, sendable future: what the object-safe [`Backend`] methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a backend can fail with: the engine's errors (also used by other backends for the
/// same situations: not found, condition failed, too large, overloaded, closed), or a failure
/// of a database server the engine knows nothing about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// An error with the engine's meaning (and status mapping).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The database cannot be reached right now (no pooled connection in time): 503.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// The database refused or failed a statement: 500.
    #[error("database error: {0}")]
    Database(String),
}

/// A result of a backend operation.
pub type BackendResult<T> = Result<T, BackendError>;

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

    /// The backend's part of `/stats`: a JSON object whose fields join the document.
    fn stats(&self) -> BoxFuture<'_, BackendResult<serde_json::Map<String, serde_json::Value>>>;

    /// Adds the backend's own figures to a `/metrics` scrape (called off the async runtime).
    fn encode_metrics(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error>;

    /// Commits what is pending and releases the storage; later calls fail with `Closed`.
    fn close(&self) -> BoxFuture<'_, ()>;
}

/// shardlite's own engine: SQLite partitions, compact index, group commit.
#[derive(Debug, Clone)]
pub struct SqliteBackend {
    store: Arc<Store>,
}

impl SqliteBackend {
    /// Serves `store`.
    pub fn new(store: Arc<Store>) -> Self {
        Self { store }
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

    fn stats(&self) -> BoxFuture<'_, BackendResult<serde_json::Map<String, serde_json::Value>>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            // The figures include file sizes: read them on a blocking thread.
            tokio::task::spawn_blocking(move || crate::stats::sqlite_fields(&store))
                .await
                .map_err(|e| BackendError::Database(format!("stats failed: {e}")))
        })
    }

    fn encode_metrics(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        metrics::encode_store(&self.store, enc)
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            if let Err(err) = tokio::task::spawn_blocking(move || store.close()).await {
                tracing::error!(%err, "closing the store failed");
            }
        })
    }
}
