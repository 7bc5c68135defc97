//! A 3-member etcd cluster on 127.0.0.1 for the tests: distinct free ports, data in a temporary
//! directory, every member killed when dropped.
//!
//! etcd comes from `SHARDLITE_TEST_ETCD` (CI sets it: `.ci/etcd`; then an etcd that does not
//! start fails the test), else `etcd` on `PATH`; without one the tests print why and pass.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

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

/// Three etcd members forming one cluster.
pub struct Etcd {
    members: Vec<Child>,
    /// The client URLs, comma-separated: what `--etcd` takes.
    pub endpoints: String,
}

impl Etcd {
    /// Starts the members of `bin` with their data under `dir` and waits until the cluster
    /// answers a write.
    pub async fn start(bin: &Path, dir: &Path) -> Self {
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let url = |port: u16| format!("http://127.0.0.1:{port}");
        let initial: Vec<String> =
            ports.iter().enumerate().map(|(i, (_, peer))| format!("e{i}={}", url(*peer))).collect();
        let members = ports
            .iter()
            .enumerate()
            .map(|(i, &(client, peer))| {
                let log = std::fs::File::create(dir.join(format!("e{i}.log"))).unwrap();
                Command::new(bin)
                    .args(["--name", &format!("e{i}")])
                    .arg("--data-dir")
                    .arg(dir.join(format!("e{i}")))
                    .args(["--listen-client-urls", &url(client), "--advertise-client-urls", &url(client)])
                    .args(["--listen-peer-urls", &url(peer), "--initial-advertise-peer-urls", &url(peer)])
                    .args(["--initial-cluster", &initial.join(","), "--initial-cluster-state", "new"])
                    .args(["--initial-cluster-token", "shardlite-test", "--log-level", "warn"])
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().unwrap())
                    .stderr(log)
                    .spawn()
                    .unwrap_or_else(|e| panic!("starting etcd ({}): {e}", bin.display()))
            })
            .collect();
        let endpoints = ports.iter().map(|(client, _)| url(*client)).collect::<Vec<_>>().join(",");
        let etcd = Self { members, endpoints };
        etcd.wait_until_ready(dir).await;
        etcd
    }

    /// Waits until a write through the first member succeeds (a leader is elected).
    async fn wait_until_ready(&self, dir: &Path) {
        let deadline = Instant::now() + START_TIMEOUT;
        let first = self.endpoints.split(',').next().unwrap().to_owned();
        loop {
            let written = async {
                let mut client = etcd_client::Client::connect([first.as_str()], None).await?;
                client.put("/probe", "1", None).await
            };
            if tokio::time::timeout(Duration::from_secs(2), written).await.is_ok_and(|w| w.is_ok()) {
                return;
            }
            let logs: Vec<String> =
                (0..3).map(|i| std::fs::read_to_string(dir.join(format!("e{i}.log"))).unwrap_or_default()).collect();
            assert!(Instant::now() < deadline, "etcd did not start within {START_TIMEOUT:?}:\n{}", logs.join("\n"));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A client of the cluster.
    pub async fn client(&self) -> etcd_client::Client {
        let endpoints: Vec<&str> = self.endpoints.split(',').collect();
        etcd_client::Client::connect(endpoints, None).await.unwrap()
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

/// A port no one listens on now (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
