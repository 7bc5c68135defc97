//! The PostgreSQL row of `bench matrix` (`--with-postgres URL` or `--spawn-postgres`): a
//! `shardlite serve --backend` child on a fresh table of that server (or of a throwaway cluster,
//! crate `shardlite-postgres`), loaded with the same records through `POST /batch`, measured as
//! every configuration is, then stopped and its table dropped.

use std::{path::Path, time::Duration};

use shardlite_postgres::{cluster::BENCH_TUNING, Cluster};

use crate::{
    cost::{Local, ServerStats},
    http::Target,
    matrix::{POSTGRES, POSTGRES_STANDBY},
    measure::{run_workloads, Measure},
    preload::{self, DataSet},
    report::{RunReport, ServerInfo},
    server_process::ServerProcess,
    workload::Workload,
};

/// How long PostgreSQL's statistics may take to count the loaded records (`/stats` records).
const COUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// Flags of `bench matrix` for its PostgreSQL row.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PostgresArgs {
    /// Also measure PostgreSQL at this URL (postgres://USER[:PASSWORD]@HOST:PORT/DB) behind the
    /// same HTTP server (`serve --backend`), in a fresh table that is dropped afterwards.
    #[arg(long, value_name = "URL", conflicts_with = "spawn_postgres")]
    with_postgres: Option<String>,
    /// Also measure PostgreSQL on a throwaway cluster made from the system's binaries (initdb,
    /// pg_ctl), tuned for the benchmark and removed afterwards (docs/bench.md).
    #[arg(long)]
    spawn_postgres: bool,
    /// With `--spawn-postgres`: the cluster has a synchronous standby, a second server on this
    /// machine streaming its WAL, and every commit waits until the standby has flushed it
    /// (`synchronous_standby_names`, `synchronous_commit = on`; docs/bench.md).
    #[arg(long)]
    pg_standby: bool,
    /// Connections of the PostgreSQL server's pool [default: one per core].
    #[arg(long)]
    pg_pool_size: Option<usize>,
}

/// The PostgreSQL server of the row: a URL, and the cluster it belongs to if it was spawned
/// (stopped and removed when this is dropped).
pub struct PostgresRow {
    url: String,
    cluster: Option<Cluster>,
    pool_size: usize,
}

impl PostgresArgs {
    /// The row's server, if one was asked for: a throwaway cluster is started now.
    pub fn prepare(&self) -> anyhow::Result<Option<PostgresRow>> {
        anyhow::ensure!(self.pg_pool_size != Some(0), "--pg-pool-size must be positive");
        anyhow::ensure!(
            !self.pg_standby || self.spawn_postgres,
            "--pg-standby gives the cluster --spawn-postgres starts a standby: add --spawn-postgres"
        );
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let pool_size = self.pg_pool_size.unwrap_or(cores);
        Ok(match (&self.with_postgres, self.spawn_postgres) {
            (Some(url), _) => Some(PostgresRow { url: url.clone(), cluster: None, pool_size }),
            (None, true) => {
                let cluster = match self.pg_standby {
                    true => Cluster::start_with_standby(BENCH_TUNING)?,
                    false => Cluster::start(BENCH_TUNING)?,
                };
                let url = cluster.url.clone();
                Some(PostgresRow { url, cluster: Some(cluster), pool_size })
            }
            (None, false) => None,
        })
    }
}

impl PostgresRow {
    /// The row's key and label.
    pub fn name(&self) -> (&'static str, &'static str) {
        if self.cluster.as_ref().is_some_and(Cluster::has_standby) {
            POSTGRES_STANDBY
        } else {
            POSTGRES
        }
    }

    /// Spawns `serve --backend` on a fresh table, loads `records` through `POST /batch`, runs
    /// the workloads, stops the server and drops the table. Returns the server's flags as
    /// reported (no password).
    pub async fn measure(
        &self,
        measure: &Measure,
        records: u64,
        partitions: u32,
        workloads: &[Workload],
        runs: &mut Vec<RunReport>,
    ) -> anyhow::Result<Vec<String>> {
        let exe = std::env::current_exe()?;
        let table = shardlite_postgres::fresh_table();
        let shown = serve_args(&shardlite_postgres::redact(&self.url), &table, partitions, self.pool_size);
        eprintln!("configuration {}: {}", self.name().1, shown.join(" "));
        let server =
            ServerProcess::start(&exe, None, &serve_args(&self.url, &table, partitions, self.pool_size)).await?;
        // The cluster's data directory, if spawned (for its disk).
        let data_dir = self.cluster.as_ref().map(Cluster::data);
        let info = ServerInfo {
            url: server.url.clone(),
            spawned: true,
            data_dir: data_dir.as_ref().map(|d| d.display().to_string()),
            serve_args: shown.clone(),
        };
        let local = Local { data_dir: data_dir.as_deref().map(Path::to_owned), pid: Some(server.pid()), cold: None };
        let measured = async {
            let target = Target::resolve(&server.url).await?;
            let data =
                DataSet { records, seed: measure.seed, key_size: measure.key_size, value_size: measure.value_size };
            eprintln!("loading {records} records through POST /batch");
            preload::load(&target, data).await?;
            wait_for_count(&target, records).await?;
            let suffix = format!(" [{}]", self.name().0);
            run_workloads(measure, &target, None, &local, &info, workloads, &suffix, runs).await
        }
        .await;
        let stopped = server.stop();
        let dropped = shardlite_postgres::drop_table(&self.url, &table).await;
        measured?;
        stopped?;
        dropped?;
        Ok(shown)
    }
}

/// The `serve` flags of the PostgreSQL row: `url`, a fresh `table`, the matrix's partitions, a
/// pool of `pool_size` connections.
fn serve_args(url: &str, table: &str, partitions: u32, pool_size: usize) -> Vec<String> {
    let given = [
        ("--backend", url.to_owned()),
        ("--pg-table", table.to_owned()),
        ("--partitions", partitions.to_string()),
        ("--pg-pool-size", pool_size.to_string()),
    ];
    given.into_iter().flat_map(|(flag, value)| [flag.to_owned(), value]).collect()
}

/// Waits until `/stats` counts `records` (PostgreSQL's statistics trail its commits a little),
/// so that the first run's key space and fresh keys start from the loaded count.
async fn wait_for_count(target: &Target, records: u64) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + COUNT_TIMEOUT;
    loop {
        let counted = ServerStats::fetch(target).await.map(|s| s.records);
        if counted.is_some_and(|n| n >= records) {
            return Ok(());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "/stats counted {counted:?} records, not the {records} loaded, after {COUNT_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::tests::parse;

    #[test]
    fn postgres_joins_the_matrix_at_each_connection_count() {
        let m = parse(&[]).unwrap();
        assert_eq!(m.concurrency, [64]);
        let p = &m.postgres;
        assert!(p.with_postgres.is_none() && !p.spawn_postgres && p.pg_pool_size.is_none());
        assert!(p.prepare().unwrap().is_none());
        let m = parse(&["--configs", "immediate,mmap", "--concurrency", "10,100", "--spawn-postgres"]).unwrap();
        assert_eq!((m.configs, m.concurrency), (vec!["immediate".to_owned(), "mmap".to_owned()], vec![10, 100]));
        assert!(m.postgres.spawn_postgres);
        let m = parse(&["--connections", "4", "--with-postgres", "postgres://me:pw@127.0.0.1:5432/db"]).unwrap();
        assert_eq!(m.concurrency, [4]);
        assert_eq!(m.measure().concurrency, [4]);
        let err = parse(&["--with-postgres", "postgres://x", "--spawn-postgres"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        let err = parse(&["--with-postgres", "postgres://x", "--pg-standby"]).unwrap().postgres.prepare().err();
        assert!(err.unwrap().to_string().contains("add --spawn-postgres"), "a standby only for a spawned cluster");
        assert!(parse(&["--spawn-postgres", "--pg-standby"]).unwrap().postgres.pg_standby);
    }

    #[test]
    fn the_postgres_server_gets_its_own_table_the_partitions_and_a_pool() {
        let m = parse(&["--partitions", "8", "--pg-pool-size", "3", "--with-postgres", "postgres://u@h:1/db"]).unwrap();
        let row = m.postgres.prepare().unwrap().unwrap();
        let args = serve_args(&row.url, "bench_1", m.partitions, row.pool_size);
        let want =
            ["--backend", "postgres://u@h:1/db", "--pg-table", "bench_1", "--partitions", "8", "--pg-pool-size", "3"];
        assert_eq!(args, want);
        let cores = std::thread::available_parallelism().unwrap().get().to_string();
        let m = parse(&["--with-postgres", "postgres://u@h:1/db"]).unwrap();
        let row = m.postgres.prepare().unwrap().unwrap();
        let args = serve_args(&row.url, "t", m.partitions, row.pool_size);
        assert_eq!(args[6..], ["--pg-pool-size".to_owned(), cores], "one connection per core by default");
    }
}
