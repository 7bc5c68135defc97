//! [`Figures`]: what a backend reports about itself, as typed values: the engine's statistics
//! and settings, or PostgreSQL's own views and pool. The handlers of `/stats` (JSON) and
//! `/metrics` (OpenMetrics) render them; nothing here knows either format.

use serde::Serialize;
use shardlite_engine::{Config, CreateOptions, StoreStats};

/// A backend's figures at one moment.
#[derive(Debug, Clone)]
pub enum Figures {
    /// shardlite's engine.
    Sqlite(Box<SqliteFigures>),
    /// A PostgreSQL server.
    Postgres(Box<PostgresFigures>),
}

/// The engine's figures and the settings it runs with.
#[derive(Debug, Clone)]
pub struct SqliteFigures {
    /// Per partition, writers, queues, record cache, commit log.
    pub stats: StoreStats,
    /// What the directory was created with (every setting).
    pub created: CreateOptions,
    /// The runtime configuration.
    pub config: Config,
}

/// PostgreSQL's own figures, read from its statistics views (which trail commits by up to
/// about a second), and the backend's settings.
#[derive(Debug, Clone)]
pub struct PostgresFigures {
    /// `user@host:port/db`, never the password.
    pub server: String,
    /// The table, all partitions.
    pub table: TableFigures,
    /// The database (`pg_stat_database` and its size).
    pub database: DatabaseFigures,
    /// The whole server's WAL, if it has `pg_stat_wal` (PostgreSQL 14+).
    pub wal: Option<WalFigures>,
    /// The connection pool.
    pub pool: PoolFigures,
    /// How the backend is set up.
    pub settings: PostgresSettings,
}

/// The table's figures, summed over its partitions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TableFigures {
    /// Bytes, indexes and TOAST included.
    pub bytes: i64,
    /// Live tuples (an estimate kept by the statistics).
    #[serde(rename = "live_tuples")]
    pub live: i64,
    /// Tuples inserted since the statistics were reset.
    pub inserted: i64,
    /// Tuples updated.
    pub updated: i64,
    /// Tuples deleted.
    pub deleted: i64,
}

/// `pg_stat_database` of the database (all of it, not only this server's table), and its size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DatabaseFigures {
    /// Transactions committed.
    pub xact_commit: i64,
    /// Transactions rolled back.
    pub xact_rollback: i64,
    /// Blocks read from the kernel (not found in shared buffers).
    pub blks_read: i64,
    /// Blocks found in shared buffers.
    pub blks_hit: i64,
    /// Rows returned by sequential scans and index entries by index scans.
    pub tup_returned: i64,
    /// Rows fetched by index scans.
    pub tup_fetched: i64,
    /// Rows inserted.
    pub tup_inserted: i64,
    /// Rows updated.
    pub tup_updated: i64,
    /// Rows deleted.
    pub tup_deleted: i64,
    /// Deadlocks detected.
    pub deadlocks: i64,
    /// Bytes written to temporary files.
    pub temp_bytes: i64,
    /// `pg_database_size`.
    pub database_bytes: i64,
}

/// `pg_stat_wal`: the whole server's WAL since the statistics were reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WalFigures {
    /// WAL records written.
    pub wal_records: i64,
    /// Full page images written.
    pub wal_fpi: i64,
    /// WAL bytes written.
    pub wal_bytes: i64,
    /// Times the WAL was synced to disk.
    pub wal_sync: i64,
}

/// The connection pool now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PoolFigures {
    /// Connections it may hold.
    pub max_size: usize,
    /// Connections open.
    pub size: usize,
    /// Connections open and idle.
    pub available: usize,
    /// Requests waiting for a connection.
    pub waiting: usize,
}

/// How the PostgreSQL backend is set up (never the URL: it may hold a password).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PostgresSettings {
    /// The table.
    pub table: String,
    /// Its hash partitions (1: a plain table).
    pub partitions: u32,
    /// Connections of the pool.
    pub pool_size: usize,
    /// Largest value, bytes.
    pub max_value: usize,
}
