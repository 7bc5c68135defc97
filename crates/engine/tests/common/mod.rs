//! Helpers shared by the engine's integration tests.
#![allow(dead_code, clippy::unwrap_used)]

pub mod conditions;
pub mod increments;

use shardlite_engine::{Config, CreateOptions, IndexMode, Record, Synchronous};

/// A small data directory: 4 partitions, `index`.
pub fn small_dir(index: IndexMode) -> CreateOptions {
    CreateOptions { partitions: Some(4), index: Some(index), ..CreateOptions::default() }
}

/// `partitions` partitions with the compact hash index.
pub fn partitions(partitions: u32) -> CreateOptions {
    CreateOptions { partitions: Some(partitions), ..small_dir(IndexMode::Hash) }
}

/// A small, fast configuration: no fsync (durability is the crash test's job).
pub fn small_config() -> Config {
    Config {
        synchronous: Synchronous::Off,
        writer_threads: 2,
        readers_per_partition: 2,
        cache_size_kib: 512,
        ..Config::default()
    }
}

/// The i-th test key: 32 bytes, like DB-A's (`docs/sizing.md`).
pub fn key(i: u32) -> Vec<u8> {
    let mut k = xxhash_like(i).to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k.resize(32, b'k');
    k
}

fn xxhash_like(i: u32) -> [u8; 8] {
    (u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5bd1_e995).to_le_bytes()
}

/// A value that says which key and version it belongs to.
pub fn value(i: u32, version: u32) -> Vec<u8> {
    format!("value-{i}-{version}").into_bytes()
}

/// A record as its update counter and value (tests that do not care which version it is).
pub fn counted(record: Option<Record>) -> Option<(u64, Vec<u8>)> {
    record.map(|r| (r.version.counter, r.value))
}

/// Copies the directory `live` (its store open, no write in flight) to `copy`: what a crash of
/// the process leaves on disk. By another process (`cp`): closing any descriptor of a file
/// releases every POSIX lock this process holds on it, SQLite's included, and SQLite then
/// misbehaves (seen: SIGBUS in a checkpoint). A background merge may rename a file away while
/// `cp` lists the directory: then it copies again.
pub fn crash_copy(live: &std::path::Path, copy: &std::path::Path) {
    for _ in 0..10 {
        let _ = std::fs::remove_dir_all(copy);
        let out = std::process::Command::new("cp").arg("-R").arg(live).arg(copy).output().unwrap();
        if out.status.success() {
            return;
        }
        eprintln!("cp -R {}: {}; again", live.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    panic!("cp -R {} {} kept failing", live.display(), copy.display());
}
