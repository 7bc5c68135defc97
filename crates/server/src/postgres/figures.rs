//! PostgreSQL's own figures, read from its statistics views in one place for both `/stats`
//! (JSON) and `/metrics` (OpenMetrics): the database's (`pg_stat_database` and its size), the
//! table's (`pg_stat_user_tables` over its partitions, `pg_total_relation_size`) and the WAL's
//! (`pg_stat_wal`, PostgreSQL 14+). The views trail commits by up to about a second.

use deadpool_postgres::{GenericClient, Status};
use prometheus_client::encoding::DescriptorEncoder;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::db_error;
use crate::{
    backend::BackendResult,
    metrics::{counter, gauge},
};

/// The `pg_stat_database` columns read, in `/stats`'s order, then the database's size.
const DATABASE: [&str; 12] = [
    "xact_commit",
    "xact_rollback",
    "blks_read",
    "blks_hit",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "deadlocks",
    "temp_bytes",
    "database_bytes",
];

/// One reading of the views.
#[derive(Debug, Clone)]
pub struct Figures {
    /// [`DATABASE`]'s values.
    database: [i64; 12],
    /// The table, all partitions.
    pub table: TableFigures,
    /// The WAL, if the server has `pg_stat_wal`.
    pub wal: Option<WalFigures>,
}

/// The table's figures, summed over its partitions.
#[derive(Debug, Clone, Copy, Serialize)]
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

/// `pg_stat_wal`: the whole server's WAL since the statistics were reset.
#[derive(Debug, Clone, Copy, Serialize)]
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

impl Figures {
    /// Reads the figures of the database and of `table`.
    pub async fn read<C: GenericClient + Sync>(client: &C, table: &str) -> BackendResult<Self> {
        let db = client
            .query_one(
                "SELECT xact_commit, xact_rollback, blks_read, blks_hit, tup_returned, tup_fetched, tup_inserted, \
                 tup_updated, tup_deleted, deadlocks, temp_bytes, pg_database_size(datname) \
                 FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .await
            .map_err(db_error)?;
        let t = client
            .query_one(
                "SELECT coalesce(sum(pg_total_relation_size(t.relid)), 0)::bigint, \
                 coalesce(sum(s.n_live_tup), 0)::bigint, coalesce(sum(s.n_tup_ins), 0)::bigint, \
                 coalesce(sum(s.n_tup_upd), 0)::bigint, coalesce(sum(s.n_tup_del), 0)::bigint \
                 FROM pg_partition_tree($1::text::regclass) t LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid",
                &[&table],
            )
            .await
            .map_err(db_error)?;
        // pg_stat_wal exists from PostgreSQL 14 on; older servers simply have no such figures.
        let wal = client
            .query_opt("SELECT wal_records, wal_fpi, wal_bytes::bigint, wal_sync FROM pg_stat_wal", &[])
            .await
            .ok()
            .flatten()
            .map(|r| WalFigures { wal_records: r.get(0), wal_fpi: r.get(1), wal_bytes: r.get(2), wal_sync: r.get(3) });
        Ok(Self {
            database: std::array::from_fn(|i| db.get(i)),
            table: TableFigures {
                bytes: t.get(0),
                live: t.get(1),
                inserted: t.get(2),
                updated: t.get(3),
                deleted: t.get(4),
            },
            wal,
        })
    }

    /// `/stats`'s `store.database`.
    pub fn database_json(&self) -> Map<String, Value> {
        DATABASE.iter().zip(self.database).map(|(name, v)| ((*name).to_owned(), json!(v))).collect()
    }

    fn database(&self, name: &str) -> u64 {
        DATABASE.iter().position(|n| *n == name).map_or(0, |i| self.database[i].unsigned_abs())
    }

    /// The figures as metrics: `shardlite_records` and `shardlite_db_bytes` (the table, as for
    /// the SQLite backend), then `shardlite_pg_*`, and the pool's.
    pub fn encode(&self, pool: &Status, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let t = &self.table;
        gauge(enc, "shardlite_records", "Live records: the table's n_live_tup (an estimate)", t.live.unsigned_abs())?;
        gauge(enc, "shardlite_db_bytes", "Bytes of the table, its partitions and indexes", t.bytes.unsigned_abs())?;
        gauge(enc, "shardlite_pg_database_bytes", "Bytes of the whole database", self.database("database_bytes"))?;
        for (name, help) in [
            ("xact_commit", "Transactions committed in the database (pg_stat_database)"),
            ("xact_rollback", "Transactions rolled back in the database"),
            ("blks_read", "Blocks the database read from the kernel (not in shared buffers)"),
            ("blks_hit", "Blocks found in shared buffers"),
            ("tup_inserted", "Rows inserted in the database"),
            ("tup_updated", "Rows updated in the database"),
            ("tup_deleted", "Rows deleted in the database"),
        ] {
            counter(enc, &format!("shardlite_pg_{name}"), help, self.database(name))?;
        }
        if let Some(w) = &self.wal {
            counter(
                enc,
                "shardlite_pg_wal_records",
                "WAL records the server wrote (pg_stat_wal)",
                w.wal_records.unsigned_abs(),
            )?;
            counter(enc, "shardlite_pg_wal_bytes", "WAL bytes the server wrote", w.wal_bytes.unsigned_abs())?;
            counter(enc, "shardlite_pg_wal_syncs", "WAL syncs to disk the server made", w.wal_sync.unsigned_abs())?;
        }
        gauge(enc, "shardlite_pg_pool_connections", "Connections open in the pool", pool.size as u64)?;
        gauge(enc, "shardlite_pg_pool_waiting", "Requests waiting for a pooled connection", pool.waiting as u64)
    }
}
