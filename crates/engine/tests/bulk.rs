//! The bulk loader: loads a deterministic data set that the store then serves and checks,
//! appends further ranges, refuses another data set, and resumes after an interruption
//! without duplicates.
#![allow(clippy::unwrap_used)]

mod common;

use shardlite_engine::{
    bulk::{self, Dataset, Plan},
    Condition, Config, IndexMode, Store,
};

const DATASET: Dataset = Dataset { seed: 9, key_size: 32, value_size: 12 };

fn generate(i: u64, key: &mut Vec<u8>, value: &mut Vec<u8>) {
    key.extend_from_slice(&common::key(i as u32));
    value.extend_from_slice(format!("v{i:011}").as_bytes());
}

fn expected(i: u64) -> Option<(u64, Vec<u8>)> {
    Some((1, format!("v{i:011}").into_bytes()))
}

fn load(dir: &std::path::Path, index: IndexMode, count: u64, chunk: u64) -> bulk::LoadSummary {
    let plan = Plan { chunk, ..Plan::new(DATASET, count) };
    bulk::load(dir, &common::small_dir(index), &common::small_config(), &plan, &generate, &|_, _| {}).unwrap()
}

fn assert_served(dir: &std::path::Path, config: &Config, upto: u64) {
    let store = Store::open(dir, config.clone()).unwrap();
    for i in (0..upto).step_by(7) {
        assert_eq!(common::counted(store.get(&common::key(i as u32)).unwrap()), expected(i), "record {i}");
    }
    assert_eq!(store.get(&common::key(upto as u32)).unwrap(), None);
    let checks = store.check().unwrap();
    assert!(checks.iter().all(|c| c.is_ok()), "{checks:?}");
    assert_eq!(checks.iter().map(|c| c.records).sum::<u64>(), upto);
}

#[test]
fn loads_then_appends_the_next_range() {
    for index in [IndexMode::Hash, IndexMode::Sqlite] {
        let dir = tempfile::tempdir().unwrap();
        let config = common::small_config();
        let first = load(dir.path(), index, 30_000, 8_000);
        assert_eq!((first.start, first.end, first.appended, first.records), (0, 30_000, 30_000, 30_000));
        assert_served(dir.path(), &config, 30_000);
        let second = load(dir.path(), index, 20_000, 8_000);
        assert_eq!((second.start, second.end, second.appended, second.records), (30_000, 50_000, 20_000, 50_000));
        assert_served(dir.path(), &config, 50_000);
    }
}

#[test]
fn a_loaded_directory_takes_writes_and_keeps_its_index_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::small_config();
    load(dir.path(), IndexMode::Hash, 10_000, 4_000);
    let store = Store::open(dir.path(), config).unwrap();
    let stats = store.stats();
    assert_eq!(stats.partitions.iter().map(|p| p.index_file_entries).sum::<u64>(), 10_000);
    assert_eq!(stats.partitions.iter().map(|p| p.index_recent_entries).sum::<u64>(), 0);
    assert_eq!(store.put(&common::key(5), b"new".to_vec(), Condition::None).unwrap().version.counter, 2);
    assert!(store.put(&common::key(10_000), b"x".to_vec(), Condition::Absent).unwrap().created);
}

#[test]
fn another_data_set_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (create, config) = (common::small_dir(IndexMode::Hash), common::small_config());
    load(dir.path(), IndexMode::Hash, 1_000, 1_000);
    let other = Plan::new(Dataset { seed: 10, ..DATASET }, 10);
    let err = bulk::load(dir.path(), &create, &config, &other, &generate, &|_, _| {}).unwrap_err().to_string();
    assert!(err.contains("seed 9"), "{err}");
}

#[test]
fn an_interrupted_load_leaves_a_valid_directory_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (create, config) = (common::small_dir(IndexMode::Hash), common::small_config());
    let failing = |i: u64, key: &mut Vec<u8>, value: &mut Vec<u8>| {
        assert!(i != 25_000, "interrupted");
        generate(i, key, value);
    };
    let plan = Plan { chunk: 10_000, ..Plan::new(DATASET, 50_000) };
    let interrupted =
        std::panic::catch_unwind(|| bulk::load(dir.path(), &create, &config, &plan, &failing, &|_, _| {}).map(|_| ()));
    assert!(interrupted.is_err());
    assert_served(dir.path(), &config, 20_000);
    let resumed = load(dir.path(), IndexMode::Hash, 30_000, 10_000);
    assert_eq!((resumed.start, resumed.appended), (20_000, 30_000));
    assert_served(dir.path(), &config, 50_000);
}
