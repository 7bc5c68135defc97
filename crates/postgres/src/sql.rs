//! Every SQL statement of the PostgreSQL backend, and how one [`Op`] runs on a connection or
//! inside a transaction. Statements are prepared once per pooled connection (`prepare_cached`).
//!
//! Like the engine, a record has an id (from the sequence `<table>_ids`, assigned at insert and
//! never reused, so a key deleted and created again is a new record) and an update counter (1
//! on insert, +1 per update); its [`Version`] is `(0, id, counter)` (this backend has no
//! epochs: its durability and its restores are PostgreSQL's). A put created its record
//! exactly when the counter it returns is 1. Conditional writes run the write with the
//! condition in its `WHERE` clause (or `ON CONFLICT DO NOTHING`); only when it touched no row
//! does a second statement read the current version, to answer `ConditionFailed { current }`
//! or `NotFound`.

use deadpool_postgres::GenericClient;
use shardlite_engine::{Condition, Op, Outcome, Record, Version, Written};

use shardlite_server::{BackendError, BackendResult};

use crate::error::db_error;

/// The epoch of every version this backend gives.
const EPOCH: u64 = 0;

/// The statements, with the table's name filled in.
#[derive(Debug)]
pub struct Statements {
    /// Creates the table (and its hash partitions, and its id sequence) if missing, and gives
    /// a table made before ids existed its id column.
    pub create: Vec<String>,
    get: String,
    current: String,
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
        let ids = format!("{table}_ids");
        let columns = format!(
            "key bytea PRIMARY KEY, id bigint NOT NULL DEFAULT nextval('{ids}'), counter bigint NOT NULL, \
             value bytea NOT NULL"
        );
        let mut create = vec![format!("CREATE SEQUENCE IF NOT EXISTS {ids}")];
        if partitions <= 1 {
            create.push(format!("CREATE TABLE IF NOT EXISTS {table} ({columns})"));
        } else {
            create.push(format!("CREATE TABLE IF NOT EXISTS {table} ({columns}) PARTITION BY HASH (key)"));
            create.extend((0..partitions).map(|i| {
                format!(
                    "CREATE TABLE IF NOT EXISTS {table}_p{i} PARTITION OF {table} \
                     FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
                )
            }));
        }
        create
            .push(format!("ALTER TABLE {table} ADD COLUMN IF NOT EXISTS id bigint NOT NULL DEFAULT nextval('{ids}')"));
        // Dropping the table drops its sequence.
        create.push(format!("ALTER SEQUENCE {ids} OWNED BY {table}.id"));
        Self {
            create,
            get: format!("SELECT id, counter, value FROM {table} WHERE key = $1"),
            current: format!("SELECT id, counter FROM {table} WHERE key = $1"),
            upsert: format!(
                "INSERT INTO {table} (key, counter, value) VALUES ($1, 1, $2) ON CONFLICT (key) \
                 DO UPDATE SET counter = {table}.counter + 1, value = excluded.value RETURNING id, counter"
            ),
            insert: format!(
                "INSERT INTO {table} (key, counter, value) VALUES ($1, 1, $2) ON CONFLICT (key) DO NOTHING \
                 RETURNING id, counter"
            ),
            update: format!(
                "UPDATE {table} SET counter = counter + 1, value = $2 WHERE key = $1 RETURNING id, counter"
            ),
            update_if: format!(
                "UPDATE {table} SET counter = counter + 1, value = $2 WHERE key = $1 AND id = $3 AND counter = $4 \
                 RETURNING id, counter"
            ),
            delete: format!("DELETE FROM {table} WHERE key = $1 RETURNING id, counter"),
            delete_if: format!("DELETE FROM {table} WHERE key = $1 AND id = $2 AND counter = $3 RETURNING id, counter"),
        }
    }
}

/// The version of a row whose first two columns are `id, counter`.
fn version_of(row: &tokio_postgres::Row) -> Version {
    Version { epoch: EPOCH, id: row.get::<_, i64>(0).unsigned_abs(), counter: row.get::<_, i64>(1).unsigned_abs() }
}

/// Runs `sql` with `params`; the version of the row it returned, if any.
async fn version_from<C: GenericClient + Sync>(
    client: &C,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> BackendResult<Option<Version>> {
    let stmt = client.prepare_cached(sql).await.map_err(db_error)?;
    let row = client.query_opt(&stmt, params).await.map_err(db_error)?;
    Ok(row.as_ref().map(version_of))
}

/// A version this backend could have given, as the `(id, counter)` parameters of a
/// conditional statement; `None` for any other (it can match no row).
fn ours(version: Version) -> Option<(i64, i64)> {
    let id = i64::try_from(version.id).ok()?;
    let counter = i64::try_from(version.counter).ok()?;
    (version.epoch == EPOCH).then_some((id, counter))
}

/// Runs one operation on `client` (a pooled connection or an open transaction).
pub async fn apply<C: GenericClient + Sync>(client: &C, s: &Statements, op: &Op) -> BackendResult<Outcome> {
    match op {
        Op::Get { key } => Ok(Outcome::Found(get(client, s, key).await?)),
        Op::Put { key, value, condition } => {
            let written = match condition {
                Condition::None => version_from(client, &s.upsert, &[key, value]).await?,
                Condition::Absent => version_from(client, &s.insert, &[key, value]).await?,
                Condition::Present => version_from(client, &s.update, &[key, value]).await?,
                Condition::Version(v) => match ours(*v) {
                    Some((id, counter)) => version_from(client, &s.update_if, &[key, value, &id, &counter]).await?,
                    None => None,
                },
                _ => None,
            };
            match written {
                Some(version) => Ok(Outcome::Written(Written { version, created: version.counter == 1 })),
                None => Err(refusal(client, s, key, false).await),
            }
        }
        Op::Delete { key, condition } => {
            let deleted = match condition {
                Condition::None | Condition::Present => version_from(client, &s.delete, &[key]).await?,
                Condition::Version(v) => match ours(*v) {
                    Some((id, counter)) => version_from(client, &s.delete_if, &[key, &id, &counter]).await?,
                    None => None,
                },
                _ => None,
            };
            match deleted {
                Some(version) => Ok(Outcome::Deleted { version }),
                None => Err(refusal(client, s, key, matches!(condition, Condition::None | Condition::Absent)).await),
            }
        }
    }
}

/// Reads one record.
pub async fn get<C: GenericClient + Sync>(client: &C, s: &Statements, key: &[u8]) -> BackendResult<Option<Record>> {
    let stmt = client.prepare_cached(&s.get).await.map_err(db_error)?;
    let row = client.query_opt(&stmt, &[&key]).await.map_err(db_error)?;
    Ok(row.map(|r| Record { version: version_of(&r), value: r.get(2) }))
}

/// Why a write touched no row: the current version decides, as the engine's
/// [`Condition::check`] does. A missing key is `NotFound` only for a delete whose condition
/// allows absence (`absent_is_not_found`); for any other condition it failed (RFC 9110).
async fn refusal<C: GenericClient + Sync>(
    client: &C,
    s: &Statements,
    key: &[u8],
    absent_is_not_found: bool,
) -> BackendError {
    match version_from(client, &s.current, &[&key]).await {
        Err(err) => err,
        Ok(None) if absent_is_not_found => BackendError::NotFound,
        Ok(current) => BackendError::ConditionFailed { current },
    }
}
