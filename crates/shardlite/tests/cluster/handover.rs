//! A partition with copies moves to one of them (docs/cluster.md, "Moving a partition with
//! copies"): its owner freezes its writes, waits until the copies hold them, has them apply
//! them, and the map names the copy owner, the old owner keeping a copy in its place. Under
//! writes through every node: every acknowledged write is there after it with its tag, the
//! writes go on on the new owner, and the three copies end identical.

use std::time::Duration;

use serde_json::Value;

use super::{
    etcd,
    failover::past_503,
    replicas::{assert_acknowledged, partitions_of, three_copies, until_told, write_until, Acked, QUICK},
};
use crate::common::client;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_hands_its_partition_to_a_copy_under_writes_and_nothing_acknowledged_is_lost() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let mut nodes = three_copies(&etcd, dir.path(), &QUICK).await;
    // Partition 0: n1 owns it, n2 and n3 keep copies. Writers through each node, mostly on it.
    let of_0: Vec<u32> = (0..2000).filter(|i| nodes.partition(&super::key(*i)) == 0).take(36).collect();
    // An owner that took no write since it started hands a partition over too.
    let map = super::get_json(&nodes.server("n1").at("/cluster")).await;
    let idle = (1..8).find(|&p| map["owners"][p] == "n1").unwrap();
    let to = map["replicas"][idle][0].as_str().unwrap().to_owned();
    let moved = super::shardlite(&["cluster", "move", &idle.to_string(), &to, "--etcd", &etcd.endpoints, "--json"]);
    assert!(moved.status.success(), "idle: cluster move: {}", String::from_utf8_lossy(&moved.stderr));
    let http = client();
    let mut still = Vec::new();
    for i in (2000..4000).filter(|i| nodes.partition(&super::key(*i)) == 0).take(4) {
        let put = http.put(nodes.server("n1").kv(&super::key(i))).body("still").send().await.unwrap();
        still.push((super::key(i), put.headers()["etag"].to_str().unwrap().to_owned()));
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let writers: Vec<_> = ["n1", "n2", "n3"]
        .iter()
        .enumerate()
        .map(|(w, id)| {
            let mut keys: Vec<Vec<u8>> = of_0[w * 12..(w + 1) * 12].iter().map(|i| super::key(*i)).collect();
            keys.extend((0..4).map(|i| super::key(50_000 + 10 * w as u32 + i)));
            tokio::spawn(write_until(nodes.server(id).url.clone(), keys, stopped.clone()))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let endpoints = etcd.endpoints.clone();
    let moving = move || super::shardlite(&["cluster", "move", "0", "n2", "--etcd", &endpoints, "--json"]);
    let moved = tokio::task::spawn_blocking(moving).await.unwrap();
    assert!(moved.status.success(), "cluster move: {}", String::from_utf8_lossy(&moved.stderr));
    let moved: Value = serde_json::from_slice(&moved.stdout).unwrap();
    assert_eq!((&moved["handed_over"], &moved["stale"]), (&Value::Bool(true), &serde_json::json!([])), "{moved}");
    eprintln!("handed over: {moved}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.send(true).unwrap();
    let mut acked = Acked::new();
    for writer in writers {
        acked.extend(writer.await.unwrap());
    }

    let n3 = nodes.server("n3");
    super::wait_for_version(n3, moved["map_version"].as_u64().unwrap()).await;
    let map = super::get_json(&n3.at("/cluster")).await;
    assert_eq!((&map["owners"][0], &map["replicas"][0]), (&Value::from("n2"), &serde_json::json!(["n1", "n3"])));
    assert!(map.get("stale").is_none(), "every copy is up to date: {map}");
    for (k, tag) in &still {
        let got = http.get(n3.kv(k)).send().await.unwrap();
        assert_eq!(got.headers()["etag"].to_str().unwrap(), tag, "a tag n1 gave names the same write on n2");
    }
    assert_acknowledged(&acked, n3).await;
    // The new owner's writes are held by its copies: n1's included, in n2's old place.
    assert!(nodes.servers.remove("n3").unwrap().stop().success(), "n3 stops cleanly");
    for (i, k) in acked.keys().filter(|k| nodes.partition(k) == 0).enumerate() {
        let put = past_503(http.put(nodes.server("n1").kv(k)).body(format!("after-{i}"))).await;
        assert!(put.status().is_success(), "{}: n2 and n1 hold it", String::from_utf8_lossy(k));
    }
    let again = super::shardlite(&["cluster", "move", "0", "n2", "--etcd", &etcd.endpoints]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("is on node `n2` already"));
    // n1 stops first: it is told first how far n2's log is committed (its copy applies that).
    until_told(&nodes.server("n2").url, "n1").await;
    for id in ["n1", "n2"] {
        assert!(nodes.servers.remove(id).unwrap().stop().success(), "{id} stops cleanly");
    }
    let copies: Vec<_> = ["n2", "n1", "n3"].iter().map(|id| partitions_of(&dir.path().join(id))).collect();
    assert!(copies.iter().all(|(_, sound)| *sound), "every copy passes check");
    let owners = &copies[0].0[0];
    assert!(owners.iter().filter(|r| r.3.starts_with(b"after-")).count() >= 36, "the writes went on on n2");
    assert_eq!(&copies[1].0[0], owners, "n1's copy of partition 0 is n2's");
    let stopped_early = &copies[2].0[0];
    for (id, counter, k, _) in stopped_early {
        let owner = owners.iter().find(|r| r.0 == *id).unwrap();
        assert!(owner.2 == *k && *counter <= owner.1, "n3's record {id} is astray");
    }
}
