//! A 3-member etcd cluster for the tests: on 127.0.0.1 on distinct free ports, or each member
//! where the test puts it (a network namespace); data in a temporary directory, every member
//! killed when dropped.
//!
//! etcd comes from `SHARDLITE_TEST_ETCD` (CI sets it: `.ci/etcd`; then an etcd that does not
//! start fails the test), else `etcd` on `PATH`; without one the tests print why and pass.

use shardlite_etcd::{Compare, TxnOp};
use shardlite_server::cluster::ClusterMap;
use std::{
    ffi::OsString,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

/// The map's key under the default prefix.
const MAP: &str = "/shardlite/map";

/// How long the members may take to elect a leader and answer.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The etcd binary to test with, or `None` (after printing why) if there is none.
pub fn binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("SHARDLITE_TEST_ETCD") {
        return Some(bin.into());
    }
    if Command::new("etcd").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Some("etcd".into());
    }
    println!("skipped: no etcd (set SHARDLITE_TEST_ETCD, or run .ci/etcd to install Debian's etcd-server)");
    None
}

/// Where an etcd member runs: its address, its client and peer ports, and how a program is
/// started there.
pub struct Member<'a> {
    pub host: String,
    pub ports: (u16, u16),
    pub command: Box<dyn Fn(&Path) -> Command + 'a>,
}

/// Three etcd members forming one cluster.
pub struct Etcd {
    members: Vec<Child>,
    /// Each member's command line, to start it again.
    commands: Vec<Vec<OsString>>,
    logs: Vec<PathBuf>,
    /// The client URLs, comma-separated: what `--etcd` takes.
    pub endpoints: String,
}

impl Etcd {
    /// Starts the members of `bin` with their data under `dir` and waits until the cluster
    /// answers a write.
    pub async fn start(bin: &Path, dir: &Path) -> Self {
        let on_loopback = |_| Member {
            host: "127.0.0.1".into(),
            ports: (free_port(), free_port()),
            command: Box::new(|bin: &Path| Command::new(bin)),
        };
        Self::start_as(bin, dir, (0..3).map(on_loopback).collect()).await
    }

    /// Starts `members` of `bin` with their data under `dir` and waits until the cluster answers
    /// a write.
    pub async fn start_as(bin: &Path, dir: &Path, members: Vec<Member<'_>>) -> Self {
        let url = |host: &str, port: u16| format!("http://{host}:{port}");
        let initial: Vec<String> =
            members.iter().enumerate().map(|(i, m)| format!("e{i}={}", url(&m.host, m.ports.1))).collect();
        let commands: Vec<Vec<OsString>> = members
            .iter()
            .enumerate()
            .map(|(i, member)| {
                let (client, peer) = (url(&member.host, member.ports.0), url(&member.host, member.ports.1));
                let mut command = (member.command)(bin);
                command
                    .args(["--name", &format!("e{i}")])
                    .arg("--data-dir")
                    .arg(dir.join(format!("e{i}")))
                    .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
                    .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
                    .args(["--initial-cluster", &initial.join(","), "--initial-cluster-state", "new"])
                    .args(["--initial-cluster-token", "shardlite-test", "--log-level", "warn"]);
                std::iter::once(command.get_program()).chain(command.get_args()).map(OsString::from).collect()
            })
            .collect();
        let logs: Vec<PathBuf> = (0..members.len()).map(|i| dir.join(format!("e{i}.log"))).collect();
        let children = (0..members.len()).map(|i| spawn(&commands[i], &logs[i])).collect();
        let endpoints = members.iter().map(|m| url(&m.host, m.ports.0)).collect::<Vec<_>>().join(",");
        let etcd = Self { members: children, commands, logs, endpoints };
        etcd.wait_until_ready(dir).await;
        etcd
    }

    /// Waits until a write through the first member succeeds (a leader is elected).
    async fn wait_until_ready(&self, dir: &Path) {
        let deadline = Instant::now() + START_TIMEOUT;
        let first = self.endpoints.split(',').next().unwrap().to_owned();
        loop {
            let written = async { shardlite_etcd::Client::new(&[first.as_str()])?.put("/probe", "1", None).await };
            if tokio::time::timeout(Duration::from_secs(2), written).await.is_ok_and(|w| w.is_ok()) {
                return;
            }
            let logs: Vec<String> =
                (0..3).map(|i| std::fs::read_to_string(dir.join(format!("e{i}.log"))).unwrap_or_default()).collect();
            assert!(Instant::now() < deadline, "etcd did not start within {START_TIMEOUT:?}:\n{}", logs.join("\n"));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kills member `i` (`kill -9`).
    pub fn kill_member(&mut self, i: usize) {
        let _ = self.members[i].kill();
        let _ = self.members[i].wait();
    }

    /// Starts member `i` again, on its data.
    pub fn restart_member(&mut self, i: usize) {
        self.members[i] = spawn(&self.commands[i], &self.logs[i]);
    }

    /// A client of the cluster.
    pub fn client(&self) -> shardlite_etcd::Client {
        let endpoints: Vec<&str> = self.endpoints.split(',').collect();
        shardlite_etcd::Client::new(&endpoints).unwrap()
    }

    /// The cluster map as etcd holds it, and the revision of its last change.
    pub async fn map(&self) -> (ClusterMap, i64) {
        let stored = self.client().get(MAP).await.unwrap().expect("a cluster map in etcd");
        (ClusterMap::parse(stored.value_str().unwrap()).unwrap(), stored.mod_revision)
    }

    /// Writes `map` in one transaction on the map's revision `read_at`: whether it was still
    /// at it (the write is refused otherwise).
    pub async fn write_map(&self, map: &ClusterMap, read_at: i64) -> bool {
        let (when, put) = ([Compare::ModRevision(MAP.into(), read_at)], [TxnOp::put(MAP, map.to_text().unwrap())]);
        self.client().txn(&when, &put).await.unwrap()
    }

    /// Gives `partition` to `node` in the map, its version bumped (what a move or a failover
    /// writes).
    pub async fn reassign(&self, partition: usize, node: &str) {
        let (mut map, read_at) = self.map().await;
        map.owners[partition] = node.into();
        map.version += 1;
        assert!(self.write_map(&map, read_at).await, "the map changed meanwhile");
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for member in &mut self.members {
            let _ = member.kill();
            let _ = member.wait();
        }
    }
}

/// Runs the command line `argv`, its output appended to `log`.
fn spawn(argv: &[OsString], log: &Path) -> Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting etcd ({:?}): {e}", argv[0]))
}

/// Ports handed out by [`free_port`]: below Linux's range of ephemeral ports (32768 and up),
/// which the kernel gives to outgoing connections and to binds of port 0.
const PORTS: std::ops::Range<u32> = 10_000..32_768;

/// A port no one listens on now, for a process started later: never one this process gave out
/// before, and outside the ephemeral range, so that no client connection (etcd's members', the
/// tests') is given it in between. A port taken from the kernel with a bind of port 0 could be.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = PORTS.end - PORTS.start;
    loop {
        // Spread by process id: test binaries running at once start at different places.
        let n = std::process::id().wrapping_mul(641).wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
        let port = u16::try_from(PORTS.start + n % span).expect("the range is within u16");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
