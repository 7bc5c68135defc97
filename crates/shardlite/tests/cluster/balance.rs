//! A node added later takes its share (docs/cluster.md, "Balancing"): `cluster add-node` names
//! it, it starts owning nothing, a first `cluster balance` moves copies to it, a second (once
//! they are up to date) hands it partitions. Then a node is drained (`balance --drain --wait`:
//! it returns once the copies it moved are up to date) and removed (`cluster remove-node`). The
//! first copies are brought up to date while no node took a write yet; then writes go on
//! throughout, nothing acknowledged is lost, and every partition's copies end its owner's.

use std::time::Duration;

use serde_json::Value;

use super::{
    etcd, key,
    replicas::{assert_acknowledged, partitions_of, three_copies, until_none_stale, write_until, Acked, QUICK},
};

/// `shardlite cluster balance` with `args`, off the test's runtime: its JSON answer.
async fn balance(etcd: &etcd::Etcd, args: &[&str]) -> Value {
    let mut argv: Vec<String> = ["cluster", "balance", "--json", "--etcd", &etcd.endpoints].map(String::from).into();
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let out =
        tokio::task::spawn_blocking(move || super::shardlite(&argv.iter().map(String::as_str).collect::<Vec<_>>()));
    let out = out.await.unwrap();
    assert!(out.status.success(), "cluster balance: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The steps of a balance's answer of `kind` (`owner` or `copy`), each `(partition, to)`.
fn steps(answer: &Value, kind: &str) -> Vec<(u64, String)> {
    let steps = answer["steps"].as_array().unwrap().iter().filter(|s| s["step"] == kind);
    steps.map(|s| (s["partition"].as_u64().unwrap(), s["to"].as_str().unwrap().to_owned())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_added_later_takes_its_share_and_a_drained_one_is_removed() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let mut nodes = three_copies(&etcd, dir.path(), &QUICK).await;

    let n4 = format!("127.0.0.1:{}", etcd::free_port());
    nodes.addresses.insert("n4".into(), n4.parse().unwrap());
    let spec = format!("n4=http://{n4}");
    let added = super::shardlite(&["cluster", "add-node", &spec, "--etcd", &etcd.endpoints]);
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let again = super::shardlite(&["cluster", "add-node", &spec, "--etcd", &etcd.endpoints]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("has a node `n4` already"));
    nodes.start(&etcd, "n4", dir.path(), &QUICK).await;

    // 8 partitions, 16 copies besides the owners: n4 takes 4 copies, nothing else can move yet.
    let planned = balance(&etcd, &["--dry-run"]).await;
    assert_eq!(planned["planned"], true);
    let copies = steps(&planned, "copy");
    assert!(copies.len() == 4 && copies.iter().all(|(_, to)| to == "n4"), "{planned}");
    assert!(steps(&planned, "owner").is_empty(), "n4 keeps no up-to-date copy yet: {planned}");
    assert_eq!(steps(&balance(&etcd, &[]).await, "copy"), copies, "the plan taken");
    let (map, _) = etcd.map().await;
    assert!(copies.iter().all(|(p, _)| map.is_stale(*p as u32, "n4")), "{map:?}");
    // The owners took no write yet: they bring their new copies up to date all the same.
    until_none_stale(&nodes.server("n1").url).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let keys: Vec<Vec<u8>> = (0..40).map(key).collect();
    let writer = tokio::spawn(write_until(nodes.server("n2").url.clone(), keys, stopped));

    // Up to date, n4 is handed two partitions; then all is even.
    let handed = steps(&balance(&etcd, &[]).await, "owner");
    assert!(handed.len() == 2 && handed.iter().all(|(_, to)| to == "n4"), "{handed:?}");
    // A copy slow to hold a handover's last writes is named stale (under load it may be).
    until_none_stale(&nodes.server("n1").url).await;
    assert!(balance(&etcd, &[]).await["steps"].as_array().unwrap().is_empty(), "even now");
    let (map, _) = etcd.map().await;
    let owned: Vec<usize> = ["n1", "n2", "n3", "n4"].iter().map(|n| map.owned_by(n).len()).collect();
    assert_eq!(owned, [2, 2, 2, 2], "{map:?}");

    // n1 drained: its partitions handed to copies, its copies moved; then, stopped, removed.
    let removing = ["cluster", "remove-node", "n1", "--etcd", &etcd.endpoints];
    let refused = super::shardlite(&removing);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("owns partitions or keeps copies"));
    let drained = balance(&etcd, &["--drain", "n1", "--wait", "120"]).await;
    let handed = steps(&drained, "owner");
    assert!(handed.len() == 2 && handed.iter().all(|(_, to)| to != "n1"), "{drained}");
    let (map, _) = etcd.map().await;
    assert!(!map.holds_any("n1"), "{map:?}");
    assert_eq!(map.stale_copies(), 0, "`--wait` returned before the copies moved were up to date: {map:?}");
    assert!(String::from_utf8_lossy(&super::shardlite(&removing).stderr).contains("is running"));
    assert!(nodes.servers.remove("n1").unwrap().stop().success(), "n1 stops cleanly");
    let removed = super::shardlite(&removing);
    assert!(removed.status.success(), "{}", String::from_utf8_lossy(&removed.stderr));
    // The owners let their links to n1 go: their reports name only the nodes keeping copies.
    for id in ["n2", "n3", "n4"] {
        super::failover::until("the owners' reports forget n1", || async {
            let stats = super::get_json(&nodes.server(id).at("/stats")).await;
            let copies = stats["replication"]["copies"].as_array().cloned().unwrap_or_default();
            copies.iter().all(|c| c["node"] != "n1")
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.send(true).unwrap();
    let acked: Acked = writer.await.unwrap();
    let cluster = super::get_json(&nodes.server("n2").at("/cluster")).await;
    let ids: Vec<&str> = cluster["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["n2", "n3", "n4"], "{cluster}");
    assert_acknowledged(&acked, nodes.server("n3")).await;

    // Each owner stops once its live copies hold what it shipped; the last ones stopped may
    // miss the last commits of those stopped before them, so the copies compared are those
    // of the nodes stopped after their owners.
    let (map, _) = etcd.map().await;
    let order = ["n2", "n3", "n4"];
    for id in order {
        assert!(nodes.servers.remove(id).unwrap().stop().success(), "{id} stops cleanly");
    }
    let copies: Vec<_> = order.iter().map(|id| partitions_of(&dir.path().join(id))).collect();
    assert!(copies.iter().all(|(_, sound)| *sound), "every copy passes check");
    let at = |id: &str| order.iter().position(|n| *n == id).unwrap();
    let mut compared = 0;
    for p in 0..map.partitions {
        let owner = &map.owners[p as usize];
        let held = &copies[at(owner)].0[p as usize];
        for replica in map.replicas_of(p).iter().filter(|r| at(r) > at(owner)) {
            assert_eq!(&copies[at(replica)].0[p as usize], held, "partition {p}: {replica}'s copy is {owner}'s");
            compared += 1;
        }
    }
    assert!(compared >= 8, "{compared} copies compared");
}
