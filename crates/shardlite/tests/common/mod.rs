//! A `shardlite serve` child process for the reliability tests: started on a free loopback port,
//! waited for until it answers `/readyz` (its storage open), killed (SIGKILL) or stopped (SIGTERM), and observed
//! from `/proc/<pid>` (open file descriptors, resident memory).
#![allow(dead_code)] // each test binary uses a part of it

pub mod litestream;

use std::{
    net::TcpListener,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

/// The binary under test.
pub const EXE: &str = env!("CARGO_BIN_EXE_shardlite");

/// How long a server may take to be ready (`/readyz`) after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `shardlite serve`; killed if still running when dropped.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// `127.0.0.1:PORT`.
    pub addr: std::net::SocketAddr,
}

impl Server {
    /// Starts `shardlite serve --data DIR --listen 127.0.0.1:PORT ARGS` on a free port and waits
    /// until it is ready (`/readyz` 200). A port is found by binding port 0 and releasing it; if
    /// another process takes it meanwhile the child exits, and we retry on another port.
    pub async fn start(data: &Path, args: &[&str]) -> Self {
        Self::start_with_env(data, args, &[]).await
    }

    /// [`Server::start`] with extra environment variables for the child.
    pub async fn start_with_env(data: &Path, args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Self {
        Self::start_from(|| Command::new(EXE), data, args, env).await
    }

    /// [`Server::start`] through `program`, a command that runs [`EXE`] (e.g. inside a memory
    /// group) with the arguments added to it.
    pub async fn start_from(
        program: impl Fn() -> Command,
        data: &Path,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Self {
        for _attempt in 0..5 {
            let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
            if let Some(server) = Self::launch(&program, addr, data, args, env).await {
                return server;
            }
            // Exited at start (the port was taken?): try another port.
        }
        panic!("the server exited at start five times");
    }

    /// Starts `shardlite serve --data DIR --listen ADDR ARGS` on `addr` (known before, as a
    /// cluster's nodes are) and waits until it is ready; panics if it exits instead.
    pub async fn start_at(addr: std::net::SocketAddr, data: &Path, args: &[&str]) -> Self {
        Self::start_at_through(|| Command::new(EXE), addr, data, args).await
    }

    /// [`Server::start_at`] through `program`, a command that runs [`EXE`] (e.g. inside a
    /// network namespace) with the arguments added to it.
    pub async fn start_at_through(
        program: impl Fn() -> Command,
        addr: std::net::SocketAddr,
        data: &Path,
        args: &[&str],
    ) -> Self {
        let launched = Self::launch(&program, addr, data, args, &[]).await;
        launched.unwrap_or_else(|| panic!("the server on {addr} exited at start"))
    }

    /// Starts the server on `addr` and waits until it is ready; `None` if it exited first.
    async fn launch(
        program: &dyn Fn() -> Command,
        addr: std::net::SocketAddr,
        data: &Path,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Option<Self> {
        let probe = client();
        let mut command = program();
        command.arg("serve").arg("--data").arg(data).arg("--listen").arg(addr.to_string()).args(args);
        command.envs(env.iter().copied());
        if std::env::var_os("RUST_LOG").is_none() && !env.iter().any(|(name, _)| *name == "RUST_LOG") {
            command.env("RUST_LOG", "warn");
        }
        let child = command.stdin(Stdio::null()).stdout(Stdio::null()).spawn().unwrap();
        // A server of `--tls-cert` is probed over https, its certificate not checked here.
        let tls = args.contains(&"--tls-cert");
        let probe = match tls {
            true => reqwest::Client::builder().no_proxy().danger_accept_invalid_certs(true).build().unwrap(),
            false => probe,
        };
        let url = format!("{}://{addr}", if tls { "https" } else { "http" });
        let mut server = Self { child, url, addr };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if server.child.try_wait().unwrap().is_some() {
                return None;
            }
            let ready = probe.get(server.at("/readyz")).timeout(Duration::from_secs(1)).send().await;
            if ready.is_ok_and(|r| r.status() == reqwest::StatusCode::OK) {
                return Some(server);
            }
            assert!(Instant::now() < deadline, "the server was not ready within {START_TIMEOUT:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `url` + `path`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// The URL of a key.
    pub fn kv(&self, key: &[u8]) -> String {
        self.at(&format!("/kv/{}", hex::encode(key)))
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the process ended, if it has (a signal's number, else its exit code), without
    /// waiting.
    pub fn ended(&mut self) -> Option<String> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.child.try_wait().ok()??;
        Some(status.signal().map_or_else(|| format!("exit code {:?}", status.code()), |s| format!("signal {s}")))
    }

    /// SIGKILL, then reap the process.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM (an orderly shutdown) and wait up to 30 s for the exit status.
    pub fn stop(mut self) -> ExitStatus {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not stop within 30 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The number of file descriptors the server has open now.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).unwrap().count()
    }

    /// The server's resident set size now, in KiB (`VmRSS` of `/proc/<pid>/status`); `None` once
    /// the process is gone.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.pid())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `VmRSS` of `/proc/<pid>/status` in KiB (as the benchmark reads it); `None` if the process is gone.
pub fn rss_kib(pid: u32) -> Option<u64> {
    shardlite_proc::rss_bytes(pid).map(|bytes| bytes / 1024)
}

/// An HTTP client that ignores proxy settings and gives up on a request after 30 s.
pub fn client() -> reqwest::Client {
    tls_provider();
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build().unwrap()
}

/// Runs `shardlite check --data DIR`; its exit status and output.
pub fn check(data: &Path) -> std::process::Output {
    Command::new(EXE).arg("check").arg("--data").arg(data).output().unwrap()
}

/// A small deterministic generator (xorshift64*), enough to pick moments, keys and operations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (any value; 0 is mapped to a non-zero state).
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every way `report` breaks the published schema of `shardlite bench --json`, a line each.
pub fn schema_problems(report: &serde_json::Value) -> Vec<String> {
    let schema: serde_json::Value = serde_json::from_str(shardlite_bench::report::SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    validator.iter_errors(report).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

/// Installs ring as the process's rustls provider, which reqwest (built with
/// `rustls-no-provider` for `https://` URLs) needs before any client is built.
pub fn tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
