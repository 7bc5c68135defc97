//! Real network faults (docs/cluster.md, "Failover with replicas"): three nodes with 3 copies of
//! each partition and acks 2, three etcd members and the test's clients, each in a network
//! namespace of its own (`super::netns`), the clients writing and reading through every node
//! while their history is recorded and checked for linearizability (one register per key,
//! `shardlite-linearizability`).
//!
//! - Split brain: an owner cut off from etcd and from its copies while the clients still reach
//!   it acknowledges nothing its copies do not hold, serves nothing once its lease has ended,
//!   its partitions go to the copies (`--auto-failover`), and after the heal it follows the new
//!   map and its copies are brought up to date; nothing acknowledged is lost.
//! - Random faults under load: `SHARDLITE_TEST_FAULTS` (6 here; `scripts/cluster-faults.sh` runs
//!   100) faults drawn from a seed (`SHARDLITE_TEST_FAULT_SEED`, else the clock; printed), of the
//!   kinds `SHARDLITE_TEST_FAULT_KINDS` names (`kill,cut,slow,etcd,handover`, the default): a
//!   node killed and started again, a node cut off from etcd, from the other nodes or from both,
//!   a node's link slowed to 1 Mbit/s, an etcd member killed and started again, a partition
//!   handed over by its owner to one of its copies (not undone); one at a time, held for
//!   1.5-4 s, undone, and the cluster left to settle (every node ready and alive in the map,
//!   no copy stale, every link streaming). Then the history is linearizable and every partition's
//!   copies are identical to its owner's and pass `check`.

use std::{
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant},
};

use shardlite_linearizability::{check_with, History, Input, Limits, Output};

use super::{etcd, get_json, key, netns::Net, Nodes};
use crate::common::{Rng, EXE};

/// The members: the test's clients, the etcd members, the nodes; and their addresses' last byte.
const MEMBERS: [(&str, u8); 7] = [("c", 2), ("e0", 5), ("e1", 6), ("e2", 7), ("n1", 11), ("n2", 12), ("n3", 13)];
const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Every node's flags: short leases, failover by the survivors, a short wait for copies, a
/// freeze long enough for a handover on a loaded machine; no tokens (the namespaces are the test's own; tokens between nodes are tested on loopback).
const SERVE: [&str; 8] = [
    "--lease-ttl",
    "2",
    "--auto-failover",
    "--replication-timeout-ms",
    "500",
    "--move-freeze-timeout-ms",
    "4000",
    "--insecure-no-auth",
];
/// `--lease-ttl` as a duration.
const LEASE_TTL: Duration = Duration::from_secs(2);
/// Clients writing and reading at once, and keys per partition they share.
const CLIENTS: u64 = 6;
const KEYS_PER_PARTITION: usize = 2;

/// The etcd members in their namespaces, and the nodes' map (none started).
async fn cluster(net: &Net, bin: &Path, dir: &Path) -> (etcd::Etcd, Nodes) {
    let members = ["e0", "e1", "e2"]
        .map(|e| etcd::Member {
            host: net.ip(e),
            ports: (2379, 2380),
            command: Box::new(move |bin: &Path| net.command(e, bin)),
        })
        .into();
    let etcd = etcd::Etcd::start_as(bin, dir, members).await;
    let addresses =
        NODES.iter().map(|n| ((*n).to_owned(), format!("{}:8080", net.ip(n)).parse::<SocketAddr>().unwrap())).collect();
    let nodes = Nodes::init_at(&etcd, &NODES, &[], "http", &["--copies", "3", "--acks", "2"], addresses);
    (etcd, nodes)
}

/// The cluster of [`cluster`] with its nodes started, their URLs, and the keys the clients
/// share ([`KEYS_PER_PARTITION`] of each partition).
async fn started(net: &Net, bin: &Path, dir: &Path) -> (etcd::Etcd, Nodes, Vec<String>, Vec<Vec<u8>>) {
    let (etcd, mut nodes) = cluster(net, bin, dir).await;
    for id in NODES {
        nodes.start_through(&etcd, id, dir, &SERVE, || net.command(id, EXE)).await;
    }
    let urls = NODES.iter().map(|n| nodes.server(n).url.clone()).collect();
    let hasher = nodes.hasher;
    let keys = (0..super::PARTITIONS)
        .flat_map(|p| (0..).map(key).filter(move |k| hasher.locate(k).partition == p).take(KEYS_PER_PARTITION))
        .collect();
    (etcd, nodes, urls, keys)
}

/// [`CLIENTS`] clients on `keys` through `urls`, recording into `history` until `stop`.
fn clients(
    urls: &[String],
    keys: &[Vec<u8>],
    history: &History,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<Vec<Seen>>> {
    (0..CLIENTS)
        .map(|id| tokio::spawn(client(id, urls.to_vec(), keys.to_vec(), history.clone(), stop.clone())))
        .collect()
}

/// What a client saw of one request: through which node, when it was called and answered,
/// whether it succeeded, and what it was.
type Seen = (usize, Instant, Instant, bool, String);

/// A client: puts and gets of `keys` through random nodes until `stop`, each recorded in
/// `history` (a failed put's outcome unknown: it may or may not have happened).
async fn client(
    id: u64,
    urls: Vec<String>,
    keys: Vec<Vec<u8>>,
    history: History,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<Seen> {
    let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(3)).build().unwrap();
    let mut rng = Rng::new(id);
    let mut seen = Vec::new();
    for n in 0.. {
        if *stop.borrow() {
            break;
        }
        let (via, k) = (rng.below(urls.len() as u64) as usize, &keys[rng.below(keys.len() as u64) as usize]);
        let url = format!("{}/kv/{}", urls[via], hex::encode(k));
        let at = Instant::now();
        let (ok, what) = match rng.below(10) < 6 {
            true => (put(&http, &url, &history, id, k, format!("c{id}-{n}")).await, "put"),
            false => (get(&http, &url, &history, id, k).await, "get"),
        };
        seen.push((via, at, Instant::now(), ok, format!("{what} {}", String::from_utf8_lossy(k))));
    }
    seen
}

async fn put(http: &reqwest::Client, url: &str, history: &History, id: u64, k: &[u8], value: String) -> bool {
    let pending = history.call(id, k, Input::Put(value.clone().into_bytes()));
    match http.put(url).body(value).send().await {
        Ok(answer) if answer.status().is_success() => {
            let tag = answer.headers()["etag"].to_str().unwrap().to_owned();
            pending.returned(Output::Put { tag });
            true
        }
        _ => false,
    }
}

async fn get(http: &reqwest::Client, url: &str, history: &History, id: u64, k: &[u8]) -> bool {
    let pending = history.call(id, k, Input::Get);
    let Ok(answer) = http.get(url).send().await else { return false };
    match answer.status().as_u16() {
        200 => {
            let tag = answer.headers()["etag"].to_str().unwrap().to_owned();
            let Ok(value) = answer.bytes().await else { return false };
            pending.returned(Output::Got(Some((value.to_vec(), tag))));
            true
        }
        404 => {
            pending.returned(Output::Got(None));
            true
        }
        _ => false,
    }
}

/// The last word: every key read through every node, each read tried again until it is answered
/// (a node may be fenced for a moment when a renewal of its lease is late on a loaded machine),
/// at most 30 s.
async fn final_reads(urls: &[String], keys: &[Vec<u8>], history: &History) {
    let http = crate::common::client();
    for k in keys {
        for url in urls {
            let url = format!("{url}/kv/{}", hex::encode(k));
            until(&format!("a final read of {url}"), || get(&http, &url, history, 99, k)).await;
        }
    }
}

/// The checker's budget for `operations`: 1,000 steps each, at least its default (a 100-fault
/// run records hundreds of thousands).
fn budget(operations: &[shardlite_linearizability::Operation]) -> Limits {
    Limits { max_steps: (operations.len() as u64 * 1000).max(Limits::default().max_steps) }
}

/// Waits, at most 30 s, until `done` (asked every 100 ms).
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn an_owner_cut_off_from_etcd_and_its_copies_acknowledges_nothing_and_loses_nothing() {
    let Some(bin) = etcd::binary() else { return };
    let Some(net) = Net::create(&MEMBERS) else { return };
    let dir = tempfile::tempdir().unwrap();
    net.run("c", || async {
        let (_etcd, _nodes, urls, keys) = started(&net, &bin, dir.path()).await;
        let (history, stop) = (History::new(), tokio::sync::watch::channel(false));
        let clients = clients(&urls, &keys, &history, &stop.1);

        // n1 is cut off from etcd and from n2 and n3; the clients still reach it.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let cut = Instant::now();
        net.cut("n1", &["e0", "e1", "e2", "n2", "n3"]);
        let n2 = urls[1].clone();
        until("n1's partitions are failed over to their copies", || async {
            let map = get_json(&format!("{n2}/cluster")).await;
            map["owners"].as_array().unwrap().iter().all(|o| o != "n1")
        })
        .await;
        let failed_over = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let healed = Instant::now();
        net.heal("n1");
        // n1 follows the new map; its copies of the partitions it lost come from snapshots.
        until("n1's copies are up to date again", || async {
            let map = get_json(&format!("{n2}/cluster")).await;
            map.get("stale").is_none()
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.0.send(true).unwrap();
        let mut seen = Vec::new();
        for client in clients {
            seen.extend(client.await.unwrap());
        }
        final_reads(&urls, &keys, &history).await;

        let after_lease = cut + LEASE_TTL + Duration::from_millis(200);
        let served: Vec<String> = seen
            .iter()
            .filter(|(via, at, done, ok, _)| *via == 0 && *ok && *at > after_lease && *done < healed)
            .map(|(_, at, done, _, what)| format!("{what}: {:?} to {:?} after the cut", *at - cut, *done - cut))
            .collect();
        assert!(served.is_empty(), "n1 answered nothing asked after its lease's end before the heal: {served:#?}");
        let later = seen.iter().filter(|(_, at, _, ok, _)| *ok && *at > failed_over).count();
        assert!(later > 50, "the failed-over partitions serve again: {later} answers after the failover");
        let operations = history.operations();
        let verdict = check_with(&operations, budget(&operations));
        assert!(verdict.is_linearizable(), "{} operations: {verdict}", operations.len());
        let acknowledged = operations.iter().filter(|o| matches!(o.input, Input::Put(_)) && o.ret.is_some()).count();
        println!("{} operations, {acknowledged} acknowledged writes; linearizable", operations.len());
    });
}

/// One fault of a random run.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `kill -9` of a node, started again on its data.
    Kill(usize),
    /// A node cut off from etcd (`etcd`), from the other nodes (`nodes`), or both.
    Cut { node: usize, etcd: bool, nodes: bool },
    /// A node's link slowed to 1 Mbit/s.
    Slow(usize),
    /// `kill -9` of an etcd member, started again on its data.
    EtcdDown(usize),
    /// A partition (`partition` modulo their count) handed over by its owner to one of its
    /// copies (`copy` modulo their count) with `cluster move`: not undone.
    HandOver { partition: u64, copy: u64 },
}

/// The kinds of fault a run draws from.
const KINDS: [&str; 5] = ["kill", "cut", "slow", "etcd", "handover"];

impl Fault {
    /// A fault of one of `kinds` (names of [`KINDS`]).
    fn draw(rng: &mut Rng, kinds: &[String]) -> Self {
        let node = rng.below(3) as usize;
        match kinds[rng.below(kinds.len() as u64) as usize].as_str() {
            "kill" => Fault::Kill(node),
            "cut" => match rng.below(3) {
                0 => Fault::Cut { node, etcd: true, nodes: false },
                1 => Fault::Cut { node, etcd: false, nodes: true },
                _ => Fault::Cut { node, etcd: true, nodes: true },
            },
            "slow" => Fault::Slow(node),
            "handover" => Fault::HandOver { partition: rng.below(1 << 16), copy: node as u64 },
            _ => Fault::EtcdDown(node),
        }
    }
}

/// Hands a partition over to one of its copies ([`Fault::HandOver`]) with `cluster move`, run in
/// the clients' namespace. It must succeed: between faults the cluster is whole.
async fn hand_over(net: &Net, etcd: &etcd::Etcd, partition: u64, copy: u64) {
    let (map, _) = etcd.map().await;
    let p = (partition % u64::from(map.partitions)) as u32;
    let copies = map.replicas_of(p);
    let to = copies[(copy % copies.len() as u64) as usize].clone();
    let mut command = net.command("c", EXE);
    command.args(["cluster", "move", &p.to_string(), &to, "--etcd", &etcd.endpoints]);
    let out = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    assert!(out.status.success(), "handing partition {p} to {to}: {}", String::from_utf8_lossy(&out.stderr));
    println!("{}", String::from_utf8_lossy(&out.stdout).trim());
}

/// `name` from the environment, parsed, else `default`.
fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Waits, at most 30 s, until the cluster is whole again: every node ready, alive in the map, no
/// copy stale, and every owner's links streaming with no partition short of copies.
/// With `drained`, also every copy holds all its owner shipped (no frame is in flight: the
/// clients have stopped).
async fn settled(nodes: &mut Nodes, urls: &[String], drained: bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let Some(short) = unsettled(urls, drained).await else { return };
        if Instant::now() > deadline {
            let ended: Vec<String> =
                nodes.servers.iter_mut().filter_map(|(id, s)| Some(format!("{id} ended: {}", s.ended()?))).collect();
            panic!("the cluster did not settle within 30 s; last seen:\n{short}\n{ended:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What keeps the cluster from being whole (the map and each node's replication), if anything.
async fn unsettled(urls: &[String], drained: bool) -> Option<String> {
    let http = crate::common::client();
    for url in urls {
        match http.get(format!("{url}/readyz")).send().await {
            Ok(ready) if ready.status() == 200 => {}
            Ok(ready) => return Some(format!("{url} is not ready: {}", ready.text().await.unwrap_or_default())),
            Err(err) => return Some(format!("{url} does not answer: {err}")),
        }
    }
    let map = get_json(&format!("{}/cluster", urls[0])).await;
    let mut whole = map["nodes"].as_array().unwrap().iter().all(|n| n["alive"] == true) && map.get("stale").is_none();
    let mut seen = format!("map: {map}\n");
    for url in urls {
        let report = get_json(&format!("{url}/stats")).await["replication"].take();
        let links = report["copies"].as_array().map_or(&[][..], Vec::as_slice);
        whole &= report["short"].as_array().is_none_or(Vec::is_empty)
            && links.iter().all(|l| {
                l["state"] == "streaming"
                    && l["resyncing"].as_array().is_some_and(Vec::is_empty)
                    && (!drained || l["behind_by"] == 0)
            });
        seen += &format!("{url}: {report}\n");
    }
    (!whole).then_some(seen)
}

#[test]
fn random_faults_under_load_lose_nothing_and_leave_the_copies_identical() {
    let Some(bin) = etcd::binary() else { return };
    let Some(net) = Net::create(&MEMBERS) else { return };
    let faults = setting("SHARDLITE_TEST_FAULTS", 6);
    let clock = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let seed = setting("SHARDLITE_TEST_FAULT_SEED", clock);
    let kinds: Vec<String> = match std::env::var("SHARDLITE_TEST_FAULT_KINDS") {
        Ok(kinds) => kinds.split(',').map(str::to_owned).collect(),
        Err(_) => KINDS.map(String::from).into(),
    };
    assert!(kinds.iter().all(|k| KINDS.contains(&k.as_str())), "SHARDLITE_TEST_FAULT_KINDS: of {KINDS:?}");
    println!("{faults} faults of {kinds:?}, seed {seed} (SHARDLITE_TEST_FAULT_SEED={seed} draws them again)");
    let dir = tempfile::tempdir().unwrap();
    net.run("c", || async {
        let (mut etcd, mut nodes, urls, keys) = started(&net, &bin, dir.path()).await;
        let (history, stop) = (History::new(), tokio::sync::watch::channel(false));
        let clients = clients(&urls, &keys, &history, &stop.1);

        let mut rng = Rng::new(seed);
        for round in 0..faults {
            let fault = Fault::draw(&mut rng, &kinds);
            let held = Duration::from_millis(1500 + rng.below(2500));
            println!("fault {round}: {fault:?} for {held:?}");
            let others = |node: usize, etcd: bool, peers: bool| -> Vec<&str> {
                let members = ["e0", "e1", "e2"].into_iter().filter(|_| etcd);
                members
                    .chain(NODES.into_iter().enumerate().filter(|(i, _)| peers && *i != node).map(|(_, n)| n))
                    .collect()
            };
            match fault {
                Fault::Kill(n) => nodes.servers.remove(NODES[n]).unwrap().kill(),
                Fault::Cut { node, etcd, nodes } => net.cut(NODES[node], &others(node, etcd, nodes)),
                Fault::Slow(n) => net.slow(NODES[n]),
                Fault::EtcdDown(e) => etcd.kill_member(e),
                Fault::HandOver { partition, copy } => hand_over(&net, &etcd, partition, copy).await,
            }
            tokio::time::sleep(held).await;
            match fault {
                Fault::Kill(n) => {
                    let id = NODES[n];
                    nodes.start_through(&etcd, id, dir.path(), &SERVE, || net.command(id, EXE)).await;
                }
                Fault::Cut { node, .. } => net.heal(NODES[node]),
                Fault::Slow(n) => net.unslow(NODES[n]),
                Fault::EtcdDown(e) => etcd.restart_member(e),
                Fault::HandOver { .. } => {}
            }
            settled(&mut nodes, &urls, false).await;
        }
        stop.0.send(true).unwrap();
        for client in clients {
            client.await.unwrap();
        }
        final_reads(&urls, &keys, &history).await;
        let operations = history.operations();
        let verdict = check_with(&operations, budget(&operations));
        assert!(verdict.is_linearizable(), "seed {seed}: {} operations: {verdict}", operations.len());
        let acknowledged = operations.iter().filter(|o| matches!(o.input, Input::Put(_)) && o.ret.is_some()).count();
        println!("{} operations, {acknowledged} acknowledged writes; linearizable", operations.len());

        // Stopped, every partition's copies are its owner's.
        settled(&mut nodes, &urls, true).await;
        let (map, _) = etcd.map().await;
        for id in NODES {
            assert!(nodes.servers.remove(id).unwrap().stop().success(), "{id} stops cleanly");
        }
        let copies: Vec<_> = NODES.iter().map(|id| super::replicas::partitions_of(&dir.path().join(id))).collect();
        assert!(copies.iter().all(|(_, sound)| *sound), "every copy passes check");
        let at = |id: &str| NODES.iter().position(|n| *n == id).unwrap();
        for p in 0..map.partitions as usize {
            let owner = &map.owners[p];
            let held = &copies[at(owner)].0[p];
            for replica in map.replicas_of(p as u32) {
                let copy = &copies[at(replica)].0[p];
                let first = copy.iter().zip(held).position(|(x, y)| x != y).map(|i| (&copy[i], &held[i]));
                assert!(
                    copy.len() == held.len() && first.is_none(),
                    "seed {seed}: partition {p}: {replica}'s copy is not {owner}'s: {first:?}"
                );
            }
        }
    });
}
