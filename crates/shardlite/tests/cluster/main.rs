//! A cluster on one machine (docs/cluster.md): a 3-member etcd and `shardlite serve --cluster`
//! nodes on loopback ports, the map made by `shardlite cluster init`.
//!
//! - Routing: writes and reads through every node land on the partition's owner (each node's
//!   `/stats` holds records only in its own partitions), conditional headers reach the owner,
//!   `POST /batch` across owners keeps its order and results, `--redirect` answers 421 naming the
//!   owner, a request forwarded once is not forwarded again, a spare node (owning nothing)
//!   forwards everything, `GET /cluster` and `cluster status` show the map.
//! - The map changing: a node refuses a data directory of another partition count; a running
//!   node follows a new map version written by an etcd transaction, and a node stopped while
//!   the map changed comes back on the new version.
//! - The Rust client's cluster mode (`client`): each request straight to its owner, a 421
//!   after a move read as "read the map again".
//! - Moving a partition (`moving`); one with copies handed to a copy (`handover`); a node added
//!   later taking its share (`balance`).
//! - Replicas (`replicas`): every write held by `acks` copies before its answer; the copies end
//!   identical to the owner's partition; too few copies alive: 503 `unreplicated`, rolled back.
//! - Real network faults (`network`, in namespaces of the test's own: `netns`): an owner cut
//!   off from etcd and its copies while clients still reach it acknowledges nothing after its
//!   lease; nothing acknowledged is lost; the whole history is linearizable.
//! - Fencing and failover (`failover`): a node without its lease serves none of its
//!   partitions; a killed node's partitions are restored from its Litestream replica by the
//!   survivors; a node back with a stale map forwards.
#![allow(clippy::unwrap_used)]

mod balance;
#[path = "../common/certs.rs"]
mod certs;
mod client;
#[path = "../common/mod.rs"]
mod common;
mod etcd;
mod failover;
mod handover;
mod moving;
mod netns;
mod network;
mod replicas;
mod tls;

use std::{collections::BTreeMap, process::Command, time::Duration};

use common::{client, Server, EXE};
use serde_json::{json, Value};
use shardlite_engine::KeyHasher;

const PARTITIONS: u32 = 8;
/// The keys written through the nodes.
const KEYS: u32 = 48;

/// A cluster's nodes, by id, with the map's hasher.
struct Nodes {
    servers: BTreeMap<String, Server>,
    addresses: BTreeMap<String, std::net::SocketAddr>,
    hasher: KeyHasher,
}

impl Nodes {
    /// Makes the map of `ids` (and of `spares`, owning nothing) in `etcd` with
    /// `shardlite cluster init` (on free ports).
    fn init(etcd: &etcd::Etcd, ids: &[&str], spares: &[&str]) -> Self {
        Self::init_as(etcd, ids, spares, "http")
    }

    /// [`Nodes::init`] with the nodes' addresses in `scheme` (`https` for nodes serving TLS).
    fn init_as(etcd: &etcd::Etcd, ids: &[&str], spares: &[&str], scheme: &str) -> Self {
        Self::init_with(etcd, ids, spares, scheme, &[])
    }

    /// [`Nodes::init_as`] with more flags for `cluster init` (`--copies`, `--acks`).
    fn init_with(etcd: &etcd::Etcd, ids: &[&str], spares: &[&str], scheme: &str, extra: &[&str]) -> Self {
        let addresses: BTreeMap<String, std::net::SocketAddr> = ids
            .iter()
            .chain(spares)
            .map(|id| ((*id).to_owned(), format!("127.0.0.1:{}", etcd::free_port()).parse().unwrap()))
            .collect();
        Self::init_at(etcd, ids, spares, scheme, extra, addresses)
    }

    /// [`Nodes::init_with`] on the nodes' `addresses`.
    fn init_at(
        etcd: &etcd::Etcd,
        ids: &[&str],
        spares: &[&str],
        scheme: &str,
        extra: &[&str],
        addresses: BTreeMap<String, std::net::SocketAddr>,
    ) -> Self {
        let spec =
            |ids: &[&str]| ids.iter().map(|id| format!("{id}={scheme}://{}", addresses[*id])).collect::<Vec<_>>();
        let (nodes, spares, partitions) = (spec(ids).join(","), spec(spares).join(","), PARTITIONS.to_string());
        let mut args =
            vec!["cluster", "init", "--etcd", &etcd.endpoints, "--partitions", &partitions, "--nodes", &nodes];
        if !spares.is_empty() {
            args.extend(["--spare-nodes", spares.as_str()]);
        }
        args.extend_from_slice(extra);
        let out = shardlite(&args);
        assert!(out.status.success(), "cluster init: {}", String::from_utf8_lossy(&out.stderr));
        let hasher = KeyHasher::new(shardlite_engine::CreateOptions::DEFAULT_HASH_SEED, PARTITIONS);
        Self { servers: BTreeMap::new(), addresses, hasher }
    }

    /// Starts node `id` on its address with its data in `dir`.
    async fn start(&mut self, etcd: &etcd::Etcd, id: &str, dir: &std::path::Path, extra: &[&str]) {
        let mut args = vec!["--cluster", "--etcd", &etcd.endpoints, "--node-id", id];
        args.extend_from_slice(extra);
        let server = Server::start_at(self.addresses[id], &dir.join(id), &args).await;
        self.servers.insert(id.to_owned(), server);
    }

    /// [`Nodes::start`] through `program`, a command that runs the binary (in a network
    /// namespace).
    async fn start_through(
        &mut self,
        etcd: &etcd::Etcd,
        id: &str,
        dir: &std::path::Path,
        extra: &[&str],
        program: impl Fn() -> Command,
    ) {
        let mut args = vec!["--cluster", "--etcd", &etcd.endpoints, "--node-id", id];
        args.extend_from_slice(extra);
        let server = Server::start_at_through(program, self.addresses[id], &dir.join(id), &args).await;
        self.servers.insert(id.to_owned(), server);
    }

    fn server(&self, id: &str) -> &Server {
        &self.servers[id]
    }

    fn partition(&self, key: &[u8]) -> u32 {
        self.hasher.locate(key).partition
    }
}

/// Runs the binary with `args`.
fn shardlite(args: &[&str]) -> std::process::Output {
    Command::new(EXE).args(args).env("RUST_LOG", "warn").output().unwrap()
}

/// The owner of each partition as `cluster init` spreads 8 partitions over n1, n2, n3.
fn initial_owner(partition: u32) -> &'static str {
    ["n1", "n1", "n1", "n2", "n2", "n2", "n3", "n3"][partition as usize]
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

/// Records per partition in a node's `/stats`.
async fn records(server: &Server) -> Vec<u64> {
    let stats = get_json(&server.at("/stats")).await;
    stats["store"]["partitions"].as_array().unwrap().iter().map(|p| p["records"].as_u64().unwrap()).collect()
}

#[tokio::test]
async fn every_node_routes_each_request_to_the_partitions_owner() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let mut nodes = Nodes::init(&etcd, &["n1", "n2", "n3"], &["router"]);
    nodes.start(&etcd, "n1", dir.path(), &[]).await;
    nodes.start(&etcd, "n2", dir.path(), &[]).await;
    nodes.start(&etcd, "n3", dir.path(), &["--redirect"]).await;
    nodes.start(&etcd, "router", dir.path(), &[]).await;
    let http = client();

    // Writes through the forwarding nodes, reads through both: every answer is the owner's.
    for i in 0..KEYS {
        let via = nodes.server(if i % 2 == 0 { "n1" } else { "n2" });
        let put = http.put(via.kv(&key(i))).body(format!("value-{i}")).send().await.unwrap();
        assert_eq!(put.status(), 201, "key {i}");
    }
    for i in 0..KEYS {
        for via in ["n1", "n2", "router"] {
            let got = http.get(nodes.server(via).kv(&key(i))).send().await.unwrap();
            assert_eq!(got.status(), 200, "key {i} via {via}");
            assert_eq!(got.text().await.unwrap(), format!("value-{i}"));
        }
    }
    // Each record is on its partition's owner, and nowhere else.
    let mut expected: BTreeMap<&str, Vec<u64>> = ["n1", "n2", "n3", "router"].map(|id| (id, vec![0; 8])).into();
    for i in 0..KEYS {
        let p = nodes.partition(&key(i));
        expected.get_mut(initial_owner(p)).unwrap()[p as usize] += 1;
    }
    for (id, want) in &expected {
        assert_eq!(&records(nodes.server(id)).await, want, "records per partition on {id}");
    }

    // The conditional headers reach the owner: a stale If-Match is refused there.
    let foreign = (0..KEYS).find(|&i| initial_owner(nodes.partition(&key(i))) == "n3").unwrap();
    let url = nodes.server("n1").kv(&key(foreign));
    let current = http.get(&url).send().await.unwrap().headers()["etag"].to_str().unwrap().to_owned();
    let stale = http.put(&url).header("if-match", "\"1.1.1\"").body("x").send().await.unwrap();
    assert_eq!(stale.status(), 412);
    assert_eq!(stale.headers()["etag"].to_str().unwrap(), current, "the owner's current tag comes back");
    let exists = http.put(&url).header("if-none-match", "*").body("x").send().await.unwrap();
    assert_eq!(exists.status(), 412);
    let ok = http.put(&url).header("if-match", &current).body(format!("value-{foreign}")).send().await.unwrap();
    assert_eq!(ok.status(), 200);

    // --redirect: 421 naming the owner and the map version, in the headers and the body.
    let at_n1 = (0..KEYS).find(|&i| initial_owner(nodes.partition(&key(i))) == "n1").unwrap();
    let redirected = http.get(nodes.server("n3").kv(&key(at_n1))).send().await.unwrap();
    assert_eq!(redirected.status(), 421);
    let owner = format!("http://{}", nodes.addresses["n1"]);
    assert_eq!(redirected.headers()["shardlite-owner"].to_str().unwrap(), owner);
    assert_eq!(redirected.headers()["shardlite-owner-node"].to_str().unwrap(), "n1");
    assert_eq!(redirected.headers()["shardlite-map-version"].to_str().unwrap(), "1");
    let body: Value = serde_json::from_str(&redirected.text().await.unwrap()).unwrap();
    assert_eq!((body["error"].as_str(), body["owner_address"].as_str()), (Some("misdirected"), Some(owner.as_str())));
    assert_eq!(body["partition"].as_u64(), Some(u64::from(nodes.partition(&key(at_n1)))));
    let own = http.get(nodes.server("n3").kv(&key(foreign))).send().await.unwrap();
    assert_eq!(own.status(), 200, "a redirecting node serves its own partitions");

    // A request forwarded once is never forwarded again: the non-owner answers 421.
    let looped =
        http.get(nodes.server("n2").kv(&key(at_n1))).header("shardlite-forwarded-by", "n9").send().await.unwrap();
    assert_eq!(looped.status(), 421);

    batches_are_split_by_owner_and_answered_in_order(&nodes).await;
    the_map_is_shown(&nodes, &etcd).await;
}

/// `POST /batch` through a forwarding node spans every owner; through a redirecting one, the
/// others' operations get 421 each.
async fn batches_are_split_by_owner_and_answered_in_order(nodes: &Nodes) {
    let hex = |i: u32| hex::encode(key(i));
    let ops: Vec<Value> = (0..12)
        .map(|i| match i % 3 {
            0 => json!({"op": "get", "key": hex(i)}),
            1 => json!({"op": "put", "key": hex(1000 + i), "value": "aa", "if_none_match": "*"}),
            _ => json!({"op": "delete", "key": hex(i)}),
        })
        .chain([json!({"op": "get", "key": "zz"}), json!({"op": "get", "key": hex(5)})])
        .collect();
    let owners: std::collections::BTreeSet<&str> = (0..12u32)
        .map(|i| if i % 3 == 1 { key(1000 + i) } else { key(i) })
        .map(|k| initial_owner(nodes.partition(&k)))
        .collect();
    assert_eq!(owners.len(), 3, "the batch spans every owner");
    let results = post_json(&nodes.server("n2").at("/batch"), &json!({"ops": ops})).await;
    let results = results["results"].as_array().unwrap();
    let statuses: Vec<u64> = results.iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [200, 201, 204, 200, 201, 204, 200, 201, 204, 200, 201, 204, 400, 404]);
    for (i, result) in results.iter().take(12).enumerate().filter(|(i, _)| i % 3 == 0) {
        assert_eq!(result["value"].as_str(), Some(hex::encode(format!("value-{i}")).as_str()), "op {i}");
    }

    let at_n3 = (0..KEYS).find(|&i| initial_owner(nodes.partition(&key(i))) == "n3").unwrap();
    let at_n1 = (0..KEYS).find(|&i| initial_owner(nodes.partition(&key(i))) == "n1").unwrap();
    let ops = json!({"ops": [{"op": "get", "key": hex(at_n1)}, {"op": "get", "key": hex(at_n3)}]});
    let answer = post_json(&nodes.server("n3").at("/batch"), &ops).await;
    let results = answer["results"].as_array().unwrap();
    assert_eq!((results[0]["status"].as_u64(), results[0]["owner"].as_str()), (Some(421), Some("n1")));
    assert_eq!(results[1]["status"].as_u64(), Some(200));
}

/// `GET /cluster` on a node and `shardlite cluster status` show the map, the nodes alive and
/// the records of each node's partitions.
async fn the_map_is_shown(nodes: &Nodes, etcd: &etcd::Etcd) {
    let map = get_json(&nodes.server("n2").at("/cluster")).await;
    assert_eq!(
        (map["node"].as_str(), map["version"].as_u64(), map["partitions"].as_u64()),
        (Some("n2"), Some(1), Some(8))
    );
    let owners: Vec<&str> = map["owners"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
    assert_eq!(owners, (0..PARTITIONS).map(initial_owner).collect::<Vec<_>>());
    assert!(map["nodes"].as_array().unwrap().iter().all(|n| n["alive"] == true), "{map}");
    let router = map["nodes"].as_array().unwrap().iter().find(|n| n["id"] == "router").unwrap();
    assert_eq!(router["partitions"], json!([]), "a spare node owns nothing");

    let out = shardlite(&["cluster", "status", "--etcd", &etcd.endpoints, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    let total: u64 = status["nodes"].as_array().unwrap().iter().map(|n| n["records"].as_u64().unwrap()).sum();
    // KEYS written, 4 deleted and 4 inserted by the batch.
    assert_eq!(total, u64::from(KEYS));
    let table = shardlite(&["cluster", "status", "--etcd", &etcd.endpoints]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("n3") && table.contains("3 (0-2)") && table.contains("yes"), "{table}");
}

#[tokio::test]
async fn nodes_refuse_a_data_directory_of_another_shape_and_follow_new_maps() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let mut nodes = Nodes::init(&etcd, &["n1", "n2", "n3"], &[]);

    // A data directory made with 16 partitions cannot serve a map of 8.
    let other = dir.path().join("sixteen");
    let create = shardlite_engine::CreateOptions { partitions: Some(16), ..Default::default() };
    drop(shardlite_engine::Store::open_or_create(&other, create, shardlite_engine::Config::default()).unwrap());
    let addr = nodes.addresses["n1"].to_string();
    let serve = |extra: &[&str]| {
        let mut args = vec!["serve", "--data", other.to_str().unwrap(), "--listen", &addr, "--cluster"];
        args.extend(["--etcd", &etcd.endpoints, "--node-id", "n1"]);
        args.extend_from_slice(extra);
        shardlite(&args)
    };
    let refused = serve(&[]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("partitions = 16") && stderr.contains("cluster map"), "{stderr}");
    let given = serve(&["--partitions", "16"]);
    assert!(String::from_utf8_lossy(&given.stderr).contains("the cluster map (version 1) says partitions = 8"));

    for id in ["n1", "n2", "n3"] {
        nodes.start(&etcd, id, dir.path(), &[]).await;
    }
    // n3 stops; the map moves partition 6 (n3's) to n1, by a transaction on the previous revision.
    nodes.servers.remove("n3").unwrap().stop();
    let (mut map, read_at) = etcd.map().await;
    map.owners[6] = "n1".into();
    map.version += 1;
    assert!(etcd.write_map(&map, read_at).await);
    assert!(!etcd.write_map(&map, read_at).await, "a change on a stale revision is refused");

    // The running nodes follow version 2: partition 6 is served by n1.
    for id in ["n1", "n2"] {
        wait_for_version(nodes.server(id), 2).await;
    }
    let moved = (0..).map(|i| format!("moved-{i}").into_bytes()).find(|k| nodes.partition(k) == 6).unwrap();
    let put = client().put(nodes.server("n2").kv(&moved)).body("m").send().await.unwrap();
    assert_eq!(put.status(), 201, "n2 forwards partition 6 to n1, its new owner");
    assert_eq!(records(nodes.server("n1")).await[6], 1);

    // n3 comes back: it reads version 2 at start and forwards what it no longer owns.
    nodes.start(&etcd, "n3", dir.path(), &[]).await;
    let map = get_json(&nodes.server("n3").at("/cluster")).await;
    assert_eq!(map["version"].as_u64(), Some(2));
    let got = client().get(nodes.server("n3").kv(&moved)).send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(records(nodes.server("n3")).await[6], 0, "nothing was written to n3's copy of partition 6");
}

/// The JSON document a GET of `url` answers (200).
async fn get_json(url: &str) -> Value {
    let answer = client().get(url).send().await.unwrap();
    assert_eq!(answer.status(), 200, "GET {url}");
    serde_json::from_str(&answer.text().await.unwrap()).unwrap()
}

/// The JSON document a POST of `body` to `url` answers (200).
async fn post_json(url: &str, body: &Value) -> Value {
    let answer =
        client().post(url).header("content-type", "application/json").body(body.to_string()).send().await.unwrap();
    assert_eq!(answer.status(), 200, "POST {url}");
    serde_json::from_str(&answer.text().await.unwrap()).unwrap()
}

/// Waits until `server` follows map `version` (bounded: a watch event arrives in milliseconds).
async fn wait_for_version(server: &Server, version: u64) {
    for _ in 0..200 {
        let map = get_json(&server.at("/cluster")).await;
        if map["version"].as_u64() == Some(version) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} did not follow map version {version} within 10 s", server.url);
}
