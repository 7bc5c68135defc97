//! Every SQL statement of the PostgreSQL backend, and how one [`Op`] runs on a connection or
//! inside a transaction. Statements are prepared once per pooled connection (`prepare_cached`).
//!
//! The counter is 1 on insert and +1 per update, so a put created its record exactly when the
//! counter it returns is 1 (no `xmax` trick needed). Conditional writes run the write with the
//! condition in its `WHERE` clause (or `ON CONFLICT DO NOTHING`); only when it touched no row
//! does a second statement read the current counter, to tell `NotFound` from
//! `ConditionFailed { current }`.

use deadpool_postgres::GenericClient;
use shardlite_engine::{Condition, Error as EngineError, Op, Outcome, Record, Written};

use super::db_error;
use crate::backend::{BackendError, BackendResult};

/// The statements, with the table's name filled in.
#[derive(Debug)]
pub struct Statements {
    /// Creates the table (and its hash partitions) if missing.
    pub create: Vec<String>,
    get: String,
    counter: String,
    upsert: String,
    insert: String,
    update: String,
    update_if: String,
    delete: String,
    delete_if: String,
}

impl Statements {
    /// The statements of table `table` (a checked identifier) with `partitions` hash
    /// partitions (0 or 1: one plain table).
    pub fn new(table: &str, partitions: u32) -> Self {
        let columns = "key bytea PRIMARY KEY, counter bigint NOT NULL, value bytea NOT NULL";
        let create = if partitions <= 1 {
            vec![format!("CREATE TABLE IF NOT EXISTS {table} ({columns})")]
        } else {
            let mut create = vec![format!("CREATE TABLE IF NOT EXISTS {table} ({columns}) PARTITION BY HASH (key)")];
            create.extend((0..partitions).map(|i| {
                format!(
                    "CREATE TABLE IF NOT EXISTS {table}_p{i} PARTITION OF {table} \
                     FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
                )
            }));
            create
        };
        Self {
            create,
            get: format!("SELECT counter, value FROM {table} WHERE key = $1"),
            counter: format!("SELECT counter FROM {table} WHERE key = $1"),
            upsert: format!(
                "INSERT INTO {table} (key, counter, value) VALUES ($1, 1, $2) ON CONFLICT (key) \
                 DO UPDATE SET counter = {table}.counter + 1, value = excluded.value RETURNING counter"
            ),
            insert: format!(
                "INSERT INTO {table} (key, counter, value) VALUES ($1, 1, $2) ON CONFLICT (key) DO NOTHING \
                 RETURNING counter"
            ),
            update: format!("UPDATE {table} SET counter = counter + 1, value = $2 WHERE key = $1 RETURNING counter"),
            update_if: format!(
                "UPDATE {table} SET counter = counter + 1, value = $2 WHERE key = $1 AND counter = $3 \
                 RETURNING counter"
            ),
            delete: format!("DELETE FROM {table} WHERE key = $1 RETURNING counter"),
            delete_if: format!("DELETE FROM {table} WHERE key = $1 AND counter = $2 RETURNING counter"),
        }
    }
}

/// Runs `sql` with `params`; the `counter` column of the row it returned, if any.
async fn counter_of<C: GenericClient + Sync>(
    client: &C,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> BackendResult<Option<u64>> {
    let stmt = client.prepare_cached(sql).await.map_err(db_error)?;
    let row = client.query_opt(&stmt, params).await.map_err(db_error)?;
    Ok(row.map(|r| r.get::<_, i64>(0).unsigned_abs()))
}

/// A counter condition as a parameter: counters are >= 1, so one that does not fit a bigint
/// becomes -1, which matches no record (as it never could).
fn want(counter: u64) -> i64 {
    i64::try_from(counter).unwrap_or(-1)
}

/// Runs one operation on `client` (a pooled connection or an open transaction).
pub async fn apply<C: GenericClient + Sync>(client: &C, s: &Statements, op: &Op) -> BackendResult<Outcome> {
    match op {
        Op::Get { key } => Ok(Outcome::Found(get(client, s, key).await?)),
        Op::Put { key, value, condition } => {
            let written = match condition {
                Condition::None => counter_of(client, &s.upsert, &[key, value]).await?,
                Condition::Absent => counter_of(client, &s.insert, &[key, value]).await?,
                Condition::Present => counter_of(client, &s.update, &[key, value]).await?,
                Condition::Counter(n) => counter_of(client, &s.update_if, &[key, value, &want(*n)]).await?,
            };
            match written {
                Some(counter) => Ok(Outcome::Written(Written { counter, created: counter == 1 })),
                None => Err(refusal(client, s, key, *condition == Condition::Absent).await),
            }
        }
        Op::Delete { key, condition } => {
            let deleted = match condition {
                Condition::None | Condition::Present => counter_of(client, &s.delete, &[key]).await?,
                Condition::Counter(n) => counter_of(client, &s.delete_if, &[key, &want(*n)]).await?,
                // Deleting a record that must not exist: nothing to delete either way.
                Condition::Absent => None,
            };
            match deleted {
                Some(counter) => Ok(Outcome::Deleted { counter }),
                None => Err(refusal(client, s, key, false).await),
            }
        }
    }
}

/// Reads one record.
pub async fn get<C: GenericClient + Sync>(client: &C, s: &Statements, key: &[u8]) -> BackendResult<Option<Record>> {
    let stmt = client.prepare_cached(&s.get).await.map_err(db_error)?;
    let row = client.query_opt(&stmt, &[&key]).await.map_err(db_error)?;
    Ok(row.map(|r| Record { counter: r.get::<_, i64>(0).unsigned_abs(), value: r.get(1) }))
}

/// Why a write touched no row: the current counter decides, as the engine's
/// [`Condition::check`] does (a missing key is `NotFound`, except for an insert-only put).
async fn refusal<C: GenericClient + Sync>(client: &C, s: &Statements, key: &[u8], insert_only: bool) -> BackendError {
    match counter_of(client, &s.counter, &[&key]).await {
        Err(err) => err,
        // The record vanished between the insert and this read: it existed, so the condition
        // failed, but there is no counter to name.
        Ok(None) if insert_only => EngineError::ConditionFailed { current: None }.into(),
        Ok(None) => EngineError::NotFound.into(),
        Ok(Some(current)) => EngineError::ConditionFailed { current: Some(current) }.into(),
    }
}
