//! PostgreSQL's own figures, read from its statistics views in one place: the database's
//! (`pg_stat_database` and its size), the table's (`pg_stat_user_tables` over its partitions,
//! `pg_total_relation_size`) and the WAL's (`pg_stat_wal`, PostgreSQL 14+). The views trail
//! commits by up to about a second.

use deadpool_postgres::GenericClient;

use shardlite_server::{
    figures::{DatabaseFigures, TableFigures, WalFigures},
    BackendResult,
};

use crate::error::db_error;

/// One reading of the views.
#[derive(Debug, Clone)]
pub struct Views {
    /// The database.
    pub database: DatabaseFigures,
    /// The table, all partitions.
    pub table: TableFigures,
    /// The WAL, if the server has `pg_stat_wal`.
    pub wal: Option<WalFigures>,
}

impl Views {
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
            database: DatabaseFigures {
                xact_commit: db.get(0),
                xact_rollback: db.get(1),
                blks_read: db.get(2),
                blks_hit: db.get(3),
                tup_returned: db.get(4),
                tup_fetched: db.get(5),
                tup_inserted: db.get(6),
                tup_updated: db.get(7),
                tup_deleted: db.get(8),
                deadlocks: db.get(9),
                temp_bytes: db.get(10),
                database_bytes: db.get(11),
            },
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
}
