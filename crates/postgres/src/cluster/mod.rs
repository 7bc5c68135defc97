//! A throwaway PostgreSQL cluster ([`Cluster`]), the one way this repository starts one: for
//! `bench matrix --spawn-postgres` ([`BENCH_TUNING`]) and for the tests CI runs against
//! PostgreSQL ([`TEST_SETTINGS`], through `pg-cluster start`). Started from the system's
//! binaries in a temporary directory — `initdb`, then `pg_ctl start` with the settings, as the
//! `postgres` user when we are root, listening on loopback only at a free port — and stopped
//! and removed when its handle is dropped, even after an error (or, once [`Cluster::keep`]
//! let it outlive the process, by [`Cluster::stop_kept`]). Also the benchmark's and tests' own
//! table names ([`fresh_table`]) and their removal ([`drop_table`]), so that runs against a
//! user's server see none of each other's data. A cluster may have a synchronous standby
//! ([`standby`]).

use std::{
    fmt::Write as _,
    net::TcpListener,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{SystemTime, UNIX_EPOCH},
};

use anyhow::Context;

mod standby;

/// The PostgreSQL role the cluster is created for (trust authentication, loopback only).
const ROLE: &str = "shardlite";

/// Settings of the benchmark's cluster, for this project's machine (24 GiB, 2 cores, SSD):
/// durable like SQLite with `synchronous=full` (fsync and synchronous_commit on, full page
/// writes), a buffer cache that holds the benchmark's data, and checkpoints rare enough not to
/// land in every short run (docs/bench.md).
pub const BENCH_TUNING: &[(&str, &str)] = &[
    ("fsync", "on"),
    ("synchronous_commit", "on"),
    ("full_page_writes", "on"),
    ("wal_level", "minimal"),
    ("max_wal_senders", "0"),
    ("shared_buffers", "2GB"),
    ("effective_cache_size", "16GB"),
    ("maintenance_work_mem", "256MB"),
    ("wal_buffers", "64MB"),
    ("max_wal_size", "8GB"),
    ("min_wal_size", "1GB"),
    ("checkpoint_timeout", "15min"),
    ("checkpoint_completion_target", "0.9"),
    ("random_page_cost", "1.1"),
    ("max_connections", "200"),
];

/// Settings of the tests' cluster: they check semantics, not durability, so no fsync; many
/// tests run at once, each with a pool of its own.
pub const TEST_SETTINGS: &[(&str, &str)] = &[("fsync", "off"), ("max_connections", "300")];

/// A running throwaway cluster; dropping it stops the server and removes its directory.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    /// `postgres://shardlite@127.0.0.1:PORT/postgres`.
    pub url: String,
    port: u16,
    /// The port of the standby [`Cluster::start_with_standby`] started in [`standby::DIR`].
    standby: Option<u16>,
    owner: Option<Owner>,
    /// Removed (with the cluster's files) after the server stopped: fields drop after `drop`.
    dir: tempfile::TempDir,
    /// Left running by [`Cluster::keep`]: dropping the handle stops nothing.
    kept: bool,
}

/// Whom the cluster's files and processes belong to when we are root (initdb refuses root).
#[derive(Debug, Clone, Copy)]
struct Owner {
    uid: u32,
    gid: u32,
}

impl Cluster {
    /// Creates a cluster in a new temporary directory with `settings` and starts it.
    pub fn start(settings: &[(&str, &str)]) -> anyhow::Result<Self> {
        let bin = bin_dir()?;
        let owner = owner()?;
        let dir = tempfile::Builder::new().prefix("shardlite-pg").tempdir()?;
        if let Some(o) = owner {
            nix::unistd::chown(dir.path(), Some(o.uid.into()), Some(o.gid.into()))?;
        }
        let port = free_port()?;
        let url = format!("postgres://{ROLE}@127.0.0.1:{port}/postgres");
        let cluster = Self { bin, url, port, standby: None, owner, dir, kept: false };
        let data = cluster.data();
        cluster.run("initdb", |c| {
            c.arg("-D").arg(&data).args(["-U", ROLE, "--auth=trust", "-E", "UTF8", "--no-sync"]);
        })?;
        append(&data.join("postgresql.conf"), &conf_lines(settings, port, cluster.dir.path()))?;
        cluster.start_server(&data, "server.log")?;
        Ok(cluster)
    }

    /// `pg_ctl start` of the server whose data directory is `data`, logging to `log` in the
    /// cluster's directory.
    fn start_server(&self, data: &Path, log: &str) -> anyhow::Result<()> {
        let log = self.dir.path().join(log);
        self.run("pg_ctl", |c| {
            c.arg("-D").arg(data).arg("-l").arg(&log).args(["-w", "-t", "60", "start"]);
        })
        .map(drop)
        .with_context(|| format!("its log:\n{}", std::fs::read_to_string(&log).unwrap_or_default()))
    }

    /// Whether a synchronous standby keeps every commit too ([`Cluster::start_with_standby`]).
    pub fn has_standby(&self) -> bool {
        self.standby.is_some()
    }

    /// The cluster's data directory.
    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Leaves the cluster running after this handle and the process are gone; returns its
    /// directory, for [`Cluster::stop_kept`].
    pub fn keep(mut self) -> PathBuf {
        self.kept = true;
        self.dir.disable_cleanup(true);
        self.dir.path().to_owned()
    }

    /// Stops a cluster that [`Cluster::keep`] left running in `dir`, at once (it holds nothing
    /// worth a clean shutdown), and its standby if it has one, and removes the directory.
    pub fn stop_kept(dir: &Path) -> anyhow::Result<()> {
        let (bin, owner) = (bin_dir()?, owner()?);
        let servers = ["data", standby::DIR].map(|d| dir.join(d));
        let stopped: anyhow::Result<Vec<String>> = servers
            .iter()
            .filter(|data| data.exists())
            .map(|data| {
                run(&bin, owner, dir, "pg_ctl", |c| {
                    c.arg("-D").arg(data).args(["-m", "immediate", "-w", "stop"]);
                })
            })
            .collect();
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
        stopped.map(drop)
    }

    /// Runs one of the cluster's programs to completion (as the owner), its output captured;
    /// its standard output.
    fn run(&self, program: &str, args: impl FnOnce(&mut Command)) -> anyhow::Result<String> {
        run(&self.bin, self.owner, self.dir.path(), program, args)
    }
}

/// A free port on loopback: bind port 0, note it, release it (as for the spawned server).
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Appends `lines` to the configuration file `conf`.
fn append(conf: &Path, lines: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut file =
        std::fs::OpenOptions::new().append(true).open(conf).with_context(|| format!("opening {}", conf.display()))?;
    file.write_all(lines.as_bytes()).with_context(|| format!("writing {}", conf.display()))
}

/// Runs `program` of `bin` in `dir` to completion (as `owner`, if any), its output captured;
/// its standard output.
fn run(
    bin: &Path,
    owner: Option<Owner>,
    dir: &Path,
    program: &str,
    args: impl FnOnce(&mut Command),
) -> anyhow::Result<String> {
    let mut command = Command::new(bin.join(program));
    args(&mut command);
    command.current_dir(dir).stdin(Stdio::null());
    if let Some(o) = owner {
        command.uid(o.uid).gid(o.gid);
    }
    let out = command.output().with_context(|| format!("running {}", bin.join(program).display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{program} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        // The primary first: its fast shutdown hands the standby its last WAL.
        let standby = self.standby.map(|_| self.standby_data());
        for data in std::iter::once(self.data()).chain(standby) {
            if let Err(err) = self.run("pg_ctl", |c| {
                c.arg("-D").arg(&data).args(["-m", "fast", "-w", "stop"]);
            }) {
                eprintln!("stopping the throwaway PostgreSQL cluster: {err:#}");
            }
        }
    }
}

/// The lines appended to `postgresql.conf`: `settings`, and loopback on `port` with the socket
/// in `dir` (not the system's socket directory).
fn conf_lines(settings: &[(&str, &str)], port: u16, dir: &Path) -> String {
    let mut out = String::from("\n# shardlite bench\n");
    let fixed = [("listen_addresses", "127.0.0.1".to_owned()), ("port", port.to_string())];
    for (name, value) in fixed.iter().map(|(n, v)| (*n, v.as_str())).chain(settings.iter().copied()) {
        let _ = writeln!(out, "{name} = '{value}'");
    }
    let _ = writeln!(out, "unix_socket_directories = '{}'", dir.display());
    out
}

/// The newest `/usr/lib/postgresql/*/bin` (Debian's layout), else the directory of `initdb` on
/// the `PATH`.
fn bin_dir() -> anyhow::Result<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .find(|dir| dir.join("initdb").exists())
        .context("no PostgreSQL binaries (initdb) in /usr/lib/postgresql/*/bin or on the PATH: install PostgreSQL")
}

/// `None` unless we are root; then the `postgres` user (which the packages create).
fn owner() -> anyhow::Result<Option<Owner>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let user = nix::unistd::User::from_name("postgres")?
        .context("running as root, and there is no `postgres` user to run PostgreSQL as")?;
    Ok(Some(Owner { uid: user.uid.as_raw(), gid: user.gid.as_raw() }))
}

/// A table name no earlier run used: `bench_<pid>_<seconds>_<nanos>`.
pub fn fresh_table() -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("bench_{}_{}_{}", std::process::id(), now.as_secs(), now.subsec_nanos())
}

/// Drops `table` (and its partitions) on the server at `url`.
pub async fn drop_table(url: &str, table: &str) -> anyhow::Result<()> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let connection = tokio::spawn(connection);
    client.batch_execute(&format!("DROP TABLE IF EXISTS {table} CASCADE")).await?;
    drop(client);
    let _ = connection.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_is_durable_and_loopback_only() {
        let text = conf_lines(BENCH_TUNING, 5999, Path::new("/tmp/x"));
        for line in [
            "listen_addresses = '127.0.0.1'",
            "port = '5999'",
            "fsync = 'on'",
            "synchronous_commit = 'on'",
            "shared_buffers = '2GB'",
            "unix_socket_directories = '/tmp/x'",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        let table = fresh_table();
        assert!(
            table.starts_with("bench_")
                && table.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        );
        assert_ne!(table, fresh_table());
    }

    /// Starts a small cluster where PostgreSQL is installed (CI installs it); skipped elsewhere.
    #[tokio::test]
    async fn a_cluster_runs_with_its_settings_and_is_removed_when_dropped() {
        if bin_dir().is_err() {
            eprintln!("skipped: no PostgreSQL binaries");
            return;
        }
        let cluster = Cluster::start(&[("shared_buffers", "32MB"), ("synchronous_commit", "on")]).unwrap();
        let dir = cluster.dir.path().to_owned();
        let (client, connection) = tokio_postgres::connect(&cluster.url, tokio_postgres::NoTls).await.unwrap();
        let connection = tokio::spawn(connection);
        let show = |name: &'static str| {
            let client = &client;
            async move { client.query_one(&format!("SHOW {name}"), &[]).await.unwrap().get::<_, String>(0) }
        };
        assert_eq!(show("shared_buffers").await, "32MB");
        assert_eq!(show("synchronous_commit").await, "on");
        assert_eq!(show("listen_addresses").await, "127.0.0.1");
        client.batch_execute("CREATE TABLE bench_t (k int); INSERT INTO bench_t VALUES (1)").await.unwrap();
        drop_table(&cluster.url, "bench_t").await.unwrap();
        let left: i64 =
            client.query_one("SELECT count(*) FROM pg_class WHERE relname = 'bench_t'", &[]).await.unwrap().get(0);
        assert_eq!(left, 0);
        drop(client);
        let _ = connection.await;
        drop(cluster);
        assert!(!dir.exists(), "the cluster's directory is removed");
    }
}
