//! Litestream for the tests: the binary (`SHARDLITE_TEST_LITESTREAM`, else `litestream` on
//! `PATH`, else where `.ci/litestream` installs it; without one the tests print why and pass) and
//! a `litestream replicate` child process.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

/// The Litestream binary to test with, or why there is none.
pub fn litestream() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("SHARDLITE_TEST_LITESTREAM") {
        return Some(bin.into());
    }
    let on_path = Command::new("litestream").arg("version").output().is_ok_and(|o| o.status.success());
    if on_path {
        return Some("litestream".into());
    }
    let home = std::env::var_os("HOME").map(PathBuf::from)?;
    let installed = home.join(".cache/shardlite/litestream-v0.5.18/bin/litestream");
    if installed.exists() {
        return Some(installed);
    }
    println!("skipped: no Litestream (set SHARDLITE_TEST_LITESTREAM, or run .ci/litestream to build it)");
    None
}

/// `litestream replicate` on `config`, its output in `log`; killed when dropped.
pub struct Replicator(Child);

impl Replicator {
    pub fn start(bin: &Path, config: &Path, log: &Path) -> Self {
        let log = std::fs::File::create(log).unwrap();
        let child = Command::new(bin)
            .args(["replicate", "-config"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Self(child)
    }

    /// SIGTERM, and wait for it to exit (it syncs what it has not replicated yet).
    pub fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.0.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for Replicator {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
