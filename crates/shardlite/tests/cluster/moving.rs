//! `shardlite cluster move` (docs/cluster.md, "Moving a partition"): a partition moved while
//! writers keep updating, deleting and creating its keys through every node loses no
//! acknowledged write, keeps each record's id and counter (so no version is handed out twice),
//! passes `check` on its new owner, and the old owner forwards to it afterwards, its stale copy
//! emptied; reads through the old owner racing the flip (held long enough by
//! `--test-read-pause-ms` to meet it) still find every record; a move that fails (a target down, a freeze past its timeout) leaves the map and the
//! writes as they were.

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use super::*;

/// The partition moved (n1's in the initial map).
const MOVED: u32 = 0;

/// Keys of partition [`MOVED`].
fn keys_of_moved(nodes: &Nodes, count: usize) -> Vec<Vec<u8>> {
    (0..).map(|i| format!("mv-{i}").into_bytes()).filter(|k| nodes.partition(k) == MOVED).take(count).collect()
}

/// `(id, counter)` of an entity tag `"epoch.id.counter"`.
fn parse_id_counter(etag: &str) -> (u64, u64) {
    let (_, text) = etag.trim_matches('"').split_once('.').unwrap();
    let (id, counter) = text.split_once('.').unwrap();
    (id.parse().unwrap(), counter.parse().unwrap())
}

/// Every acknowledged write of one key, in order: (value, entity tag).
type Acked = BTreeMap<Vec<u8>, Vec<(String, String)>>;

/// PUTs the keys round after round through n1, n2 and n3 in turn, one at a time, noting each
/// acknowledged write; once told to `stop`, writes each key once more through each node. A
/// refused write (421 from a node on the old map, 503) is not acknowledged, and not counted.
async fn write_until(urls: Vec<String>, keys: Vec<Vec<u8>>, stop: Arc<AtomicBool>) -> Acked {
    let http = client();
    let mut acked = Acked::new();
    let (mut n, mut after_stop) = (0usize, 0usize);
    loop {
        if stop.load(Ordering::Relaxed) {
            after_stop += 1;
            if after_stop > urls.len() * keys.len() {
                break;
            }
        }
        let key = &keys[n % keys.len()];
        let value = format!("value-{n}");
        let url = format!("{}/kv/{}", urls[n % urls.len()], hex::encode(key));
        n += 1;
        let Ok(answer) = http.put(&url).body(value.clone()).send().await else { continue };
        if answer.status().is_success() {
            let etag = answer.headers()["etag"].to_str().unwrap().to_owned();
            acked.entry(key.clone()).or_default().push((value, etag));
        }
    }
    acked
}

/// Deletes and creates again the keys through n1, n2 and n3 in turn, one request at a time,
/// until told to `stop`; each key's last acknowledged state: its value, or `None` (deleted).
async fn churn_until(
    urls: Vec<String>,
    keys: Vec<Vec<u8>>,
    stop: Arc<AtomicBool>,
) -> BTreeMap<Vec<u8>, Option<String>> {
    let http = client();
    let mut state = BTreeMap::new();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let key = &keys[n % keys.len()];
        let url = format!("{}/kv/{}", urls[n % urls.len()], hex::encode(key));
        let value = format!("churn-{n}");
        // Each key alternates: created, deleted, created...
        let put = (n / keys.len()).is_multiple_of(2);
        n += 1;
        let request = if put { http.put(&url).body(value.clone()) } else { http.delete(&url) };
        let Ok(answer) = request.send().await else { continue };
        match answer.status().as_u16() {
            200 | 201 if put => state.insert(key.clone(), Some(value)),
            200 | 204 | 404 if !put => state.insert(key.clone(), None),
            _ => None,
        };
    }
    state
}

/// A 3-member etcd and nodes n1, n2, n3 of the initial map, their data in `dir`; n1 started
/// with `n1_flags` besides.
async fn three_nodes(bin: &std::path::Path, dir: &std::path::Path, n1_flags: &[&str]) -> (etcd::Etcd, Nodes) {
    let etcd = etcd::Etcd::start(bin, dir).await;
    let mut nodes = Nodes::init(&etcd, &["n1", "n2", "n3"], &[]);
    for id in ["n1", "n2", "n3"] {
        nodes.start(&etcd, id, dir, if id == "n1" { n1_flags } else { &[] }).await;
    }
    (etcd, nodes)
}

/// `shardlite cluster move` of partition [`MOVED`] to n3, off the test's runtime (whose tasks go
/// on meanwhile): its JSON summary.
async fn move_to_n3(etcd: &etcd::Etcd) -> Value {
    let endpoints = etcd.endpoints.clone();
    let out =
        tokio::task::spawn_blocking(move || shardlite(&["cluster", "move", "0", "n3", "--etcd", &endpoints, "--json"]));
    let out = out.await.unwrap();
    assert!(out.status.success(), "cluster move: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Transactions committed to partition [`MOVED`] on `server`.
async fn commits(server: &Server) -> u64 {
    let stats = get_json(&server.at("/stats")).await;
    stats["store"]["partitions"][MOVED as usize]["commits"].as_u64().unwrap()
}

#[tokio::test]
async fn a_partition_moves_under_writes_and_loses_nothing() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (etcd, nodes) = three_nodes(&bin, dir.path(), &[]).await;
    let all = keys_of_moved(&nodes, 50);
    let (keys, churned) = (all[..40].to_vec(), all[40..].to_vec());
    let urls: Vec<String> = ["n1", "n2", "n3"].iter().map(|id| nodes.server(id).url.clone()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_until(urls.clone(), keys.clone(), Arc::clone(&stop)));
    // Let every key land first (the churner starts after: the count is the writer's keys
    // alone), so the partition holds all of them, and records of several counters.
    while records(nodes.server("n1")).await[MOVED as usize] < keys.len() as u64 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let churner = tokio::spawn(churn_until(urls, churned.clone(), Arc::clone(&stop)));

    let summary = move_to_n3(&etcd).await;
    assert_eq!((summary["from"].as_str(), summary["to"].as_str()), (Some("n1"), Some("n3")), "{summary}");
    assert_eq!(summary["map_version"].as_u64(), Some(2));
    assert!(summary["records"].as_u64().unwrap() >= keys.len() as u64, "{summary}");
    assert!(summary["bytes"].as_u64().unwrap() > 0 && summary["write_pause_ms"].is_number(), "{summary}");
    assert!(summary["rounds"].as_u64().unwrap() >= 1 && summary["last_changes"].is_u64(), "{summary}");
    assert!(summary["dropped"].as_u64().unwrap() >= keys.len() as u64, "{summary}");

    for id in ["n2", "n3"] {
        wait_for_version(nodes.server(id), 2).await;
    }
    // The writer goes on through every node, the old owner included, after the move.
    let before = commits(nodes.server("n1")).await;
    stop.store(true, Ordering::Relaxed);
    let acked = writer.await.unwrap();
    let churned_state = churner.await.unwrap();

    // Every acknowledged write is on the new owner: the last value of each key, under the very
    // tag its last acknowledged write was given (the partition keeps its epoch); no version was
    // acknowledged twice for a key.
    let http = client();
    for key in &keys {
        let writes = &acked[key];
        let (value, etag) = writes.last().unwrap();
        let got = http.get(nodes.server("n3").kv(key)).send().await.unwrap();
        assert_eq!(got.status(), 200);
        assert_eq!(got.headers()["etag"].to_str().unwrap(), etag, "{key:?}: the same tag on the new owner");
        assert_eq!(&got.text().await.unwrap(), value, "{key:?}");
        let versions: Vec<(u64, u64)> = writes.iter().map(|(_, etag)| parse_id_counter(etag)).collect();
        let increasing = versions.windows(2).all(|w| w[0].0 == w[1].0 && w[0].1 < w[1].1);
        assert!(increasing, "a version was handed out twice for {key:?}: {writes:?}");
    }
    // Keys deleted and created again throughout: each as its last acknowledged write left it.
    for (key, state) in &churned_state {
        let got = http.get(nodes.server("n3").kv(key)).send().await.unwrap();
        match state {
            Some(value) => {
                assert_eq!((got.status().as_u16(), got.text().await.unwrap()), (200, value.clone()), "{key:?}")
            }
            None => assert_eq!(got.status(), 404, "{key:?}"),
        }
    }
    let live = keys.len() as u64 + churned_state.values().filter(|s| s.is_some()).count() as u64;
    assert_eq!(records(nodes.server("n3")).await[MOVED as usize], live);
    assert_eq!(commits(nodes.server("n1")).await, before, "the old owner wrote nothing after the move");
    assert_eq!(records(nodes.server("n1")).await[MOVED as usize], 0, "the old owner's stale copy is emptied");

    // The moved partition passes the new owner's check.
    let check = get_json(&nodes.server("n3").at("/admin/check")).await;
    let report = &check["reports"][MOVED as usize];
    assert_eq!((report["sqlite"].as_str(), &report["problems"]), (Some("ok"), &json!([])), "{report}");
    assert_eq!((report["missing_entries"].as_u64(), report["extra_entries"].as_u64()), (Some(0), Some(0)));
    assert_eq!(report["records"].as_u64(), Some(live));
}

/// The reads a reader through the old owner makes of the moved partition.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// `GET /kv/{key}` of each key in turn: its value.
    Get,
    /// `GET /keys?partition=P`: every key, on one page.
    Keys,
    /// `GET /export?partition=P`: the whole partition, as exported before the move.
    Export,
}

/// What the moved partition held before the move: each key's value, and its export.
struct Before {
    values: BTreeMap<Vec<u8>, String>,
    export: Vec<u8>,
}

/// Makes `read` through `url` (the old owner) again and again until told to `stop`, then once
/// more; the reads made, and every answer that missed a record acknowledged before the move.
async fn read_until(url: String, read: Read, before: Arc<Before>, stop: Arc<AtomicBool>) -> (usize, Vec<String>) {
    let http = client();
    let (mut made, mut wrong) = (0usize, Vec::new());
    let keys: Vec<&Vec<u8>> = before.values.keys().collect();
    let listed: Vec<String> = keys.iter().map(hex::encode).collect();
    let mut stopping = false;
    while !stopping {
        stopping = stop.load(Ordering::Relaxed);
        let key = keys[made % keys.len()];
        let path = match read {
            Read::Get => format!("/kv/{}", hex::encode(key)),
            Read::Keys => format!("/keys?partition={MOVED}&limit=1000"),
            Read::Export => format!("/export?partition={MOVED}"),
        };
        let answer = http.get(format!("{url}{path}")).send().await.unwrap();
        let status = answer.status().as_u16();
        let body = answer.bytes().await.unwrap();
        made += 1;
        let right = status == 200
            && match read {
                Read::Get => body == before.values[key].as_bytes(),
                Read::Keys => {
                    let page: Value = serde_json::from_slice(&body).unwrap();
                    let mut got: Vec<String> = page["keys"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|k| k["key"].as_str().unwrap().to_owned())
                        .collect();
                    got.sort();
                    got == listed && page["next"].is_null()
                }
                Read::Export => body == before.export,
            };
        if !right {
            wrong.push(format!("{path}: {status}, {} bytes: {}", body.len(), String::from_utf8_lossy(&body)));
        }
    }
    (made, wrong)
}

#[tokio::test]
async fn reads_through_the_old_owner_racing_the_flip_find_every_record() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Each read n1 serves itself waits 50 ms between the decision and the read: a read decided
    // just before the flip reaches the partition after its stale copy is emptied.
    let (etcd, nodes) = three_nodes(&bin, dir.path(), &["--test-read-pause-ms", "50"]).await;
    let http = client();
    let mut values = BTreeMap::new();
    for (i, key) in keys_of_moved(&nodes, 40).into_iter().enumerate() {
        let value = format!("before-{i}");
        assert_eq!(http.put(nodes.server("n1").kv(&key)).body(value.clone()).send().await.unwrap().status(), 201);
        values.insert(key, value);
    }
    let export = http.get(nodes.server("n1").at(&format!("/export?partition={MOVED}"))).send().await.unwrap();
    let before = Arc::new(Before { values, export: export.bytes().await.unwrap().to_vec() });

    let stop = Arc::new(AtomicBool::new(false));
    let url = nodes.server("n1").url.clone();
    let reads = [Read::Get, Read::Get, Read::Get, Read::Get, Read::Keys, Read::Export];
    let readers: Vec<_> = reads
        .iter()
        .map(|&read| tokio::spawn(read_until(url.clone(), read, Arc::clone(&before), Arc::clone(&stop))))
        .collect();
    let summary = move_to_n3(&etcd).await;
    assert_eq!((summary["map_version"].as_u64(), summary["dropped"].as_u64()), (Some(2), Some(40)), "{summary}");
    stop.store(true, Ordering::Relaxed);

    let mut missed = Vec::new();
    for (read, reader) in reads.iter().zip(readers) {
        let (made, wrong) = reader.await.unwrap();
        assert!(made >= 2, "{read:?}: {made} reads");
        if !wrong.is_empty() {
            missed.push(format!("{read:?}: {} of {made} reads missed records: {wrong:#?}", wrong.len()));
        }
    }
    assert!(missed.is_empty(), "{missed:#?}");
    assert_eq!(records(nodes.server("n1")).await[MOVED as usize], 0, "the old owner's stale copy is emptied");
}

/// `count` keys of partition [`MOVED`], each written once through n2.
async fn written(nodes: &Nodes, count: usize) -> Vec<Vec<u8>> {
    let (keys, http) = (keys_of_moved(nodes, count), client());
    for key in &keys {
        assert_eq!(http.put(nodes.server("n2").kv(key)).body("before").send().await.unwrap().status(), 201);
    }
    keys
}

/// After a failed move: node `via` follows map version 1, where n1 owns the partition, and
/// each key written again through `via` is an update at n1.
async fn assert_unmoved(nodes: &Nodes, via: &str, keys: &[Vec<u8>]) {
    let map = get_json(&nodes.server(via).at("/cluster")).await;
    assert_eq!((map["version"].as_u64(), map["owners"][0].as_str()), (Some(1), Some("n1")));
    let http = client();
    for key in keys {
        let put = http.put(nodes.server(via).kv(key)).body("after").send().await.unwrap();
        assert_eq!(put.status(), 200, "writes to the partition go on at its owner");
    }
    assert_eq!(records(nodes.server("n1")).await[MOVED as usize], keys.len() as u64);
}

#[tokio::test]
async fn a_failed_move_leaves_the_map_and_the_writes_as_they_were() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (etcd, mut nodes) = three_nodes(&bin, dir.path(), &[]).await;
    let keys = written(&nodes, 8).await;
    nodes.servers.remove("n3").unwrap().stop();

    let out = shardlite(&["cluster", "move", "0", "n3", "--etcd", &etcd.endpoints]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("did not move partition 0") && stderr.contains("n3"), "{stderr}");
    let refused = shardlite(&["cluster", "move", "0", "n1", "--etcd", &etcd.endpoints]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("on node `n1` already"));

    assert_unmoved(&nodes, "n2", &keys).await;
}

#[tokio::test]
async fn a_freeze_past_its_timeout_fails_the_move_and_lets_the_writes_go() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    // No time at all for the last round: every move out of n1 fails at the freeze.
    let (etcd, nodes) = three_nodes(&bin, dir.path(), &["--move-freeze-timeout-ms", "0"]).await;
    let keys = written(&nodes, 8).await;

    // Twice: the first move, failed, holds no claim on the partition that would refuse the next.
    for _ in 0..2 {
        let out = shardlite(&["cluster", "move", "0", "n3", "--etcd", &etcd.endpoints]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("within the freeze's 0 ms") && stderr.contains("not changed"), "{stderr}");
    }

    assert_unmoved(&nodes, "n3", &keys).await;
    // The move ended on n1: it notes no more changes for it.
    let changes =
        client().get(nodes.server("n1").at("/admin/move/records?partition=0&part=changes")).send().await.unwrap();
    assert_eq!(changes.status(), 409, "{}", changes.text().await.unwrap());
}

/// Nodes that require tokens: a move asked with the admin token goes through, each node
/// presenting its own `node` token to the other; the node routes (the move's transfer, the
/// takeover) refuse every client token, the admin's included.
#[tokio::test]
async fn nodes_speak_to_each_other_with_the_node_token_and_clients_cannot_pose_as_one() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "admin admin-7c1f\nwrite write-2b9d\nnode node-4e0a\n").unwrap();
    let flags = ["--auth-token-file", tokens.to_str().unwrap()];
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let mut nodes = Nodes::init(&etcd, &["n1", "n2", "n3"], &[]);
    for id in ["n1", "n2", "n3"] {
        nodes.start(&etcd, id, dir.path(), &flags).await;
    }
    let http = client();
    let keys = keys_of_moved(&nodes, 10);
    for key in &keys {
        let put = http.put(nodes.server("n2").kv(key)).bearer_auth("write-2b9d").body("v");
        assert_eq!(put.send().await.unwrap().status(), 201, "written through n2, forwarded to n1");
    }
    let node_routes = [
        (reqwest::Method::POST, "/admin/adopt?partition=0&from=n1"),
        (reqwest::Method::GET, "/admin/move/records?partition=0"),
        (reqwest::Method::POST, "/admin/takeover?partition=0&from=n1"),
        (reqwest::Method::POST, "/admin/replicate?from=n1"),
    ];
    for (method, path) in &node_routes {
        for token in ["admin-7c1f", "write-2b9d"] {
            let asked = http.request(method.clone(), nodes.server("n3").at(path)).bearer_auth(token).send().await;
            assert_eq!(asked.unwrap().status(), 403, "{token} on {method} {path}");
        }
    }
    let endpoints = etcd.endpoints.clone();
    let moved = tokio::task::spawn_blocking(move || {
        let args = ["cluster", "move", "0", "n3", "--etcd", &endpoints, "--json"];
        Command::new(EXE).args(args).env("SHARDLITE_AUTH_TOKEN", "admin-7c1f").output().unwrap()
    });
    let moved = moved.await.unwrap();
    assert!(moved.status.success(), "cluster move: {}", String::from_utf8_lossy(&moved.stderr));
    let summary: Value = serde_json::from_slice(&moved.stdout).unwrap();
    assert_eq!((summary["map_version"].as_u64(), summary["records"].as_u64()), (Some(2), Some(10)), "{summary}");
    for key in &keys {
        let got = http.get(nodes.server("n3").kv(key)).bearer_auth("write-2b9d").send().await.unwrap();
        assert_eq!(got.status(), 200, "on the new owner");
    }
}
