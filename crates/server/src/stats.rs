//! `GET /stats`: one JSON document with the store's figures (per partition: records, db / WAL /
//! index bytes, commits, merges; writer queue depths; the requests-per-commit histogram), their
//! totals, the process's `/proc/self/io` counters and CPU time, and the effective configuration
//! of the engine and of the server.

use std::sync::Arc;

use hyper::StatusCode;
use serde::Serialize;
use shardlite_engine::{Config, StoreStats};

use crate::{
    error::ApiError,
    options::ServerOptions,
    procinfo::ProcessStats,
    response::{self, Response},
    service::State,
};

/// The `/stats` document.
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
    /// Sums over the partitions.
    totals: Totals,
    store: StoreStats,
    process: ProcessStats,
    config: &'a Config,
    server: &'a ServerOptions,
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

/// Answers `/stats`; file sizes are read on a blocking thread.
pub async fn handle(state: &Arc<State>) -> Result<Response, ApiError> {
    let state = Arc::clone(state);
    let body = tokio::task::spawn_blocking(move || render(&state))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("stats failed: {e}")))?;
    Ok(response::json(StatusCode::OK, body))
}

fn render(state: &State) -> Vec<u8> {
    let store = state.store.stats();
    let totals = store.partitions.iter().fold(Totals::default(), |mut t, p| {
        t.records += p.records;
        t.db_bytes += p.db_bytes;
        t.wal_bytes += p.wal_bytes;
        t.index_bytes += p.index_bytes;
        t
    });
    let totals = Totals { queued_jobs: store.queue_depths.iter().sum(), ..totals };
    let stats = Stats {
        version: env!("CARGO_PKG_VERSION"),
        pid: std::process::id(),
        uptime_seconds: state.started.elapsed().as_secs_f64(),
        connections_open: state.metrics.connections().get(),
        auth: state.auth.enabled(),
        totals,
        store,
        process: ProcessStats::read(),
        config: state.store.config(),
        server: &state.options,
    };
    let mut body = serde_json::to_vec_pretty(&stats).unwrap_or_default();
    body.push(b'\n');
    body
}
