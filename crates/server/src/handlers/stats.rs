//! `GET /stats`: one JSON document with the server's figures (version, uptime, connections,
//! the process's `/proc/self/io` counters and CPU time, its options) and the backend's
//! [`Figures`]: for the engine, per partition records, db / WAL / index bytes, commits, merges,
//! writer queue depths, the requests-per-commit histogram, their totals, and every engine
//! setting in force; for PostgreSQL, its statistics views, the pool and its settings; on a
//! cluster node whose partitions have copies, its replication (`ReplicationReport`).

use std::sync::Arc;

use hyper::StatusCode;
use serde::Serialize;
use shardlite_engine::{Config, CreateOptions, StoreStats};
use shardlite_proc::ProcessStats;

use crate::{
    backend::figures::{
        DatabaseFigures, Figures, PoolFigures, PostgresFigures, PostgresSettings, TableFigures, WalFigures,
    },
    cluster::ReplicationReport,
    http::{
        error::ApiError,
        options::ServerOptions,
        response::{self, Response},
        state::State,
    },
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
    /// `sqlite` or `postgres`.
    backend: &'static str,
    process: ProcessStats,
    server: &'a ServerOptions,
    /// A cluster node's replication to the copies of its partitions, if they have copies.
    #[serde(skip_serializing_if = "Option::is_none")]
    replication: Option<ReplicationReport>,
    #[serde(flatten)]
    figures: BackendFields<'a>,
}

/// The backend's fields: `totals`, `store` and `config`.
#[derive(Serialize)]
#[serde(untagged)]
enum BackendFields<'a> {
    Sqlite { totals: Totals, store: &'a StoreStats, config: EngineSettings<'a> },
    Postgres { totals: PostgresTotals, store: PostgresStore<'a>, config: &'a PostgresSettings },
}

/// The engine's sums over the partitions.
#[derive(Serialize)]
struct Totals {
    records: u64,
    db_bytes: u64,
    wal_bytes: u64,
    index_bytes: u64,
    queued_jobs: usize,
}

/// Every engine setting in force: what the directory was created with, and the runtime ones.
#[derive(Serialize)]
struct EngineSettings<'a> {
    #[serde(flatten)]
    created: &'a CreateOptions,
    #[serde(flatten)]
    config: &'a Config,
}

/// The table's live tuples (an estimate) and bytes, as the engine's totals.
#[derive(Serialize)]
struct PostgresTotals {
    records: i64,
    db_bytes: i64,
}

/// PostgreSQL's own figures.
#[derive(Serialize)]
struct PostgresStore<'a> {
    server: &'a str,
    table: &'a TableFigures,
    database: &'a DatabaseFigures,
    wal: &'a Option<WalFigures>,
    pool: &'a PoolFigures,
}

impl<'a> BackendFields<'a> {
    fn of(figures: &'a Figures) -> Self {
        match figures {
            Figures::Sqlite(f) => {
                let stats = &f.stats;
                let totals = Totals {
                    records: stats.sum(|p| p.records),
                    db_bytes: stats.sum(|p| p.db_bytes),
                    wal_bytes: stats.sum(|p| p.wal_bytes),
                    index_bytes: stats.sum(|p| p.index_bytes),
                    queued_jobs: stats.queue_depths.iter().sum(),
                };
                let config = EngineSettings { created: &f.created, config: &f.config };
                Self::Sqlite { totals, store: stats, config }
            }
            Figures::Postgres(f) => {
                let PostgresFigures { server, table, database, wal, pool, settings } = f.as_ref();
                let totals = PostgresTotals { records: table.live, db_bytes: table.bytes };
                Self::Postgres { totals, store: PostgresStore { server, table, database, wal, pool }, config: settings }
            }
        }
    }
}

/// Answers `/stats`.
pub async fn handle(state: &Arc<State>) -> Result<Response, ApiError> {
    let figures = state.backend.figures().await?;
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
        replication: state.cluster.as_ref().and_then(|c| c.replication_report()),
        figures: BackendFields::of(&figures),
    };
    // Through a `Value`, so the fields come out in one (alphabetical) order whatever the backend.
    let doc = serde_json::to_value(&stats)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("stats failed: {e}")))?;
    let mut body = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    body.push(b'\n');
    Ok(response::json(StatusCode::OK, body))
}
