//! A throwaway cluster with a synchronous standby ([`Cluster::start_with_standby`]), as
//! PostgreSQL keeps a commit on two machines: the primary streams its WAL to a second server
//! (`pg_basebackup` of the primary, `standby.signal`, `primary_conninfo`), names it in
//! `synchronous_standby_names`, and with `synchronous_commit = on` answers a commit only once
//! the standby has flushed it too. Both servers run on this machine, each on loopback at a port
//! of its own.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Context;

use super::{append, conf_lines, free_port, Cluster, ROLE};

/// The standby's data directory, in the cluster's directory.
pub(super) const DIR: &str = "standby";

/// The standby's `application_name`, which the primary's `synchronous_standby_names` names.
const NAME: &str = "standby";

/// How long the standby may take to become the primary's synchronous standby.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

impl Cluster {
    /// [`Cluster::start`] with `settings`, and a standby that every commit waits for: the
    /// primary with `wal_level = replica` and `synchronous_standby_names` naming the standby
    /// (later lines than `settings`, which they override), the standby a base backup of it,
    /// streaming its WAL. Returns once the primary reports the standby `sync`.
    pub fn start_with_standby(settings: &[(&str, &str)]) -> anyhow::Result<Self> {
        let replicating = [("wal_level", "replica"), ("max_wal_senders", "4"), ("synchronous_standby_names", NAME)];
        let primary: Vec<(&str, &str)> = settings.iter().copied().chain(replicating).collect();
        let mut cluster = Self::start(&primary)?;
        let standby = cluster.standby_data();
        let port = cluster.port.to_string();
        cluster.run("pg_basebackup", |c| {
            c.arg("-D").arg(&standby).args(["-h", "127.0.0.1", "-p", &port, "-U", ROLE]);
            c.args(["-X", "stream", "--checkpoint", "fast", "--no-sync"]);
        })?;
        let conninfo = format!("host=127.0.0.1 port={port} user={ROLE} application_name={NAME}");
        let standby_port = free_port()?;
        let lines =
            conf_lines(&[("primary_conninfo", &conninfo), ("hot_standby", "on")], standby_port, cluster.dir.path());
        append(&standby.join("postgresql.conf"), &lines)?;
        let signal = standby.join("standby.signal");
        std::fs::write(&signal, "").with_context(|| format!("writing {}", signal.display()))?;
        if let Some(o) = cluster.owner {
            nix::unistd::chown(&signal, Some(o.uid.into()), Some(o.gid.into()))?;
        }
        cluster.start_server(&standby, "standby.log")?;
        cluster.standby = Some(standby_port);
        cluster.until_sync()?;
        Ok(cluster)
    }

    /// The standby's data directory.
    pub(super) fn standby_data(&self) -> PathBuf {
        self.dir.path().join(DIR)
    }

    /// Waits, at most [`SYNC_TIMEOUT`], until the primary reports the standby streaming as its
    /// synchronous standby.
    fn until_sync(&self) -> anyhow::Result<()> {
        let query = format!("SELECT sync_state FROM pg_stat_replication WHERE application_name = '{NAME}'");
        let deadline = Instant::now() + SYNC_TIMEOUT;
        loop {
            let state = self.run("psql", |c| {
                c.args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", ROLE, "-d", "postgres", "-Atc", &query]);
            })?;
            if state.trim() == "sync" {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the standby was not the primary's synchronous standby within {SYNC_TIMEOUT:?} \
                 (pg_stat_replication: {state:?}); its log: {}",
                std::fs::read_to_string(self.dir.path().join("standby.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{bin_dir, Cluster};

    /// A commit on a cluster with a standby waits for the standby (the primary reports it
    /// `sync`), and the standby holds the row; both servers stop and go with the directory.
    #[tokio::test]
    async fn a_standby_holds_every_commit_and_is_removed_with_its_primary() {
        if bin_dir().is_err() {
            eprintln!("skipped: no PostgreSQL binaries");
            return;
        }
        let cluster = Cluster::start_with_standby(&[("shared_buffers", "32MB"), ("synchronous_commit", "on")]).unwrap();
        let dir = cluster.dir.path().to_owned();
        let (client, connection) = tokio_postgres::connect(&cluster.url, tokio_postgres::NoTls).await.unwrap();
        let connection = tokio::spawn(connection);
        client.batch_execute("CREATE TABLE bench_s (k int)").await.unwrap();
        let insert = "BEGIN; INSERT INTO bench_s VALUES (7); SELECT pg_current_wal_insert_lsn()::text; COMMIT";
        let answers = client.simple_query(insert).await.unwrap();
        let mut rows = answers.iter().filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0),
            _ => None,
        });
        let before_commit = rows.next().unwrap().to_owned();
        let state = format!("SELECT sync_state, flush_lsn >= '{before_commit}' FROM pg_stat_replication");
        let row = client.query_one(&state, &[]).await.unwrap();
        let flushed: (String, bool) = (row.get(0), row.get(1));
        assert_eq!(flushed, ("sync".to_owned(), true), "the standby flushed the commit before its answer");
        let standby_url = cluster.url.replace(&cluster.port.to_string(), &cluster.standby.unwrap().to_string());
        let (standby, connection_2) = tokio_postgres::connect(&standby_url, tokio_postgres::NoTls).await.unwrap();
        let connection_2 = tokio::spawn(connection_2);
        let replica: bool = standby.query_one("SELECT pg_is_in_recovery()", &[]).await.unwrap().get(0);
        assert!(replica, "{standby_url} is the standby");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while standby.query("SELECT k FROM bench_s WHERE k = 7", &[]).await.map_or(true, |rows| rows.is_empty()) {
            assert!(std::time::Instant::now() < deadline, "the standby applies the row");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        drop((client, standby));
        let _ = (connection.await, connection_2.await);
        drop(cluster);
        assert!(!dir.exists(), "the cluster's directory is removed");
    }
}
