//! [`PgBackend`]: the API over PostgreSQL, for comparing it with shardlite's engine on the same
//! HTTP layer. A `deadpool-postgres` pool of `tokio-postgres` connections, statements prepared
//! once per connection ([`sql`]), one table `kv(key bytea PRIMARY KEY, counter bigint, value
//! bytea)` — or, with `partitions` > 1, the same table hash-partitioned on the key into that
//! many partitions (PostgreSQL routes each row; the SQL is the same). Single writes are
//! autocommitted statements; a batch is one transaction, so unlike the SQLite engine it is
//! atomic as a whole. Durability is the server's (`synchronous_commit`, `fsync`). PostgreSQL's
//! own figures ([`crate::views`]) go to `/stats` and `/metrics` as the server's typed
//! [`PostgresFigures`]; its errors become the server's [`BackendError`]s here.

use std::{str::FromStr, time::Duration};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use shardlite_engine::{Op, Outcome, Record, MAX_KEY_LEN};
use shardlite_server::{
    figures::{PoolFigures, PostgresFigures, PostgresSettings},
    Backend, BackendError, BackendResult, BoxFuture, Figures,
};
use tokio_postgres::NoTls;

use crate::{
    error::{db_error, pool_error},
    sql::{self, Statements},
    views::Views,
};

/// The table a backend uses unless told otherwise.
pub const DEFAULT_TABLE: &str = "kv";

/// How long a request waits for a pooled connection before answering 503.
const POOL_WAIT: Duration = Duration::from_secs(5);

/// What to connect to and how the data is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// `postgres://USER[:PASSWORD]@HOST:PORT/DB` (or a key=value connection string).
    pub url: String,
    /// The table's name: lowercase letters, digits and `_`, starting with a letter.
    pub table: String,
    /// Hash partitions of a new table; 0 or 1: one plain table. Fixed at creation.
    pub partitions: u32,
    /// Connections in the pool.
    pub pool_size: usize,
    /// Largest value, bytes.
    pub max_value: usize,
}

impl PgOptions {
    /// One table `kv`, a pool of one connection per CPU (at least 4), 1 MiB values.
    pub fn new(url: impl Into<String>) -> Self {
        let cpus = std::thread::available_parallelism().map_or(4, usize::from);
        Self {
            url: url.into(),
            table: DEFAULT_TABLE.to_owned(),
            partitions: 1,
            pool_size: cpus.max(4),
            max_value: shardlite_engine::Config::default().max_value,
        }
    }
}

/// The PostgreSQL backend.
#[derive(Debug)]
pub struct PgBackend {
    pool: Pool,
    statements: Statements,
    options: PgOptions,
    /// The server's address and database, without the password: for `/stats`.
    target: String,
}

impl PgBackend {
    /// Connects, checks the connection, and creates the table if it is missing.
    /// An existing table is used as it is: its partition count replaces `options.partitions`
    /// (with a warning when they differ).
    pub async fn connect(mut options: PgOptions) -> anyhow::Result<Self> {
        let table = &options.table;
        let valid = table.starts_with(|c: char| c.is_ascii_lowercase())
            && table.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && table.len() <= 48;
        anyhow::ensure!(valid, "table name {table:?}: use lowercase letters, digits and _ (at most 48)");
        anyhow::ensure!(options.pool_size > 0, "the pool needs at least one connection");
        let config = tokio_postgres::Config::from_str(&options.url)
            .map_err(|e| anyhow::anyhow!("PostgreSQL URL {:?}: {e}", redact(&options.url)))?;
        let target = describe(&config);
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(POOL_WAIT))
            .build()?;
        let statements = Statements::new(table, options.partitions);
        let client = pool.get().await.map_err(|e| anyhow::anyhow!("connecting to {target}: {}", pool_error(e)))?;
        for create in &statements.create {
            client.batch_execute(create).await.map_err(|e| anyhow::anyhow!("creating {table}: {}", db_error(e)))?;
        }
        let leaves: i64 = client
            .query_one("SELECT count(*) FROM pg_partition_tree($1::text::regclass) WHERE level > 0", &[table])
            .await
            .map_err(|e| anyhow::anyhow!("reading the layout of {table}: {}", db_error(e)))?
            .get(0);
        let partitions = u32::try_from(leaves).unwrap_or(u32::MAX).max(1);
        if partitions != options.partitions.max(1) {
            let asked = options.partitions;
            tracing::warn!(table, partitions, asked, "the table exists with another layout; using it as it is");
        }
        options.partitions = partitions;
        drop(client);
        Ok(Self { pool, statements, options, target })
    }

    async fn client(&self) -> BackendResult<deadpool_postgres::Object> {
        self.pool.get().await.map_err(pool_error)
    }

    /// Refuses what the engine would refuse before running anything.
    fn check(&self, op: &Op) -> BackendResult<()> {
        let len = op.key().len();
        if len == 0 || len > MAX_KEY_LEN {
            return Err(BackendError::InvalidKey { len });
        }
        match op {
            Op::Put { value, .. } if value.len() > self.options.max_value => {
                Err(BackendError::ValueTooLarge { len: value.len(), max: self.options.max_value })
            }
            _ => Ok(()),
        }
    }

    async fn run_batch(&self, ops: Vec<Op>) -> BackendResult<Vec<BackendResult<Outcome>>> {
        // As the engine does: a bad key or an oversized value refuses the whole batch before
        // anything runs (not just that operation).
        for op in &ops {
            self.check(op)?;
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let mut results = Vec::with_capacity(ops.len());
        for op in &ops {
            let result = sql::apply(&tx, &self.statements, op).await;
            // A failed statement aborts the transaction: nothing of the batch is committed.
            if let Err(err @ (BackendError::Database(_) | BackendError::Unavailable(_))) = &result {
                let err = err.clone();
                drop(tx.rollback().await);
                return Ok(ops.iter().map(|_| Err(err.clone())).collect());
            }
            results.push(result);
        }
        match tx.commit().await {
            Ok(()) => Ok(results),
            Err(err) => {
                let err = db_error(err);
                Ok(ops.iter().map(|_| Err(err.clone())).collect())
            }
        }
    }

    async fn read_figures(&self) -> BackendResult<Figures> {
        let Views { database, table, wal } = Views::read(&self.client().await?, &self.options.table).await?;
        let status = self.pool.status();
        let pool = PoolFigures {
            max_size: status.max_size,
            size: status.size,
            available: status.available,
            waiting: status.waiting,
        };
        let PgOptions { table: name, partitions, pool_size, max_value, .. } = self.options.clone();
        let settings = PostgresSettings { table: name, partitions, pool_size, max_value };
        let server = self.target.clone();
        Ok(Figures::Postgres(Box::new(PostgresFigures { server, table, database, wal, pool, settings })))
    }
}

impl Backend for PgBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn max_value(&self) -> usize {
        self.options.max_value
    }

    fn get(&self, key: Vec<u8>) -> BoxFuture<'_, BackendResult<Option<Record>>> {
        Box::pin(async move {
            self.check(&Op::Get { key: key.clone() })?;
            sql::get(&self.client().await?, &self.statements, &key).await
        })
    }

    fn write(&self, op: Op) -> BoxFuture<'_, BackendResult<Outcome>> {
        Box::pin(async move {
            self.check(&op)?;
            sql::apply(&self.client().await?, &self.statements, &op).await
        })
    }

    fn batch(&self, ops: Vec<Op>) -> BoxFuture<'_, BackendResult<Vec<BackendResult<Outcome>>>> {
        Box::pin(self.run_batch(ops))
    }

    fn figures(&self) -> BoxFuture<'_, BackendResult<Figures>> {
        Box::pin(self.read_figures())
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        // Every write was committed before it was answered: closing only drops the connections.
        self.pool.close();
        Box::pin(std::future::ready(()))
    }
}

/// `user@host:port/db`, never the password.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("?");
    let db = config.get_dbname().unwrap_or(user);
    format!("{user}@{host}:{port}/{db}")
}

/// The URL with any password replaced by `***`, for messages and reports.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("postgres://me:secret@127.0.0.1:5432/db"), "postgres://me:***@127.0.0.1:5432/db");
        assert_eq!(redact("postgres://me@127.0.0.1/db"), "postgres://me@127.0.0.1/db");
        let config = tokio_postgres::Config::from_str("postgres://me:secret@127.0.0.1:5433/db").unwrap();
        assert_eq!(describe(&config), "me@127.0.0.1:5433/db");
    }

    #[tokio::test]
    async fn bad_table_names_are_refused_before_connecting() {
        for table in ["", "Kv", "1kv", "kv; drop", "k-v"] {
            let options = PgOptions { table: table.to_owned(), ..PgOptions::new("postgres://u@127.0.0.1:1/db") };
            let err = PgBackend::connect(options).await.unwrap_err();
            assert!(err.to_string().contains("table name"), "{table}: {err}");
        }
    }
}
