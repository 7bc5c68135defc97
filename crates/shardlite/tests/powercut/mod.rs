//! Power-loss simulation for `tests/power_loss.rs`: the LD_PRELOAD shim that records what
//! `shardlite serve` does to its files (`tests/fault/powercut.c`), the reader of its log
//! ([`log`]), the disk that rebuilds the directory a power cut at any moment could leave
//! ([`disk`], which documents the model), and what the clients know of each key ([`history`]).

pub mod disk;
pub mod history;
pub mod log;

use std::{path::Path, process::Command};

/// Compiles the shim into `dir`; `None` if there is no C compiler.
pub fn build_shim(dir: &Path) -> Option<std::path::PathBuf> {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fault/powercut.c");
    let out = dir.join("powercut.so");
    let built = Command::new("cc").args(["-shared", "-fPIC", "-O1", "-o"]).arg(&out).arg(source).arg("-ldl").status();
    built.is_ok_and(|s| s.success()).then_some(out)
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of the shim's records, shared by every process.
pub fn now() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}
