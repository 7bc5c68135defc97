//! Replicas (docs/cluster.md, "Replicas"): 3 nodes, 3 copies of each partition, a write held by
//! 2 of them before it is answered. Writes through every node land on the owners and on their
//! copies, whose records, ids and counters end identical to the owner's; with one node killed
//! the others' writes go on; with two, a write that cannot reach `acks` copies is refused (503
//! `unreplicated`) and rolled back, as is a handover to a dead copy (the map stays).

use std::{collections::BTreeMap, path::Path};

use serde_json::Value;
use shardlite_engine::{Config, Store};

use super::{etcd, failover::past_503, initial_owner, key, Nodes};
use crate::common::client;

/// A record as `(id, counter, key, value)`.
pub(super) type Held = (u64, u64, Vec<u8>, Vec<u8>);

/// Every record of every partition of the data directory `dir` (no server on it), and whether
/// `check` finds it sound.
pub(super) fn partitions_of(dir: &Path) -> (Vec<Vec<Held>>, bool) {
    let store = Store::open(dir, Config::default()).unwrap();
    let records = (0..store.manifest().partitions)
        .map(|p| {
            let mut out = Vec::new();
            store
                .snapshot(p, |r| {
                    out.push((r.version.id, r.version.counter, r.key.to_vec(), r.value.to_vec()));
                    Ok(())
                })
                .unwrap();
            out
        })
        .collect();
    let checks = store.check().unwrap();
    let sound = checks.iter().all(shardlite_engine::PartitionCheck::is_ok);
    for failed in checks.iter().filter(|c| !c.is_ok()) {
        eprintln!("{}: {failed:?}", dir.display());
    }
    store.close();
    (records, sound)
}

/// Nodes n1, n2 and n3 of a map with 3 copies of each partition and acks 2, started with `serve`.
pub(super) async fn three_copies(etcd: &etcd::Etcd, dir: &Path, serve: &[&str]) -> Nodes {
    let mut nodes = Nodes::init_with(etcd, &["n1", "n2", "n3"], &[], "http", &["--copies", "3", "--acks", "2"]);
    for id in ["n1", "n2", "n3"] {
        nodes.start(etcd, id, dir, serve).await;
    }
    nodes
}

#[tokio::test]
async fn every_write_is_on_two_copies_before_its_answer_and_the_copies_end_identical() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let ids = ["n1", "n2", "n3"];
    let mut nodes = three_copies(&etcd, dir.path(), &["--replication-timeout-ms", "500"]).await;
    let http = client();
    let map = super::get_json(&nodes.server("n2").at("/cluster")).await;
    assert_eq!((map["acks"].as_u64(), map["replicas"][0].clone()), (Some(2), serde_json::json!(["n2", "n3"])));
    let ready = super::get_json(&nodes.server("n1").at("/readyz")).await;
    assert_eq!(ready, serde_json::json!({"ready": true}), "every copy can hold writes");

    for i in 0..120 {
        let via = nodes.server(ids[i as usize % 3]);
        assert_eq!(http.put(via.kv(&key(i))).body(format!("v{i}")).send().await.unwrap().status(), 201);
    }
    for i in (0..120).step_by(4) {
        let via = nodes.server(ids[i as usize % 3]);
        assert_eq!(http.put(via.kv(&key(i))).body(format!("w{i}")).send().await.unwrap().status(), 200);
        assert_eq!(http.delete(via.kv(&key(i + 1))).send().await.unwrap().status(), 204);
    }

    // Every copy holds what its owner shipped: `cluster status` reads it from the nodes.
    let status = super::shardlite(&["cluster", "status", "--etcd", &etcd.endpoints, "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    for node in status["nodes"].as_array().unwrap() {
        let report = &node["replication"];
        let copies = report["copies"].as_array().unwrap();
        assert_eq!(copies.len(), 2, "{report}");
        for copy in copies {
            assert!(copy["state"] == "streaming" && copy["held"].as_u64() > Some(0), "{report}");
        }
        assert_eq!(report["flushes_refused"], 0, "{report}");
    }

    // A read that accepts a copy is answered by the copy on the node asked, if it keeps one.
    let of =
        |owner: &str| (0..120u32).find(|i| i % 4 == 2 && initial_owner(nodes.partition(&key(*i))) == owner).unwrap();
    let (at_n1, at_n3) = (of("n1"), of("n3"));
    let from_copy =
        http.get(nodes.server("n2").kv(&key(at_n1))).header("shardlite-read-from", "copy").send().await.unwrap();
    assert_eq!(from_copy.headers().get("shardlite-copy").map(|v| v.to_str().unwrap()), Some("n2"));
    assert_eq!(from_copy.text().await.unwrap(), format!("v{at_n1}"));
    let from_owner = http.get(nodes.server("n2").kv(&key(at_n1))).send().await.unwrap();
    assert!(from_owner.headers().get("shardlite-copy").is_none(), "by default the owner answers");
    // An owner sends its copies a frame at least every 0.5 s: a copy heard from it within 2 s.
    let bounded = http.get(nodes.server("n2").kv(&key(at_n1))).header("shardlite-read-from", "copy");
    let from_copy = bounded.header("shardlite-max-staleness-ms", "2000").send().await.unwrap();
    assert_eq!(from_copy.headers().get("shardlite-copy").map(|v| v.to_str().unwrap()), Some("n2"));
    let bad = http.get(nodes.server("n2").kv(&key(at_n1))).header("shardlite-max-staleness-ms", "soon");
    assert_eq!(bad.send().await.unwrap().status(), 400);

    // Killed: n3. n1's and n2's partitions still have two copies alive: their writes go on.
    nodes.servers.remove("n3").unwrap().kill();
    // n3's partitions: no owner to read from, but a copy (its owner is not sealed: no failover).
    let asked = http.get(nodes.server("n1").kv(&key(at_n3)));
    assert!(!asked.try_clone().unwrap().send().await.unwrap().status().is_success(), "the owner is dead");
    let from_copy = asked.header("shardlite-read-from", "copy");
    let bounded = from_copy.try_clone().unwrap().header("shardlite-max-staleness-ms", "1000");
    let from_copy = from_copy.send().await.unwrap();
    assert_eq!(from_copy.headers().get("shardlite-copy").map(|v| v.to_str().unwrap()), Some("n1"));
    assert_eq!(from_copy.text().await.unwrap(), format!("v{at_n3}"), "n1's copy of n3's partition");
    // More than 1 s without a frame from n3: a read bounded to 1 s is not the copy's.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let stale = bounded.send().await.unwrap();
    assert!(stale.headers().get("shardlite-copy").is_none() && !stale.status().is_success(), "the owner is dead");
    let living = |i: &u32| initial_owner(nodes.partition(&key(*i))) != "n3";
    for i in (200..260).filter(living) {
        let put = past_503(http.put(nodes.server("n1").kv(&key(i))).body(format!("v{i}"))).await.status();
        assert_eq!(put, 201, "key {i}: n3 is down, but two copies hold it");
    }

    // Stopped in order, the survivors' copies are compared: identical records, ids and counters.
    // n1 stops first, so it is told first how far n2's log is committed (its copies apply that).
    until_told(&nodes.server("n2").url, "n1").await;
    for id in ["n1", "n2"] {
        assert!(nodes.servers.remove(id).unwrap().stop().success(), "{id} stops cleanly");
    }
    let copies: BTreeMap<&str, _> = ids.iter().map(|id| (*id, partitions_of(&dir.path().join(id)))).collect();
    assert!(copies.values().all(|(_, sound)| *sound), "every copy passes check");
    for p in 0..super::PARTITIONS {
        let owner = initial_owner(p);
        let held = &copies[owner].0[p as usize];
        assert!(!held.is_empty(), "partition {p} holds records");
        for id in ids.iter().filter(|id| **id != owner && **id != "n3") {
            let copy = &copies[id].0[p as usize];
            let first = copy.iter().zip(held).position(|(x, y)| x != y).map(|at| (&copy[at], &held[at]));
            assert!(
                copy.len() == held.len() && first.is_none(),
                "partition {p}: {id}'s copy is not {owner}'s: {first:?}"
            );
        }
        // n3, killed, may lack the last writes of its copies, but holds nothing astray: each of
        // its records is the owner's record of that id, at the owner's counter or an older one.
        for (id, counter, k, _) in copies["n3"].0[p as usize].iter().filter(|_| owner != "n3") {
            if let Some((_, owners, owners_key, _)) = held.iter().find(|r| r.0 == *id) {
                assert!(owners_key == k && counter <= owners, "partition {p}: n3's record {id} is astray");
            }
        }
    }
}

#[tokio::test]
async fn a_write_too_few_copies_can_hold_is_refused_and_rolled_back() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let mut nodes = three_copies(&etcd, dir.path(), &["--replication-timeout-ms", "300"]).await;
    let http = client();
    let at_n1 = (0..).find(|&i| initial_owner(nodes.partition(&key(i))) == "n1").unwrap();
    let url = nodes.server("n1").kv(&key(at_n1));
    assert_eq!(http.put(&url).body("kept").send().await.unwrap().status(), 201);

    nodes.servers.remove("n2").unwrap().kill();
    nodes.servers.remove("n3").unwrap().kill();
    // Nor is the partition handed over to a copy that cannot hold its writes: the map stays.
    let moving = nodes.server("n1").at(&format!("/admin/move?partition={}&to=n2", nodes.partition(&key(at_n1))));
    let refused = http.post(&moving).send().await.unwrap();
    assert_eq!(refused.status(), 503, "n2 is dead");
    let body: Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert!(body["message"].as_str().is_some_and(|m| m.contains("map was not changed")), "{body}");
    assert_eq!(super::get_json(&nodes.server("n1").at("/cluster")).await["version"], 1);
    let refused = http.put(&url).body("lost").send().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(body["error"].as_str(), Some("unreplicated"), "{body}");
    let got = http.get(&url).send().await.unwrap();
    assert_eq!(got.text().await.unwrap(), "kept", "the refused write was rolled back");

    // The node says so: still ready (it serves reads), degraded; its copies unreachable.
    let ready = super::get_json(&nodes.server("n1").at("/readyz")).await;
    let degraded = ready["degraded"].as_str().unwrap_or_default();
    assert!(ready["ready"] == true && degraded.contains("`n2` (unreachable)"), "{ready}");
    let stats = super::get_json(&nodes.server("n1").at("/stats")).await;
    let replication = &stats["replication"];
    assert!(replication["flushes_refused"].as_u64() >= Some(1), "{replication}");
    assert_eq!(replication["last_refusal"].as_str().map(|r| r.contains("fewer copies")), Some(true), "{replication}");
    let states: Vec<&Value> = replication["copies"].as_array().unwrap().iter().map(|c| &c["state"]).collect();
    assert_eq!(states, ["retrying", "retrying"], "{replication}");
    let metrics = http.get(nodes.server("n1").at("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("shardlite_replication_copy_streaming{node=\"n2\"} 0"), "{metrics}");
    let status = super::shardlite(&["cluster", "status", "--etcd", &etcd.endpoints]);
    let table = String::from_utf8_lossy(&status.stdout);
    assert!(table.contains("n1 -> n3") && table.contains("refuse writes"), "{table}");
}

#[tokio::test]
async fn degrading_to_async_a_write_too_few_copies_hold_is_acknowledged_and_said() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let serve = ["--replication-timeout-ms", "300", "--degrade-to-async"];
    let mut nodes = three_copies(&etcd, dir.path(), &serve).await;
    let http = client();
    let at_n1 = (0..).find(|&i| initial_owner(nodes.partition(&key(i))) == "n1").unwrap();
    let url = nodes.server("n1").kv(&key(at_n1));
    assert_eq!(http.put(&url).body("held by two").send().await.unwrap().status(), 201);

    nodes.servers.remove("n2").unwrap().kill();
    nodes.servers.remove("n3").unwrap().kill();
    for n in 0..5 {
        let put = http.put(&url).body(format!("held by one {n}")).send().await.unwrap();
        assert_eq!(put.status(), 200, "acknowledged, held by n1 alone");
    }
    assert_eq!(http.get(&url).send().await.unwrap().text().await.unwrap(), "held by one 4");
    let stats = super::get_json(&nodes.server("n1").at("/stats")).await;
    let replication = &stats["replication"];
    assert!(replication["flushes_degraded"].as_u64() >= Some(5), "{replication}");
    assert_eq!(replication["flushes_refused"], 0, "{replication}");
    let ready = super::get_json(&nodes.server("n1").at("/readyz")).await;
    assert!(ready["degraded"].as_str().is_some_and(|d| d.contains("unreachable")), "{ready}");
    let metrics = http.get(nodes.server("n1").at("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(!metrics.contains("shardlite_replication_flushes_degraded_total 0\n"), "{metrics}");

    // n2 back: its copy is brought up to date, and holds the writes n1 acknowledged alone.
    nodes.start(&etcd, "n2", dir.path(), &serve).await;
    let on_n2 = nodes.server("n2").kv(&key(at_n1));
    super::failover::until("n2's copy holds the last write", || {
        let (http, url) = (http.clone(), on_n2.clone());
        async move {
            let got = http.get(url).header("shardlite-read-from", "copy").send().await.unwrap();
            got.headers().contains_key("shardlite-copy") && got.text().await.unwrap() == "held by one 4"
        }
    })
    .await;
}

/// What one writer was answered for its keys: per key, the last value acknowledged with its
/// tag, and the values written since without an acknowledgement (refused while the owner was
/// dead, or cut off by its death: those may or may not have happened).
pub(super) type Acked = BTreeMap<Vec<u8>, (Option<(String, String)>, Vec<String>)>;

/// Every acknowledged write of `acked` is there, read through `via`, with its tag; a write
/// under way (answered with an error) may or may not be.
pub(super) async fn assert_acknowledged(acked: &Acked, via: &super::Server) {
    let http = client();
    for (k, (last, under_way)) in acked {
        let got = http.get(via.kv(k)).send().await.unwrap();
        let tag = got.headers().get("etag").map(|t| t.to_str().unwrap().to_owned());
        let value = got.text().await.unwrap();
        match (last, under_way) {
            (Some((v, t)), _) if *v == value => assert_eq!(tag.as_ref(), Some(t), "{k:?}: the owner's tag stays valid"),
            (_, maybe) if maybe.contains(&value) => {}
            _ => panic!(
                "{}: read {value:?}, acknowledged {last:?} (under way {under_way:?})",
                String::from_utf8_lossy(k)
            ),
        }
    }
}

/// Writes `keys` in turn, each a new value per round, through `via`, until `stop`.
pub(super) async fn write_until(via: String, keys: Vec<Vec<u8>>, stop: tokio::sync::watch::Receiver<bool>) -> Acked {
    let http = client();
    let mut acked: Acked = keys.iter().map(|k| (k.clone(), (None, Vec::new()))).collect();
    for round in 0.. {
        for k in &keys {
            if *stop.borrow() {
                return acked;
            }
            let value = format!("{}-{round}", String::from_utf8_lossy(k));
            let entry = acked.get_mut(k).unwrap();
            entry.1.push(value.clone());
            let url = format!("{via}/kv/{}", hex::encode(k));
            let Ok(put) = http.put(&url).body(value.clone()).send().await else { continue };
            if put.status().is_success() {
                let tag = put.headers()["etag"].to_str().unwrap().to_owned();
                *entry = (Some((value, tag)), Vec::new());
            }
        }
    }
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_owner_fails_over_to_its_most_advanced_copy_with_every_acknowledged_write() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let mut nodes = three_copies(&etcd, dir.path(), &["--lease-ttl", super::failover::LEASE_TTL]).await;
    // Four writers, each on keys of every partition, through n1 and n2, while n3 is killed.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let writers: Vec<_> = (0..4u32)
        .map(|w| {
            let keys = (0..24).map(|i| key(10_000 * (w + 1) + i)).collect();
            let via = nodes.server(["n1", "n2"][w as usize % 2]).url.clone();
            tokio::spawn(write_until(via, keys, stopped.clone()))
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    nodes.servers.remove("n3").unwrap().kill();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.send(true).unwrap();
    let mut acked = Acked::new();
    for writer in writers {
        acked.extend(writer.await.unwrap());
    }
    let n1 = nodes.server("n1");
    super::failover::until("n3's lease expires", || async {
        let map = super::get_json(&n1.at("/cluster")).await;
        map["nodes"].as_array().unwrap().iter().any(|n| n["id"] == "n3" && n["alive"] == false)
    })
    .await;
    let done = super::shardlite(&["cluster", "failover", "n3", "--etcd", &etcd.endpoints, "--json"]);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let report: Value = serde_json::from_slice(&done.stdout).unwrap();
    let partitions = report["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 2, "{report}");
    assert!(partitions.iter().all(|p| p["copy"] == true), "each from a copy, not Litestream: {report}");
    super::wait_for_version(n1, 2).await;
    super::wait_for_version(nodes.server("n2"), 2).await;
    let map = super::get_json(&n1.at("/cluster")).await;
    assert_eq!(map["stale"][6], serde_json::json!(["n3"]), "the dead owner's copy is stale: {map}");
    let status = super::shardlite(&["cluster", "status", "--etcd", &etcd.endpoints, "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    let n3 = status["nodes"].as_array().unwrap().iter().find(|n| n["id"] == "n3").unwrap();
    assert_eq!(n3["stale"], serde_json::json!([6, 7]), "cluster status names them: {status}");

    let http = client();
    assert_acknowledged(&acked, n1).await;
    assert!(acked.len() >= 96, "{} keys", acked.len());
    // The failed-over partitions take writes again: held by the new owner and one copy.
    for k in acked.keys().take(8) {
        assert!(http.put(n1.kv(k)).body("after").send().await.unwrap().status().is_success());
    }
    // n3 comes back: its stale copies are brought up to date from snapshots, and named so.
    let n1_url = n1.url.clone();
    nodes.start(&etcd, "n3", dir.path(), &["--lease-ttl", super::failover::LEASE_TTL]).await;
    until_none_stale(&n1_url).await;
    // With n2 stopped, n1's partitions take writes only once n3 holds them again (its copies
    // of n1's own partitions come from snapshots too: it missed their writes while dead).
    assert!(nodes.servers.remove("n2").unwrap().stop().success(), "n2 stops cleanly");
    let owned_by_n1: Vec<u32> =
        (0..super::PARTITIONS).filter(|&p| map["owners"][p as usize] == "n1" || initial_owner(p) == "n1").collect();
    let of_n1: Vec<&Vec<u8>> = acked.keys().filter(|k| owned_by_n1.contains(&nodes.partition(k))).collect();
    for k in &of_n1 {
        super::failover::until("n3 holds n1's writes", || {
            let (http, url) = (http.clone(), nodes.server("n1").kv(k));
            async move { http.put(url).body("back").send().await.unwrap().status().is_success() }
        })
        .await;
    }
    let stopped = ["n1", "n3"].map(|id| nodes.servers.remove(id).unwrap().stop().success());
    assert!(stopped.iter().all(|s| *s), "every node stops cleanly");
    let copies: Vec<_> = ["n1", "n2", "n3"].map(|id| partitions_of(&dir.path().join(id))).into();
    assert!(copies.iter().all(|(_, sound)| *sound), "every copy passes check");
    for p in 0..super::PARTITIONS as usize {
        // n2 stopped before the last writes to n1's partitions.
        let others: &[(&str, usize)] = if owned_by_n1.contains(&(p as u32)) { &[("n3", 2)] } else { &[("n2", 1)] };
        for &(id, at) in others {
            let (a, b) = (&copies[0].0[p], &copies[at].0[p]);
            let first = a.iter().zip(b).position(|(x, y)| x != y).map(|at| (&a[at], &b[at]));
            assert!(a.len() == b.len() && first.is_none(), "partition {p}: n1 and {id} differ: {first:?}");
        }
    }
}

/// Writes landing while a replica is away: `SHARDLITE_TEST_AWAY_WRITES` (600 here;
/// `scripts/cluster-replica-away.sh` lands 100,000).
const AWAY_WRITES: u32 = 600;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_while_writes_land_is_brought_up_to_date_when_it_returns() {
    let Some(bin) = etcd::binary() else { return };
    let writes = std::env::var("SHARDLITE_TEST_AWAY_WRITES").ok().map_or(AWAY_WRITES, |w| w.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let mut nodes = three_copies(&etcd, dir.path(), &["--replication-timeout-ms", "1000"]).await;
    let http = client();
    let hasher = nodes.hasher;
    let of_n1_n2 = move |i: &u32| initial_owner(hasher.locate(&key(*i)).partition) != "n3";
    for i in (0..100).filter(of_n1_n2) {
        assert_eq!(http.put(nodes.server("n1").kv(&key(i))).body(format!("v{i}")).send().await.unwrap().status(), 201);
    }
    // n3 is away while more writes land through n1 and n2, updates of the first ones among them.
    nodes.servers.remove("n3").unwrap().kill();
    let started = std::time::Instant::now();
    let keys: Vec<u32> = (0..).filter(of_n1_n2).take(writes as usize).collect();
    let writers = (0..8).map(|w: usize| {
        let (http, via) = (http.clone(), nodes.server(["n1", "n2"][w % 2]).url.clone());
        let mine: Vec<u32> = keys.iter().copied().skip(w).step_by(8).collect();
        tokio::spawn(async move {
            for i in mine {
                let put = past_503(http.put(format!("{via}/kv/{}", hex::encode(key(i)))).body(format!("w{i}")))
                    .await
                    .status();
                assert!(put.is_success(), "key {i}: two copies are alive");
            }
        })
    });
    for writer in writers.collect::<Vec<_>>() {
        writer.await.unwrap();
    }
    println!("{writes} writes landed with n3 away in {:.1?}", started.elapsed());
    let returned = std::time::Instant::now();
    nodes.start(&etcd, "n3", dir.path(), &["--replication-timeout-ms", "1000"]).await;
    for owner in ["n1", "n2"] {
        until_holds_all(&nodes.server(owner).url, "n3").await;
    }
    println!("n3 held every write of n1 and n2 {:.1?} after it was started again", returned.elapsed());
    // n3 now holds writes for its owners: with n2 stopped, n1's partitions take writes (held by
    // n1 and n3).
    assert!(nodes.servers.remove("n2").unwrap().stop().success());
    let i = keys.iter().copied().find(of(&nodes, "n1")).unwrap();
    assert!(http.put(nodes.server("n1").kv(&key(i))).body("x").send().await.unwrap().status().is_success());
    for id in ["n1", "n3"] {
        assert!(nodes.servers.remove(id).unwrap().stop().success(), "{id} stops cleanly");
    }
    assert_same_copies(dir.path(), "n1", "n3");
    assert_same_copies(dir.path(), "n2", "n3");
}

/// `node`'s link as the owner at `url` reports it (`/stats`), if it has one.
async fn link_to(url: &str, node: &str) -> Option<Value> {
    let stats = super::get_json(&format!("{url}/stats")).await;
    let copies = stats["replication"]["copies"].as_array().cloned().unwrap_or_default();
    copies.into_iter().find(|c| c["node"] == node)
}

/// Waits until `node` holds everything the owner at `url` shipped (its link streaming, none of
/// its copies coming from a snapshot); its link then.
async fn until_holds_all(url: &str, node: &str) -> Value {
    super::failover::until(&format!("{node} holds every write the owner shipped"), || async {
        link_to(url, node).await.is_some_and(|c| {
            c["state"] == "streaming" && c["behind_by"] == 0 && c["resyncing"].as_array().is_some_and(Vec::is_empty)
        })
    })
    .await;
    link_to(url, node).await.unwrap()
}

/// Waits until `node` holds everything the owner at `url` shipped and was told how far its log
/// is committed: a copy that stops then has applied every write the owner acknowledged.
pub(super) async fn until_told(url: &str, node: &str) {
    super::failover::until(&format!("{node} is told how far the owner's log is committed"), || async {
        let report = super::get_json(&format!("{url}/stats")).await["replication"].take();
        let link = report["copies"].as_array().and_then(|c| c.iter().find(|c| c["node"] == node).cloned());
        link.is_some_and(|c| c["behind_by"] == 0 && c["told"].as_u64() >= report["committed"].as_u64())
    })
    .await;
}

/// Waits until the map the node at `url` follows names no copy stale: every copy is up to date.
pub(super) async fn until_none_stale(url: &str) {
    super::failover::until("every copy is up to date", || async {
        super::get_json(&format!("{url}/cluster")).await.get("stale").is_none()
    })
    .await;
}

/// Stops node `id` (SIGSTOP): alive, its connections open, answering nothing until [`resume`].
fn pause(nodes: &Nodes, id: &str) -> nix::unistd::Pid {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(nodes.server(id).pid()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    pid
}

/// Lets a node [`pause`] stopped go on (SIGCONT).
fn resume(pid: nix::unistd::Pid) {
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
}

/// Stops every node cleanly, then compares `copy`'s copies of `owner`'s partitions with the
/// owner's ([`assert_same_copies`]).
fn stop_and_compare(nodes: &mut Nodes, dir: &Path, owner: &str, copy: &str) {
    for id in ["n1", "n2", "n3"] {
        assert!(nodes.servers.remove(id).unwrap().stop().success(), "{id} stops cleanly");
    }
    assert_same_copies(dir, owner, copy);
}

/// Both stopped, `copy`'s copies of the partitions `owner` first owned hold the owner's records,
/// ids and counters, and both directories pass `check`.
fn assert_same_copies(dir: &Path, owner: &str, copy: &str) {
    let (held, copied) = (partitions_of(&dir.join(owner)), partitions_of(&dir.join(copy)));
    assert!(held.1 && copied.1, "both pass check: {owner} {}, {copy} {}", held.1, copied.1);
    for p in (0..super::PARTITIONS).filter(|&p| initial_owner(p) == owner) {
        let (a, b) = (&held.0[p as usize], &copied.0[p as usize]);
        let first = a.iter().zip(b).position(|(x, y)| x != y).map(|at| (&a[at], &b[at]));
        assert!(a.len() == b.len() && first.is_none(), "partition {p}: {copy}'s copy is not {owner}'s: {first:?}");
    }
}

/// The flags of the nodes of [`with_n1_written`] and of the handover tests: a short wait for
/// copies; a freeze long enough for a handover on a loaded machine (its copies waited for half).
pub(super) const QUICK: [&str; 4] = ["--replication-timeout-ms", "500", "--move-freeze-timeout-ms", "4000"];

/// Etcd and three nodes (three copies, acks 2, [`QUICK`]) on `dir`, with the keys below 60 of
/// n1's partitions written through n1.
async fn with_n1_written(bin: &Path, dir: &Path) -> (etcd::Etcd, Nodes) {
    let etcd = etcd::Etcd::start(bin, dir).await;
    let nodes = three_copies(&etcd, dir, &QUICK).await;
    for i in (0..60).filter(of(&nodes, "n1")) {
        let put = client().put(nodes.server("n1").kv(&key(i))).body("v1").send().await.unwrap();
        assert_eq!(put.status(), 201);
    }
    (etcd, nodes)
}

/// Whether key `i` is of a partition `owner` owned first.
fn of(nodes: &Nodes, owner: &'static str) -> impl Fn(&u32) -> bool + Copy {
    let hasher = nodes.hasher;
    move |i| initial_owner(hasher.locate(&key(*i)).partition) == owner
}

/// A copy paused while its owner takes writes and restarts misses the frames the owner's old
/// process held for it: the owner's new stream finds it behind, and its copies come from
/// snapshots, ending with the owner's records.
#[tokio::test]
async fn a_copy_that_missed_writes_before_its_owner_restarted_is_brought_up_to_date() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (etcd, mut nodes) = with_n1_written(&bin, dir.path()).await;
    let (http, of_n1, serve) = (client(), of(&nodes, "n1"), QUICK);
    // n2 stops answering (alive, its connections open) while n1's writes land on n1 and n3;
    // then n1 restarts, and n2 answers again. n1's frames for n2 went with its old process.
    let n2 = pause(&nodes, "n2");
    for i in (0..300).filter(of_n1) {
        let put = past_503(http.put(nodes.server("n1").kv(&key(i))).body(format!("w{i}"))).await.status();
        assert!(put.is_success(), "key {i}: n1 and n3 hold it");
    }
    assert!(nodes.servers.remove("n1").unwrap().stop().success(), "n1 stops cleanly");
    resume(n2);
    nodes.start(&etcd, "n1", dir.path(), &serve).await;
    // The first writes after the restart start n1's new stream to n2, which must not take it as
    // following what it holds.
    for i in (300..400).filter(of_n1) {
        super::failover::until("n1 takes writes again", || {
            let (http, url) = (http.clone(), nodes.server("n1").kv(&key(i)));
            async move { http.put(url).body(format!("x{i}")).send().await.unwrap().status().is_success() }
        })
        .await;
    }
    until_holds_all(&nodes.server("n1").url, "n2").await;
    stop_and_compare(&mut nodes, dir.path(), "n1", "n2");
}

/// An owner stopped cleanly while a copy still lacks its last writes (the copy paused, the
/// frames for it waiting) waits until the copy holds them: after the owner's restart the copy
/// goes on with its stream, no snapshot needed, and ends with the owner's records.
#[tokio::test]
async fn an_owner_stopping_cleanly_waits_for_its_copies_which_then_need_no_snapshot() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (etcd, mut nodes) = with_n1_written(&bin, dir.path()).await;
    let (http, of_n1, serve) = (client(), of(&nodes, "n1"), QUICK);
    let n1 = nodes.server("n1").url.clone();
    let put = |i: u32, v: &str| http.put(format!("{n1}/kv/{}", hex::encode(key(i)))).body(v.to_owned());
    // n2 pauses while n1's writes land on n1 and n3, and n1 is asked to stop; n2 goes on
    // while n1 is stopping.
    let n2 = pause(&nodes, "n2");
    for i in (0..200).filter(of_n1) {
        assert!(past_503(put(i, "v2")).await.status().is_success(), "key {i}: n1 and n3 hold it");
    }
    let stopping = nodes.servers.remove("n1").unwrap();
    let stopping = std::thread::spawn(move || stopping.stop());
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    resume(n2);
    assert!(stopping.join().unwrap().success(), "n1 stops cleanly");
    nodes.start(&etcd, "n1", dir.path(), &serve).await;
    super::failover::until("n1 takes writes again", || async {
        put(0, "v3").send().await.is_ok_and(|a| a.status().is_success())
    })
    .await;
    let n2_link = until_holds_all(&n1, "n2").await;
    assert_eq!(n2_link["sends_failed"], 0, "no frame found n2 behind: {n2_link}");
    stop_and_compare(&mut nodes, dir.path(), "n1", "n2");
}

/// A copy stopped cleanly while its owner takes writes (holding some the owner has not
/// committed yet, which it keeps across its restart) knows where it stood in the owner's log
/// after its restart: the owner's frames that waited for it go on from there, no snapshot
/// needed, and it ends with the owner's records.
#[tokio::test]
async fn a_copy_restarted_cleanly_goes_on_with_its_owners_stream() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (etcd, mut nodes) = with_n1_written(&bin, dir.path()).await;
    let n1 = nodes.server("n1").url.clone();
    until_holds_all(&n1, "n2").await;
    // n2 stops while n1's writes keep landing: it holds some that n1 has not committed yet,
    // and keeps them across its restart.
    let keys: Vec<Vec<u8>> = (0..200).filter(of(&nodes, "n1")).map(key).collect();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn(write_until(n1.clone(), keys, stopped));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(nodes.servers.remove("n2").unwrap().stop().success(), "n2 stops cleanly");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    nodes.start(&etcd, "n2", dir.path(), &QUICK).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.send(true).unwrap();
    writer.await.unwrap();
    let n2_link = until_holds_all(&n1, "n2").await;
    let why = n2_link["last_error"].as_str().unwrap_or_default();
    assert!(!why.contains("behind"), "n2 followed on from where it stood: {n2_link}");
    stop_and_compare(&mut nodes, dir.path(), "n1", "n2");
}

/// Runs `shardlite cluster copies` with `args` on the cluster in `etcd`: whether it succeeded,
/// and what it said.
fn set_copies(etcd: &etcd::Etcd, args: &[&str]) -> (bool, String) {
    let out = super::shardlite(&[&["cluster", "copies", "--etcd", &etcd.endpoints], args].concat());
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Copies added later (`cluster copies`) to a cluster made with one copy of each partition,
/// while writes go on: the nodes start replicating, the map names the new copies stale until
/// their owners brought them up to date from snapshots, acks can then be raised (not before),
/// and with n2 stopped n1's partitions take writes held by n1 and n3, whose copies end the same.
#[tokio::test]
async fn copies_added_later_are_brought_up_to_date_and_then_hold_writes() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let mut nodes = Nodes::init(&etcd, &["n1", "n2", "n3"], &[]);
    for id in ["n1", "n2", "n3"] {
        nodes.start(&etcd, id, dir.path(), &QUICK).await;
    }
    let (http, n1) = (client(), nodes.server("n1").url.clone());
    let keys: Vec<u32> = (0..120).filter(of(&nodes, "n1")).collect();
    let put = |i: u32, v: &str| http.put(format!("{n1}/kv/{}", hex::encode(key(i)))).body(v.to_owned());
    for &i in &keys {
        assert_eq!(put(i, "v1").send().await.unwrap().status(), 201);
    }
    let (accepted, said) = set_copies(&etcd, &["--copies", "3", "--acks", "2"]);
    assert!(!accepted && said.contains("acks = 2"), "no new copy is up to date yet: {said}");
    let (done, said) = set_copies(&etcd, &["--copies", "3", "--acks", "1"]);
    assert!(done, "{said}");
    for &i in &keys {
        assert!(past_503(put(i, "v2")).await.status().is_success(), "key {i}: writes go on");
    }
    until_none_stale(&n1).await;
    let (done, said) = set_copies(&etcd, &["--copies", "3", "--acks", "2"]);
    assert!(done, "{said}");
    super::failover::until("n1 follows acks 2", || async {
        super::get_json(&format!("{n1}/cluster")).await["acks"] == 2
    })
    .await;
    assert!(nodes.servers.remove("n2").unwrap().stop().success());
    for &i in &keys {
        assert!(past_503(put(i, "v3")).await.status().is_success(), "key {i}: n1 and n3 hold it");
    }
    for id in ["n1", "n3"] {
        assert!(nodes.servers.remove(id).unwrap().stop().success(), "{id} stops cleanly");
    }
    assert_same_copies(dir.path(), "n1", "n3");
}

/// A copy moved to another node (`cluster move P NODE --copy-from FROM`), here to a spare node
/// added to the cluster: named stale, brought up to date from a snapshot by the owner, and then
/// holding the partition's writes in the old copy's place, with the owner's records; then
/// handed the partition (its owner moved to it), the old owner a copy of it.
#[tokio::test]
async fn a_copy_moved_to_a_spare_node_is_brought_up_to_date_and_holds_writes() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let mut nodes = Nodes::init_with(&etcd, &["n1", "n2", "n3"], &["n4"], "http", &["--copies", "3", "--acks", "2"]);
    for id in ["n1", "n2", "n3", "n4"] {
        nodes.start(&etcd, id, dir.path(), &QUICK).await;
    }
    let (http, n1) = (client(), nodes.server("n1").url.clone());
    let keys: Vec<u32> = (0..200).filter(|i| nodes.partition(&key(*i)) == 0).collect();
    let put = |i: u32, v: &str| http.put(format!("{n1}/kv/{}", hex::encode(key(i)))).body(v.to_owned());
    for &i in &keys {
        assert_eq!(put(i, "v1").send().await.unwrap().status(), 201);
    }
    let refused = super::shardlite(&["cluster", "move", "0", "n4", "--etcd", &etcd.endpoints]);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("`n4` keeps no up-to-date copy of partition 0"), "{why}");
    let moved = super::shardlite(&["cluster", "move", "0", "n4", "--copy-from", "n3", "--etcd", &etcd.endpoints]);
    assert!(moved.status.success(), "{}", String::from_utf8_lossy(&moved.stderr));
    for &i in &keys {
        assert!(past_503(put(i, "v2")).await.status().is_success(), "key {i}: n1 and n2 hold it");
    }
    until_none_stale(&n1).await;
    // Moved back to n3 and again to n4: each time stale, then brought up to date.
    for (from, to) in [("n4", "n3"), ("n3", "n4")] {
        let moved = super::shardlite(&["cluster", "move", "0", to, "--copy-from", from, "--etcd", &etcd.endpoints]);
        assert!(moved.status.success(), "{}", String::from_utf8_lossy(&moved.stderr));
        until_none_stale(&n1).await;
    }
    assert!(nodes.servers.remove("n2").unwrap().stop().success());
    for &i in &keys {
        assert!(past_503(put(i, "v3")).await.status().is_success(), "key {i}: n1 and n4 hold it");
    }
    // n4 takes the partition over; n2, dead, does not hold its last writes: named stale.
    let moving = super::shardlite(&["cluster", "move", "0", "n4", "--etcd", &etcd.endpoints, "--json"]);
    assert!(moving.status.success(), "{}", String::from_utf8_lossy(&moving.stderr));
    let moved: Value = serde_json::from_slice(&moving.stdout).unwrap();
    assert_eq!(moved["stale"], serde_json::json!(["n2"]), "{moved}");
    // n4 never streamed to n1: its new stream brings n1's copy from a snapshot, after which
    // the writes are held by two copies again.
    for &i in &keys {
        super::failover::until("n4 and n1 hold a write", || async {
            put(i, "v4").send().await.unwrap().status().is_success()
        })
        .await;
    }
    // The owner first: it stops once its copies hold everything and know it is committed.
    for id in ["n4", "n1", "n3"] {
        assert!(nodes.servers.remove(id).unwrap().stop().success(), "{id} stops cleanly");
    }
    let (held, copied) = (partitions_of(&dir.path().join("n4")), partitions_of(&dir.path().join("n1")));
    assert!(held.1 && copied.1, "both pass check");
    assert_eq!(held.0[0], copied.0[0], "n1's copy of partition 0 is n4's");
    assert!(held.0[0].iter().all(|(_, _, _, v)| v == b"v4"));
}
