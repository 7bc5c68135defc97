//! Compare-and-set increments racing on a few keys, for the tests of the write paths that must
//! lose no update under them (`tests/inline.rs`, `tests/held.rs`): each task adds one to a key
//! by reading its version and writing on that condition, again whenever another write came
//! between.

use std::sync::Arc;

use shardlite_engine::{Condition, Error, Op, Store};

use super::{key, value};

/// Keys the tasks share.
pub const KEYS: u32 = 4;
/// Tasks racing.
pub const TASKS: u32 = 12;
/// Increments each task makes.
pub const INCREMENTS: u32 = 100;

/// Creates the keys, each at counter 1.
pub fn create(store: &Store) {
    for k in 0..KEYS {
        store.put(&key(k), value(k, 0), Condition::Absent).unwrap();
    }
}

/// Runs every task's increments on two runtime threads, then returns the sum of the keys'
/// counters: `KEYS + TASKS * INCREMENTS` if no update was lost.
pub fn race(store: &Arc<Store>) -> u64 {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let store = Arc::clone(store);
                tokio::spawn(async move {
                    for i in 0..INCREMENTS {
                        increment(&store, &key((t + i) % KEYS), i).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    (0..KEYS).map(|k| store.get(&key(k)).unwrap().unwrap().version.counter).sum()
}

/// Adds one to `key`'s counter by compare-and-set, retrying when another write came between.
async fn increment(store: &Store, key: &[u8], i: u32) {
    loop {
        let version = store.get(key).unwrap().expect("created first").version;
        let put = Op::Put { key: key.to_vec(), value: value(i, 0), condition: Condition::Version(version) };
        match store.write(put).await {
            Ok(_) => return,
            Err(Error::ConditionFailed { .. }) => continue,
            Err(err) => panic!("increment failed: {err}"),
        }
    }
}
