//! Fencing and failover (docs/cluster.md, "Failover"), with short leases (`--lease-ttl`
//! [`LEASE_TTL`]):
//!
//! - A node cut off from etcd (its only endpoint is a proxy the test cuts) stops serving its
//!   own partitions (503 `fenced`, in a batch too) while it still forwards the others'; once it
//!   reaches etcd again it registers, reads the map, and forwards a partition the map gave away
//!   meanwhile instead of serving its stale copy.
//! - `cluster failover NODE` of a killed node: each partition to a live node, reported.
//! - `kill -9` of a node with every node replicating to its own Litestream replica and
//!   `--auto-failover`: its partitions are served again by the survivors, every write
//!   acknowledged before the replicated point (a marker per partition, confirmed in the replica
//!   by restoring it) is there with its value, the restored partitions pass `check`, and the
//!   killed node started again on its old data forwards those partitions to their new owners.

use std::{
    path::Path,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use super::*;
use common::litestream::{litestream, Replicator};

/// The nodes' lease, seconds: the shortest etcd grants.
pub(super) const LEASE_TTL: &str = "2";
/// How long the tests wait for what the lease and a failover take.
const PATIENCE: Duration = Duration::from_secs(60);

/// A TCP proxy to one etcd member that the test can cut (every connection dropped, new ones
/// refused) and heal.
struct Proxy {
    address: String,
    cut: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(upstream: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let (cut, connections) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let (cutting, tasks) = (Arc::clone(&cut), Arc::clone(&connections));
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if cutting.load(Ordering::SeqCst) {
                    continue;
                }
                let upstream = upstream.clone();
                tasks.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                }));
            }
        });
        Self { address, cut, connections }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for task in self.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// Polls `what` until it holds, for at most [`PATIENCE`].
pub(super) async fn until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + PATIENCE;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A key of partition `p` not used elsewhere.
fn key_of(nodes: &Nodes, p: u32, tag: &str) -> Vec<u8> {
    (0..).map(|i| format!("{tag}-{i}").into_bytes()).find(|k| nodes.partition(k) == p).unwrap()
}

/// The `error` code of an answer.
async fn code_of(answer: reqwest::Response) -> String {
    let body: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    body["error"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_node_without_its_lease_is_fenced_and_back_with_a_stale_map_it_forwards() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let proxy = Proxy::start(etcd.endpoints.split(',').next().unwrap()).await;
    let mut nodes = Nodes::init(&etcd, &["n1", "n2", "n3"], &[]);
    let ttl = ["--lease-ttl", LEASE_TTL];
    let n1_args = ["--cluster", "--etcd", &proxy.address, "--node-id", "n1", ttl[0], ttl[1]];
    let n1 = Server::start_at(nodes.addresses["n1"], &dir.path().join("n1"), &n1_args).await;
    nodes.servers.insert("n1".into(), n1);
    for id in ["n2", "n3"] {
        nodes.start(&etcd, id, dir.path(), &ttl).await;
    }
    let http = client();
    let (mine, theirs) = (key_of(&nodes, 0, "fence"), key_of(&nodes, 3, "fence"));
    for key in [&mine, &theirs] {
        let put = http.put(nodes.server("n2").kv(key)).body("before").send().await.unwrap();
        assert_eq!(put.status(), 201);
    }

    let refused = shardlite(&["cluster", "failover", "n1", "--etcd", &etcd.endpoints]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("holds its lease"), "a live node is not failed over: {said}");

    // Cut off from etcd, n1 stops serving its partitions within the lease; others' it forwards.
    proxy.cut();
    let n1 = nodes.server("n1");
    until("n1 fences its partitions", || async { http.get(n1.kv(&mine)).send().await.unwrap().status() == 503 }).await;
    let fenced = http.put(n1.kv(&mine)).body("during").send().await.unwrap();
    assert_eq!(fenced.status(), 503);
    assert!(fenced.headers().contains_key("retry-after"));
    assert_eq!(code_of(fenced).await, "fenced");
    let via_n2 = http.get(nodes.server("n2").kv(&mine)).send().await.unwrap();
    assert_eq!(code_of(via_n2).await, "fenced", "a forwarded request gets the owner's refusal");
    let batch = json!({"ops": [{"op": "get", "key": hex::encode(&mine)}, {"op": "get", "key": hex::encode(&theirs)}]});
    let answer = post_json(&n1.at("/batch"), &batch).await;
    let statuses: Vec<u64> =
        answer["results"].as_array().unwrap().iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [503, 200], "its own operation fenced, the other node's forwarded");
    assert_eq!(answer["results"][0]["error"], "fenced");
    let ready = http.get(n1.at("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503, "a fenced node is not ready");

    // Meanwhile the map gives partition 0 to n2 (what a failover does); n1 comes back.
    let client = etcd.client();
    until("etcd sees n1's lease expire", || {
        let client = client.clone();
        async move { client.get("/shardlite/alive/n1").await.unwrap().is_none() }
    })
    .await;
    etcd.reassign(0, "n2").await;
    proxy.heal();
    until("n1 serves again", || async { http.get(n1.at("/readyz")).send().await.unwrap().status() == 200 }).await;
    // n2 holds no record of partition 0: n1 forwards, and its stale copy ("before") is not read.
    let got = http.get(n1.kv(&mine)).send().await.unwrap();
    assert_eq!(got.status(), 404, "partition 0 is n2's now: forwarded, not served from n1's copy");
    let put = http.put(n1.kv(&mine)).body("after").send().await.unwrap();
    assert_eq!(put.status(), 201, "created on n2");
    assert_eq!(records(nodes.server("n2")).await[0], 1);
    assert_eq!(records(n1).await[0], 1, "n1's stale copy is left as it was");
}

/// Writes the Litestream config of `data` replicating to `replica` and starts replicating.
fn replicate(bin: &Path, data: &Path, replica: &Path) -> Replicator {
    let config = data.with_extension("yml");
    let written = shardlite(&[
        "litestream-config",
        "--data",
        data.to_str().unwrap(),
        "--replica",
        replica.to_str().unwrap(),
        "--out",
        config.to_str().unwrap(),
    ]);
    assert!(written.status.success(), "{}", String::from_utf8_lossy(&written.stderr));
    Replicator::start(bin, &config, &data.with_extension("litestream.log"))
}

/// Whether partition `p`'s replica under `replica` holds `key` with `value`.
fn replicated(bin: &Path, replica: &Path, p: u32, key: &[u8], value: &[u8], scratch: &Path) -> bool {
    let Some(out) = restored(bin, replica, p, scratch) else { return false };
    let conn = rusqlite::Connection::open_with_flags(&out, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let found: Option<Vec<u8>> = conn.query_row("SELECT value FROM records WHERE key = ?1", [key], |r| r.get(0)).ok();
    found.as_deref() == Some(value)
}

/// Partition `p` restored from its Litestream replica in `replica` into a file in `scratch`, if
/// the replica holds it yet.
fn restored(bin: &Path, replica: &Path, p: u32, scratch: &Path) -> Option<std::path::PathBuf> {
    let out = scratch.join(format!("probe-p{p}.db"));
    let _ = std::fs::remove_file(&out);
    let url = format!("file://{}/p{p:04}", replica.display());
    let restored = Command::new(bin).args(["restore", "-o"]).arg(&out).arg(&url).output().unwrap();
    restored.status.success().then_some(out)
}

/// Sends `put` again while it is refused 503, for at most [`PATIENCE`]; its last answer. A
/// refused write was not done: a node whose lease lapsed (2 s, on a machine busy with other
/// tests) is fenced until it registers again, and a write too few copies held in a short
/// replication timeout (a flush stalled on a busy disk) is rolled back.
pub(super) async fn past_503(put: reqwest::RequestBuilder) -> reqwest::Response {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = put.try_clone().unwrap().send().await.unwrap();
        if answer.status() != reqwest::StatusCode::SERVICE_UNAVAILABLE || Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// PUTs `value` at `url` until it is acknowledged (201), past 503s ([`past_503`]); any other
/// answer fails.
async fn put_acknowledged(http: &reqwest::Client, url: String, value: &str) {
    let put = past_503(http.put(&url).body(value.to_owned())).await;
    let status = put.status();
    assert_eq!(status, 201, "PUT {url}: {status} {}", put.text().await.unwrap_or_default());
}

/// Nodes n1, n2, n3 with short leases, each replicating to `DIR/replica-ID` with Litestream
/// (and recording it), with `extra` flags.
async fn replicating(
    etcd: &etcd::Etcd,
    dir: &Path,
    litestream: &Path,
    extra: &[&str],
) -> (Nodes, BTreeMap<&'static str, Replicator>) {
    let mut nodes = Nodes::init(etcd, &["n1", "n2", "n3"], &[]);
    let mut replicators = BTreeMap::new();
    for id in ["n1", "n2", "n3"] {
        let replica = dir.join(format!("replica-{id}"));
        let mut args =
            vec!["--lease-ttl", LEASE_TTL, "--litestream", "--litestream-replica", replica.to_str().unwrap()];
        args.extend(["--litestream-bin", litestream.to_str().unwrap()]);
        args.extend_from_slice(extra);
        nodes.start(etcd, id, dir, &args).await;
        replicators.insert(id, replicate(litestream, &dir.join(id), &replica));
    }
    (nodes, replicators)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_node_is_failed_over_by_the_command_which_reports_each_partition() {
    let Some(bin) = etcd::binary() else { return };
    let Some(litestream) = litestream() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let (mut nodes, mut replicators) = replicating(&etcd, dir.path(), &litestream, &[]).await;
    let marker = key_of(&nodes, 7, "marker");
    put_acknowledged(&client(), nodes.server("n1").kv(&marker), "marker").await;
    let (replica, scratch) = (dir.path().join("replica-n3"), dir.path().to_owned());
    until("the marker reaches n3's replica", || {
        let (litestream, replica, marker, scratch) =
            (litestream.clone(), replica.clone(), marker.clone(), scratch.clone());
        async move {
            tokio::task::spawn_blocking(move || replicated(&litestream, &replica, 7, &marker, b"marker", &scratch))
                .await
                .unwrap()
        }
    })
    .await;
    // Litestream takes each database's first snapshot in its own time: a partition of n3's
    // without one could not be failed over (seen under the load of the whole suite).
    let map = get_json(&nodes.server("n1").at("/cluster")).await;
    let of_n3: Vec<u32> =
        (0..).zip(map["owners"].as_array().unwrap()).filter(|(_, o)| *o == "n3").map(|(p, _)| p).collect();
    until("each partition of n3 reaches its replica", || {
        let (litestream, replica, scratch, of_n3) =
            (litestream.clone(), replica.clone(), scratch.clone(), of_n3.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                of_n3.iter().all(|&p| restored(&litestream, &replica, p, &scratch).is_some())
            })
            .await
            .unwrap()
        }
    })
    .await;
    nodes.servers.remove("n3").unwrap().kill();
    drop(replicators.remove("n3"));
    let n1 = nodes.server("n1");
    until("n3's lease expires", || async {
        let map = get_json(&n1.at("/cluster")).await;
        map["nodes"].as_array().unwrap().iter().any(|n| n["id"] == "n3" && n["alive"] == false)
    })
    .await;
    let done = shardlite(&["cluster", "failover", "n3", "--etcd", &etcd.endpoints, "--json"]);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let report: Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!((report["node"].as_str(), report["map_version"].as_u64()), (Some("n3"), Some(2)));
    let partitions = report["partitions"].as_array().unwrap();
    let taken: Vec<(u64, &str)> =
        partitions.iter().map(|p| (p["partition"].as_u64().unwrap(), p["to"].as_str().unwrap())).collect();
    assert_eq!(taken, [(6, "n1"), (7, "n2")], "spread over the live nodes, each owning 3 before");
    assert_eq!(partitions[1]["records"], 1, "the marker");
    assert!(partitions.iter().all(|p| !p["replica_txid"].as_str().unwrap().is_empty()));
    // n1 forwards partition 7 to n2 once its watch has brought the new map.
    wait_for_version(n1, 2).await;
    let got = client().get(n1.kv(&marker)).send().await.unwrap();
    assert_eq!(got.text().await.unwrap(), "marker");
    let again = shardlite(&["cluster", "failover", "n3", "--etcd", &etcd.endpoints]);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("owns no partition"),
        "a second failover has nothing to do"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_node_is_failed_over_from_its_replica_and_comes_back_forwarding() {
    let Some(bin) = etcd::binary() else { return };
    let Some(litestream) = litestream() else { return };
    let dir = tempfile::tempdir().unwrap();
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let (mut nodes, mut replicators) = replicating(&etcd, dir.path(), &litestream, &["--auto-failover"]).await;

    // Writes through every node, then a marker per partition of n3, confirmed in n3's replica:
    // every write acknowledged before it is replicated.
    let http = client();
    let mut acked = BTreeMap::new();
    for i in 0..KEYS * 2 {
        let via = nodes.server(["n1", "n2", "n3"][i as usize % 3]);
        let value = format!("value-{i}");
        put_acknowledged(&http, via.kv(&key(i)), &value).await;
        acked.insert(key(i), value);
    }
    let replica = dir.path().join("replica-n3");
    for p in [6, 7] {
        let marker = key_of(&nodes, p, "marker");
        put_acknowledged(&http, nodes.server("n1").kv(&marker), "marker").await;
        let scratch = dir.path().to_owned();
        let (litestream, replica) = (litestream.clone(), replica.clone());
        until("the marker reaches n3's replica", || {
            let (litestream, replica, marker, scratch) =
                (litestream.clone(), replica.clone(), marker.clone(), scratch.clone());
            async move {
                tokio::task::spawn_blocking(move || replicated(&litestream, &replica, p, &marker, b"marker", &scratch))
                    .await
                    .unwrap()
            }
        })
        .await;
        acked.insert(marker, "marker".to_owned());
    }

    // kill -9 of n3 and its Litestream; n1 and n2 fail it over once its lease expires.
    nodes.servers.remove("n3").unwrap().kill();
    drop(replicators.remove("n3"));
    let n1 = nodes.server("n1");
    until("n3's partitions have new owners", || async {
        let map = get_json(&n1.at("/cluster")).await;
        map["owners"].as_array().unwrap().iter().all(|owner| owner != "n3")
    })
    .await;
    let map = get_json(&n1.at("/cluster")).await;
    assert_eq!(map["version"], 2, "one transaction changed the owners");
    let owners: Vec<String> =
        map["owners"].as_array().unwrap().iter().map(|o| o.as_str().unwrap().to_owned()).collect();
    assert_eq!(&owners[..6], ["n1", "n1", "n1", "n2", "n2", "n2"], "the survivors keep their own");
    let mut new_owners = vec![owners[6].clone(), owners[7].clone()];
    new_owners.sort();
    assert_eq!(new_owners, ["n1", "n2"], "one each: spread over the live nodes");

    // Every acknowledged write is there, through either survivor.
    for (k, value) in &acked {
        for via in ["n1", "n2"] {
            let got = http.get(nodes.server(via).kv(k)).send().await.unwrap();
            assert_eq!(got.status(), 200, "{} via {via}", String::from_utf8_lossy(k));
            assert_eq!(&got.text().await.unwrap(), value);
        }
    }
    for id in ["n1", "n2"] {
        let reports = get_json(&nodes.server(id).at("/admin/check")).await;
        for report in reports["reports"].as_array().unwrap() {
            assert!(report["problems"].as_array().unwrap().is_empty() && report["sqlite"] == "ok", "{id}: {report}");
            assert_eq!(report["records"], report["counted_records"], "{id}: {report}");
        }
    }

    // n3 comes back on its old data: it reads the map and forwards partitions 6 and 7.
    let changed = key_of(&nodes, 6, "fence");
    put_acknowledged(&http, n1.kv(&changed), "after the failover").await;
    nodes.start(&etcd, "n3", dir.path(), &["--lease-ttl", LEASE_TTL]).await;
    let got = http.get(nodes.server("n3").kv(&changed)).send().await.unwrap();
    assert_eq!(got.text().await.unwrap(), "after the failover", "served by the new owner");
    let stale = acked.keys().find(|k| nodes.partition(k) == 7).unwrap();
    let got = http.get(nodes.server("n3").kv(stale)).send().await.unwrap();
    assert_eq!(got.text().await.unwrap(), acked[stale]);
    let map = get_json(&nodes.server("n3").at("/cluster")).await;
    assert_eq!(map["version"], 2, "no failover of anything else, no move back");
}
