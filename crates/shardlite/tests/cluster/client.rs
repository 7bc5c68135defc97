//! The Rust client's cluster mode against 3 real nodes: every request lands on its key's owner
//! (each node's `/metrics` counts exactly the requests of its own keys, and no 421), a batch
//! across every owner is split by owner, and after the map changes (a partition moved by an
//! etcd transaction) the client meets a 421, reads the map again and its request succeeds.

use std::collections::BTreeMap;

use shardlite_client::{Client, Op};

use super::{etcd, initial_owner, key, records, wait_for_version, Nodes, KEYS};
use crate::common::client;

#[tokio::test]
async fn a_cluster_client_sends_each_request_to_its_owner_and_follows_a_moved_partition() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let mut nodes = Nodes::init(&etcd, &["n1", "n2", "n3"], &[]);
    for id in ["n1", "n2", "n3"] {
        nodes.start(&etcd, id, dir.path(), &[]).await;
    }
    let cluster = Client::builder(&nodes.server("n2").url).cluster().build().unwrap();

    // A put and a get of each key, and one batch over every key: each node is asked only for
    // its own keys (a forwarded request would be counted by two nodes), and never answers 421.
    for i in 0..KEYS {
        assert!(cluster.put(key(i), format!("value-{i}")).await.unwrap().created, "key {i}");
        assert_eq!(cluster.get(key(i)).await.unwrap().unwrap().value, format!("value-{i}"));
    }
    let ops: Vec<Op> = (0..KEYS).map(|i| Op::get(key(i))).collect();
    let results = cluster.batch(&ops).await.unwrap();
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result.as_ref().unwrap().value.as_deref(), Some(format!("value-{i}").as_bytes()), "op {i}");
    }
    assert_eq!(cluster.map_version(), Some(1));
    let mut own_keys: BTreeMap<&str, u64> = BTreeMap::new();
    for i in 0..KEYS {
        *own_keys.entry(initial_owner(nodes.partition(&key(i)))).or_default() += 1;
    }
    for id in ["n1", "n2", "n3"] {
        let metrics = client().get(nodes.server(id).at("/metrics")).send().await.unwrap().text().await.unwrap();
        assert_eq!(request_count(&metrics, "/kv/{key}", None), 2 * own_keys[id], "requests served by {id}");
        assert_eq!(request_count(&metrics, "/batch", None), 1, "one batch part on {id}");
        assert_eq!(request_count(&metrics, "/kv/{key}", Some(421)), 0, "no 421 on {id}");
    }

    // Partition 6 moves from n3 to n1 (map version 2); the client still follows version 1.
    let moved = (0..).map(|i| format!("moved-{i}").into_bytes()).find(|k| nodes.partition(k) == 6).unwrap();
    etcd.reassign(6, "n1").await;
    for id in ["n1", "n2", "n3"] {
        wait_for_version(nodes.server(id), 2).await;
    }
    // n3 answers 421, the client reads version 2 and writes to n1.
    let on_n3 = records(nodes.server("n3")).await[6];
    assert!(cluster.put(&moved, "m").await.unwrap().created);
    assert_eq!(cluster.map_version(), Some(2));
    assert_eq!(records(nodes.server("n1")).await[6], 1, "the write is on the new owner");
    assert_eq!(records(nodes.server("n3")).await[6], on_n3, "and not on the old one");

    // A batch across every owner after partition 3 moved from n2 to n3 (version 3): the part
    // n2 refuses with 421 goes to n3 once the map is read again.
    etcd.reassign(3, "n3").await;
    for id in ["n1", "n2", "n3"] {
        wait_for_version(nodes.server(id), 3).await;
    }
    let in_3 = (0..).map(|i| format!("three-{i}").into_bytes()).find(|k| nodes.partition(k) == 3).unwrap();
    let ops = [Op::put(in_3.clone(), &b"3"[..]), Op::get(moved.clone()), Op::get(key(0))];
    let results = cluster.batch(&ops).await.unwrap();
    let statuses: Vec<u16> = results.iter().map(|r| r.as_ref().unwrap().status).collect();
    assert_eq!(statuses, [201, 200, 200]);
    assert_eq!(cluster.map_version(), Some(3));
    assert_eq!(records(nodes.server("n3")).await[3], 1, "the moved partition's write is on its new owner");
    let n3 = client().get(nodes.server("n3").at("/metrics")).send().await.unwrap().text().await.unwrap();
    assert_eq!(request_count(&n3, "/kv/{key}", Some(421)), 1, "the one 421 that told the client of version 2");
}

/// Requests a node counted on `route` (of `status`, or all), from its `/metrics` text.
fn request_count(metrics: &str, route: &str, status: Option<u16>) -> u64 {
    let (route, status) = (format!("route=\"{route}\""), status.map(|s| format!("status=\"{s}\"")));
    metrics
        .lines()
        .filter(|l| l.starts_with("shardlite_http_request_duration_seconds_count{") && l.contains(&route))
        .filter(|l| status.as_ref().is_none_or(|s| l.contains(s)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
