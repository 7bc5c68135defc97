//! `GET /stats`: one JSON document with the store's figures (per partition: records, db / WAL /
//! index bytes, commits, merges; writer queue depths; the requests-per-commit histogram), their
//! totals, the process's `/proc/self/io` counters and CPU time, and the effective configuration
//! of the engine and of the server.

use std::sync::Arc;

use hyper::StatusCode;
use serde::Serialize;
use shardlite_engine::{Config, CreateOptions, Store, StoreStats};

use crate::{
    error::ApiError,
    options::ServerOptions,
    procinfo::ProcessStats,
    response::{self, Response},
    service::State,
};

/// The `/stats` document's common part; the backend's fields join it (see [`sqlite_fields`]).
#[derive(Serialize)]
struct Stats<'a> {
    /// This build's version.
    version: &'static str,
    /// The server's process id (so a local benchmark can read its `/proc/<pid>` figures).
    pid: u32,
    /// Seconds since the server started.
    uptime_seconds: f64,
    /// HTTP connections open now.
    connections_open: i64,
    /// Whether requests need a bearer token.
    auth: bool,
    /// `sqlite` or `postgres`.
    backend: &'static str,
    process: ProcessStats,
    server: &'a ServerOptions,
}

/// The SQLite backend's fields: sums over the partitions, the store's figures, the engine
/// settings.
#[derive(Serialize)]
struct SqliteFields<'a> {
    totals: Totals,
    store: StoreStats,
    config: EngineSettings<'a>,
}

/// Every engine setting in force: what the directory was created with, and the runtime ones.
#[derive(Serialize)]
struct EngineSettings<'a> {
    #[serde(flatten)]
    created: CreateOptions,
    #[serde(flatten)]
    config: &'a Config,
}

/// Sums over the partitions.
#[derive(Serialize, Default)]
struct Totals {
    records: u64,
    db_bytes: u64,
    wal_bytes: u64,
    index_bytes: u64,
    queued_jobs: usize,
}

/// Answers `/stats`.
pub async fn handle(state: &Arc<State>) -> Result<Response, ApiError> {
    let backend_fields = state.backend.stats().await?;
    let process = tokio::task::spawn_blocking(ProcessStats::read)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("stats failed: {e}")))?;
    let stats = Stats {
        version: env!("CARGO_PKG_VERSION"),
        pid: std::process::id(),
        uptime_seconds: state.started.elapsed().as_secs_f64(),
        connections_open: state.metrics.connections().get(),
        auth: state.auth.enabled(),
        backend: state.backend.name(),
        process,
        server: &state.options,
    };
    let mut doc = match serde_json::to_value(&stats) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    doc.extend(backend_fields);
    let mut body = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    body.push(b'\n');
    Ok(response::json(StatusCode::OK, body))
}

/// The SQLite backend's part of `/stats`. Reads file sizes: call it off the async runtime.
pub fn sqlite_fields(store: &Store) -> serde_json::Map<String, serde_json::Value> {
    let stats = store.stats();
    let totals = Totals {
        records: stats.sum(|p| p.records),
        db_bytes: stats.sum(|p| p.db_bytes),
        wal_bytes: stats.sum(|p| p.wal_bytes),
        index_bytes: stats.sum(|p| p.index_bytes),
        queued_jobs: stats.queue_depths.iter().sum(),
    };
    let config = EngineSettings { created: store.manifest().created_with(), config: store.config() };
    match serde_json::to_value(SqliteFields { totals, store: stats, config }) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}
