//! `--spawn`: our own `shardlite` binary started as a child on a data directory (optionally
//! loaded first with `shardlite load`) or on PostgreSQL (`--backend` among its flags), listening on a free loopback port, and stopped with
//! SIGTERM (an orderly shutdown: queued writes committed, WALs checkpointed) afterwards. A
//! server still running when its handle is dropped is killed, so a failing bench leaks none.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context;

use shardlite_engine::CreateOptions;

use crate::{http::Target, preload::DataSet};

/// How long a spawned server may take to answer `/healthz` (opening a big store takes a while).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long an orderly shutdown may take before the child is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// A running child server.
pub struct ServerProcess {
    child: Child,
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its data directory (`None`: the flags name a `--backend`).
    pub data_dir: Option<PathBuf>,
    /// The `serve` flags it was started with (besides `--data` and `--listen`).
    pub serve_args: Vec<String>,
}

/// Runs `exe load` to completion: `data`'s records into `data_dir`, created with `create` if
/// new (the loader takes the partitions and the index mode).
pub fn load(exe: &Path, data_dir: &Path, create: &CreateOptions, data: DataSet) -> anyhow::Result<()> {
    let DataSet { records, seed, key_size, value_size } = data;
    let status = Command::new(exe)
        .arg("load")
        .arg("--data")
        .arg(data_dir)
        .arg("--records")
        .arg(records.to_string())
        .args(create_args(create))
        .args(["--seed".to_owned(), seed.to_string()])
        .args(["--key-size".to_owned(), key_size.to_string()])
        .args(["--value-size".to_owned(), value_size.to_string()])
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("running {} load", exe.display()))?;
    anyhow::ensure!(status.success(), "`shardlite load` failed: {status}");
    Ok(())
}

/// The flags of the settings `create` gives (`--partitions N`, `--index MODE`, `--hash-seed S`).
pub fn create_args(create: &CreateOptions) -> Vec<String> {
    let CreateOptions { partitions, index, hash_seed, .. } = *create;
    let given = [
        ("partitions", partitions.map(|p| p.to_string())),
        ("index", index.map(|i| i.to_string())),
        ("hash-seed", hash_seed.map(|s| s.to_string())),
    ];
    given.into_iter().filter_map(|(name, value)| Some([format!("--{name}"), value?])).flatten().collect()
}

impl ServerProcess {
    /// Starts `exe serve [--data DIR] --listen 127.0.0.1:PORT` plus `serve_args` and waits
    /// until it answers `/healthz`. Without a data directory the flags must name a `--backend`.
    pub async fn start(exe: &Path, data_dir: Option<&Path>, serve_args: &[String]) -> anyhow::Result<Self> {
        Self::start_from(Command::new(exe), data_dir, serve_args).await
    }

    /// [`ServerProcess::start`] with `command` a command that runs the binary in a way of its
    /// own (inside a memory group: `cold`), before its arguments.
    pub async fn start_from(
        mut command: Command,
        data_dir: Option<&Path>,
        serve_args: &[String],
    ) -> anyhow::Result<Self> {
        // A free port: bind port 0, note it, release it. Another process could take it in
        // between; then the child fails to bind and says so.
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let listen = format!("127.0.0.1:{port}");
        command.arg("serve");
        if let Some(dir) = data_dir {
            command.arg("--data").arg(dir);
        }
        command.arg("--listen").arg(&listen).args(serve_args);
        // The server logs its start and shutdown at `info`; within a bench only warnings matter.
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "warn");
        }
        // Its stdout (the `listening on` line) must not mix into the bench's own (`--json`).
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        let mut server = Self {
            child,
            url: format!("http://{listen}"),
            data_dir: data_dir.map(Path::to_owned),
            serve_args: serve_args.to_vec(),
        };
        server.wait_healthy().await?;
        Ok(server)
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let target = Target::resolve(&self.url).await?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                anyhow::bail!("the spawned server exited at start: {status}");
            }
            // Ready: its storage is open (it answers /healthz already while it opens).
            if let Ok((200, _)) = target.get("/readyz", Duration::from_secs(1)).await {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "the spawned server was not ready (/readyz) in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the server with SIGTERM and waits for its orderly shutdown; an error if it exits
    /// unsuccessfully or has to be killed.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.terminate()
    }

    fn terminate(&mut self) -> anyhow::Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id())?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                anyhow::ensure!(status.success(), "the spawned server exited with {status}");
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.child.kill()?;
                self.child.wait()?;
                anyhow::bail!("the spawned server did not stop within {STOP_TIMEOUT:?}; killed");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
