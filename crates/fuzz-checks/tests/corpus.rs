//! The fuzz targets' committed seed corpus (`fuzz/corpus/<target>/seed-*`) through the same
//! checks the targets run, on the stable toolchain; and the index seeds are what the engine
//! writes today (`SHARDLITE_WRITE_SEEDS=1 cargo test -p shardlite-fuzz-checks` rewrites them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use shardlite_engine::index::{entry, format};
use shardlite_fuzz_checks::{check_batch, check_index_file};

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target)
}

/// The committed seeds of a target (libFuzzer's own additions are not named `seed-*`).
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(corpus(target))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("seed-"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds for {target}");
    seeds
}

#[test]
fn batch_decode_seeds_pass_the_target_checks() {
    for (name, bytes) in seeds("batch_decode") {
        println!("{name}");
        check_batch(&bytes);
    }
}

#[test]
fn index_file_seeds_pass_the_target_checks() {
    for (name, bytes) in seeds("index_file") {
        println!("{name}");
        check_index_file(&bytes);
    }
}

/// Small valid index files: entries spread over one bucket; over three; crowded onto one
/// fingerprint (an overflow section); none.
fn index_seeds() -> Vec<(&'static str, Vec<u64>)> {
    let spread = |n: u32| (0..n).map(|i| entry(i.wrapping_mul(2_654_435_761), i)).collect::<Vec<u64>>();
    vec![
        ("seed-one-bucket.idx", spread(100)),
        ("seed-three-buckets.idx", spread(1_000)),
        ("seed-overflow.idx", (0..1_000).map(|i| entry(0x1234_5678, i)).collect()),
        ("seed-empty.idx", Vec::new()),
    ]
}

#[test]
fn index_file_seeds_are_what_the_engine_writes() {
    let dir = tempfile::tempdir().unwrap();
    for (name, mut entries) in index_seeds() {
        entries.sort_unstable();
        let path = dir.path().join(name);
        let watermark = entries.len() as u64;
        format::write(&path, entries.len() as u64, watermark, 32, entries.iter().map(|e| Ok(*e))).unwrap();
        let written = std::fs::read(&path).unwrap();
        let seed = corpus("index_file").join(name);
        if std::env::var_os("SHARDLITE_WRITE_SEEDS").is_some() {
            std::fs::write(&seed, &written).unwrap();
        }
        let committed = std::fs::read(&seed).unwrap_or_default();
        assert!(
            committed == written,
            "{name} differs from what the engine writes: SHARDLITE_WRITE_SEEDS=1 rewrites it"
        );
    }
}
