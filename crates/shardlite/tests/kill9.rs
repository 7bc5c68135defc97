//! `kill -9` under HTTP write load (`docs/reliability.md`, fault 1): a `shardlite serve --synchronous full`
//! child takes a mix of PUTs (inserts and updates), conditional PUTs (`If-None-Match: *`,
//! `If-Match: "<n>"`, a wrong `If-Match` that must answer 412), DELETEs and `POST /batch` from
//! several client tasks; it is SIGKILLed at a random moment, restarted on the same directory,
//! and every key is read back. Several rounds on one directory, then an orderly stop and
//! `shardlite check`.
//!
//! What is asserted, per key (each key belongs to one client task, so a key has at most one
//! write in flight):
//!
//! - every 2xx write answers an entity tag never given to that key before (`ETag`, batch
//!   `etag`), and a batch answers the update counter the known state predicts;
//! - a compare-and-set with the key's current tag succeeds; with any earlier tag of the key (of
//!   its earlier lives) it is answered 412 with the current tag;
//! - after a restart the key holds its last acknowledged value (or is absent), or, if a write
//!   to it was in flight when the server died (sent, no answer), the value that write would
//!   have produced: an unanswered request may or may not have been applied, but it is never
//!   applied wrongly;
//! - a key not written since the kill keeps its tag (`synchronous = full` shows nothing before
//!   it is durable, so the kill lost no state shown): a read answers the tag known before, and
//!   `If-Match` with it answers 200; a write in flight that was applied answers a tag the key
//!   never had;
//! - writes answered 412 or 404 change nothing;
//! - a batch that got no answer is all-or-nothing per partition: its operations whose keys fall
//!   in the same partition (one transaction, `docs/http-api.md`) are either all visible after
//!   the restart or none is. Operations in different partitions may differ (a batch is not
//!   atomic across partitions, as documented);
//! - after the last round the server stops cleanly (exit 0) and `shardlite check` passes.
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{Rng, Server};
use reqwest::{header, StatusCode};
use serde_json::{json, Value};
use shardlite_engine::{layout::Layout, KeyHasher, Manifest};

const TASKS: usize = 6;
const KEYS_PER_TASK: usize = 12;
const ROUNDS: usize = 4;
const SERVE_ARGS: &[&str] = &["--partitions", "4", "--synchronous", "full", "--writer-threads", "2"];

/// A record: its value and update counter.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    counter: u64,
    value: Vec<u8>,
}

/// A write sent without an answer yet: what the key holds if it was applied, and its batch.
#[derive(Debug, Clone)]
struct InFlight {
    outcome: Option<Rec>,
    batch: Option<u64>,
}

/// What the test knows of one key.
#[derive(Debug, Clone, Default)]
struct KeyLog {
    acked: Option<Rec>,
    in_flight: Option<InFlight>,
    /// The current record's tag (known while `acked` is `Some`).
    tag: Option<String>,
    /// Every tag the key was given.
    seen: Vec<String>,
}

impl KeyLog {
    /// Records a tag the server gave for a new state of the key: it must be new.
    fn new_tag(&mut self, tag: String, what: &str) {
        assert!(!self.seen.contains(&tag), "{what}: tag {tag} was given to this key before");
        self.seen.push(tag.clone());
        self.tag = Some(tag);
    }

    /// A tag the key had before its current one, if any.
    fn stale_tag(&self, rng: &mut Rng) -> Option<String> {
        let stale: Vec<&String> = self.seen.iter().filter(|t| Some(*t) != self.tag.as_ref()).collect();
        (!stale.is_empty()).then(|| stale[rng.below(stale.len() as u64) as usize].clone())
    }
}

fn key(id: usize) -> Vec<u8> {
    format!("kill9-key-{id:04}").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_http_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("kill9 seed {seed}");
    let mut rng = Rng::new(seed);
    let mut logs: Vec<Vec<KeyLog>> = vec![vec![KeyLog::default(); KEYS_PER_TASK]; TASKS];
    let mut hasher = None;
    let (mut total_acks, mut unanswered, mut unanswered_applied) = (0, 0, 0);
    for round in 0..=ROUNDS {
        let server = Server::start(&data, SERVE_ARGS).await;
        let hasher = *hasher.get_or_insert_with(|| {
            let manifest = Manifest::read(&Layout::new(&data).manifest()).unwrap();
            KeyHasher::new(manifest.hash_seed, manifest.partitions)
        });
        let (u, a) = verify(&server, &hasher, &mut logs, round).await;
        unanswered += u;
        unanswered_applied += a;
        if round == ROUNDS {
            let status = server.stop();
            assert!(status.success(), "the server's orderly stop failed: {status}");
            break;
        }

        // Load, then SIGKILL at a random moment once writes are being acknowledged.
        let acks = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = std::mem::take(&mut logs)
            .into_iter()
            .enumerate()
            .map(|(t, task_logs)| {
                let (url, acks) = (server.url.clone(), Arc::clone(&acks));
                let rng = Rng::new(rng.next());
                tokio::spawn(writer(url, t, round, task_logs, rng, acks))
            })
            .collect();
        let started = Instant::now();
        while acks.load(Ordering::Relaxed) < 30 {
            assert!(started.elapsed() < Duration::from_secs(30), "round {round}: writes are not being acknowledged");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(300 + rng.below(700))).await;
        server.kill();
        for task in tasks {
            logs.push(tokio::time::timeout(Duration::from_secs(60), task).await.unwrap().unwrap());
        }
        total_acks += acks.load(Ordering::Relaxed);
    }
    eprintln!(
        "kill9: {ROUNDS} kills, {total_acks} acknowledged writes, {unanswered} unanswered ({unanswered_applied} of \
         them applied)"
    );
    let check = common::check(&data);
    assert!(
        check.status.success(),
        "shardlite check failed:\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

/// Reads every key back after a restart and checks it against what was acknowledged and what
/// was in flight; then the known state is what was found. Returns (unanswered writes, of those
/// applied).
async fn verify(server: &Server, hasher: &KeyHasher, logs: &mut [Vec<KeyLog>], round: usize) -> (usize, usize) {
    let client = common::client();
    let (mut unanswered, mut applied_count) = (0, 0);
    // (batch, partition) -> whether each of its unanswered operations was applied.
    let mut batches: HashMap<(u64, u32), Vec<(usize, bool)>> = HashMap::new();
    for (t, task_logs) in logs.iter_mut().enumerate() {
        for (j, log) in task_logs.iter_mut().enumerate() {
            let id = t * KEYS_PER_TASK + j;
            let (found, tag) = get(&client, &server.kv(&key(id))).await;
            let value = |r: &Option<Rec>| r.as_ref().map(|r| r.value.clone());
            let (applied, now) = if found == value(&log.acked) {
                (false, log.acked.clone())
            } else if let Some(w) = log.in_flight.as_ref().filter(|w| value(&w.outcome) == found) {
                (true, w.outcome.clone())
            } else {
                panic!(
                    "round {round}, key {id}: found {found:?}; acknowledged {:?}, in flight {:?}",
                    log.acked, log.in_flight
                )
            };
            match (applied, tag) {
                // The write in flight took effect: a state never shown, under a tag never given.
                (true, Some(tag)) => log.new_tag(tag, &format!("round {round}, key {id}, after the restart")),
                (true, None) => log.tag = None,
                // Nothing shown under `full` was lost: the kill changed no tag.
                (false, tag) => {
                    assert_eq!(tag, log.tag, "round {round}, key {id}: the record was not written since the kill");
                    if let Some(tag) = &tag {
                        let matched = client.get(server.kv(&key(id))).header(header::IF_MATCH, tag).send().await;
                        assert_eq!(
                            matched.unwrap().status(),
                            StatusCode::OK,
                            "round {round}, key {id}: If-Match {tag}"
                        );
                    }
                }
            }
            if let Some(in_flight) = log.in_flight.take() {
                unanswered += 1;
                applied_count += usize::from(applied);
                if let Some(batch) = in_flight.batch {
                    batches.entry((batch, hasher.locate(&key(id)).partition)).or_default().push((id, applied));
                }
            }
            log.acked = now;
        }
    }
    for ((batch, partition), ops) in batches {
        assert!(
            ops.iter().all(|o| o.1) || ops.iter().all(|o| !o.1),
            "round {round}: unanswered batch {batch} is half-applied in partition {partition}: (key, applied) {ops:?}"
        );
    }
    (unanswered, applied_count)
}

/// The value and tag under `url`, or `None`s (404).
async fn get(client: &reqwest::Client, url: &str) -> (Option<Vec<u8>>, Option<String>) {
    let resp = client.get(url).send().await.unwrap();
    match resp.status() {
        StatusCode::NOT_FOUND => (None, None),
        StatusCode::OK => {
            let tag = etag(&resp);
            assert!(tag.is_some(), "GET {url}: no ETag");
            (Some(resp.bytes().await.unwrap().to_vec()), tag)
        }
        other => panic!("GET {url}: {other}"),
    }
}

/// A response's `ETag`.
fn etag(resp: &reqwest::Response) -> Option<String> {
    Some(resp.headers().get(header::ETAG)?.to_str().ok()?.to_owned())
}

/// The record after a put on `known`.
fn after_put(known: &Option<Rec>, value: Vec<u8>) -> Rec {
    Rec { counter: known.as_ref().map_or(1, |r| r.counter + 1), value }
}

/// One client task: writes to its own keys (task `t` owns keys `t*KEYS_PER_TASK..`) until a
/// request fails (the server was killed), then hands back what it knows.
async fn writer(
    url: String,
    t: usize,
    round: usize,
    mut logs: Vec<KeyLog>,
    mut rng: Rng,
    acks: Arc<AtomicUsize>,
) -> Vec<KeyLog> {
    let client = common::client();
    for seq in 0u64.. {
        let value = format!("r{round}t{t}s{seq}").into_bytes();
        let pick = rng.below(10);
        if pick >= 7 {
            if !batch(&client, &url, t, seq, &mut logs, &mut rng, round).await {
                return logs;
            }
            acks.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let j = rng.below(KEYS_PER_TASK as u64) as usize;
        let id = t * KEYS_PER_TASK + j;
        let kv = format!("{url}/kv/{}", hex::encode(key(id)));
        let known = logs[j].acked.clone();
        let (tag, stale) = (logs[j].tag.clone(), logs[j].stale_tag(&mut rng));
        // The request, the status it must get, and the state after it.
        let (request, expect, outcome) = match (pick, &known) {
            (0..=2, _) => {
                let status = if known.is_some() { StatusCode::OK } else { StatusCode::CREATED };
                (client.put(&kv).body(value.clone()), status, Some(after_put(&known, value)))
            }
            (3, None) => (
                client.put(&kv).header(header::IF_NONE_MATCH, "*").body(value.clone()),
                StatusCode::CREATED,
                Some(after_put(&known, value)),
            ),
            (3, Some(_)) => (
                client.put(&kv).header(header::IF_NONE_MATCH, "*").body(value),
                StatusCode::PRECONDITION_FAILED,
                known.clone(),
            ),
            (4, Some(_)) => (
                client
                    .put(&kv)
                    .header(header::IF_MATCH, tag.clone().expect("a known record's tag"))
                    .body(value.clone()),
                StatusCode::OK,
                Some(after_put(&known, value)),
            ),
            (4, None) => {
                (client.put(&kv).header(header::IF_MATCH, "*").body(value), StatusCode::PRECONDITION_FAILED, None)
            }
            (5, _) if stale.is_some() => (
                client.put(&kv).header(header::IF_MATCH, stale.clone().unwrap_or_default()).body(value),
                StatusCode::PRECONDITION_FAILED,
                known.clone(),
            ),
            (5, None) | (6, None) => (client.delete(&kv), StatusCode::NOT_FOUND, None),
            _ => (client.delete(&kv), StatusCode::NO_CONTENT, None),
        };
        let changes = outcome != known;
        if changes {
            logs[j].in_flight = Some(InFlight { outcome: outcome.clone(), batch: None });
        }
        let Ok(resp) = request.send().await else { return logs };
        let status = resp.status();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            logs[j].in_flight = None; // refused before it was queued
            continue;
        }
        assert_eq!(status, expect, "key {id}: known {known:?}");
        if status.is_success() && status != StatusCode::NO_CONTENT {
            logs[j].new_tag(etag(&resp).expect("a write's ETag"), &format!("key {id}"));
        }
        if status == StatusCode::PRECONDITION_FAILED {
            assert_eq!(etag(&resp), logs[j].tag, "key {id}: a 412 carries the current tag");
        }
        if outcome.is_none() {
            logs[j].tag = None;
        }
        logs[j].acked = outcome;
        logs[j].in_flight = None;
        if status.is_success() {
            acks.fetch_add(1, Ordering::Relaxed);
        }
    }
    logs
}

/// Sends one `POST /batch` of 2..=6 distinct keys of task `t` (puts, compare-and-set puts,
/// deletes) and checks each result; `false` if it got no answer (its writes stay in flight).
async fn batch(
    client: &reqwest::Client,
    url: &str,
    t: usize,
    seq: u64,
    logs: &mut [KeyLog],
    rng: &mut Rng,
    round: usize,
) -> bool {
    let batch_id = ((round * TASKS + t) as u64) << 32 | seq;
    let mut slots: Vec<usize> = (0..KEYS_PER_TASK).collect();
    let n = 2 + rng.below(5) as usize;
    let mut ops = Vec::new();
    let mut expected = Vec::new(); // (slot, status, outcome)
    for i in 0..n {
        let j = slots.swap_remove(rng.below(slots.len() as u64) as usize);
        let id = t * KEYS_PER_TASK + j;
        let known = logs[j].acked.clone();
        let hex_key = hex::encode(key(id));
        let value = format!("r{round}t{t}s{seq}b{i}").into_bytes();
        let (op, status, outcome) = match (rng.below(3), &logs[j].tag) {
            (0, Some(_)) => (json!({"op": "delete", "key": hex_key}), 204, None),
            (1, Some(tag)) => (
                json!({"op": "put", "key": hex_key, "value": hex::encode(&value), "if_match": tag}),
                200,
                Some(after_put(&known, value)),
            ),
            _ => (
                json!({"op": "put", "key": hex_key, "value": hex::encode(&value)}),
                if known.is_some() { 200 } else { 201 },
                Some(after_put(&known, value)),
            ),
        };
        logs[j].in_flight = Some(InFlight { outcome: outcome.clone(), batch: Some(batch_id) });
        ops.push(op);
        expected.push((j, status, outcome));
    }
    let body = serde_json::to_vec(&json!({ "ops": ops })).unwrap();
    let Ok(resp) = client.post(format!("{url}/batch")).body(body).send().await else { return false };
    assert_eq!(resp.status(), StatusCode::OK, "batch {batch_id}");
    let Ok(bytes) = resp.bytes().await else { return false };
    let answer: Value = serde_json::from_slice(&bytes).unwrap();
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), expected.len(), "{answer}");
    for ((j, status, outcome), result) in expected.into_iter().zip(results) {
        if result["status"] == 503 {
            logs[j].in_flight = None; // refused before it was queued
            continue;
        }
        assert_eq!(result["status"], status, "batch {batch_id}: {result}; known {:?}", logs[j].acked);
        let counter = outcome.as_ref().map(|r| r.counter).or(logs[j].acked.as_ref().map(|r| r.counter));
        assert_eq!(result["counter"].as_u64(), counter, "batch {batch_id}: {result}");
        let tag = result["etag"].as_str().map(str::to_owned);
        match &outcome {
            Some(_) => logs[j].new_tag(tag.expect("a write's etag"), &format!("batch {batch_id}")),
            None => {
                assert_eq!(tag, logs[j].tag, "batch {batch_id}: a delete names the deleted version");
                logs[j].tag = None;
            }
        }
        logs[j].acked = outcome;
        logs[j].in_flight = None;
    }
    true
}
