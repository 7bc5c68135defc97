//! `/admin/backup`: the SQLite backend starts a backup at once (202) and reports it until done;
//! a second one into a used directory, a relative path and a bad body are refused; the
//! PostgreSQL backend answers that it makes no backups (501). `/admin/compact`: the SQLite
//! backend gives back the space deletes left, keeping versions and index; PostgreSQL: 501.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{config, error_of, key, on_both_backends, Kind, TestServer};

on_both_backends!(backups_are_made_by_the_sqlite_backend_only);

async fn backups_are_made_by_the_sqlite_backend_only(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.at("/admin/backup");
    let put = server.client.put(server.kv(&key(1))).body("v").send().await.unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    let to = tempfile::tempdir().unwrap();
    let dest = to.path().join("backup");
    let start = server.client.post(&url).body(json!({ "to": dest }).to_string()).send().await.unwrap();
    if kind == Kind::Postgres {
        assert_eq!(start.status(), StatusCode::NOT_IMPLEMENTED);
        let (code, message) = error_of(start).await;
        assert_eq!(code, "not_implemented");
        assert!(message.contains("postgres backend does not make backups"), "{message}");
        let status = server.client.get(&url).send().await.unwrap();
        assert_eq!(status.status(), StatusCode::NOT_IMPLEMENTED);
        return;
    }
    assert_eq!(start.status(), StatusCode::ACCEPTED);
    let mut status: Value = serde_json::from_str(&start.text().await.unwrap()).unwrap();
    while status["state"] == "running" {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        status = serde_json::from_str(&server.client.get(&url).send().await.unwrap().text().await.unwrap()).unwrap();
    }
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(status["result"]["records"], 1);
    assert!(dest.join("backup.toml").exists());

    let again = server.client.post(&url).body(json!({ "to": dest }).to_string()).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert!(error_of(again).await.1.contains("is not empty"));
    for bad in [
        json!({ "to": "relative/dir" }).to_string(),
        "{".to_owned(),
        json!({ "to": "/x", "max_rate_mib": -1 }).to_string(),
    ] {
        let resp = server.client.post(&url).body(bad.clone()).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
}

on_both_backends!(compaction_gives_back_what_deletes_left_and_keeps_every_version);

/// Rounds of churn (as many inserts as deletes of random records), each followed by
/// `POST /admin/compact`: the files stop growing, every record keeps its tag, the index stays in
/// step (`/admin/check` clean) and a new record still gets an id never used before.
async fn compaction_gives_back_what_deletes_left_and_keeps_every_version(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let compact = || async { server.client.post(server.at("/admin/compact")).send().await.unwrap() };
    if kind == Kind::Postgres {
        let refused = compact().await;
        assert_eq!(refused.status(), StatusCode::NOT_IMPLEMENTED);
        assert!(error_of(refused).await.1.contains("postgres backend does not compact"));
        return;
    }
    let value = "ab".repeat(2000);
    let (mut live, mut next, mut rng) = (Vec::new(), 0u32, 7u64);
    let mut compacted = Vec::new();
    for round in 0..5 {
        let inserts = if round == 0 { 600 } else { 300 };
        let mut ops: Vec<Value> =
            (next..next + inserts).map(|i| json!({"op": "put", "key": hex::encode(key(i)), "value": value})).collect();
        live.extend(next..next + inserts);
        next += inserts;
        for _ in 0..300 {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let gone = live.swap_remove((rng >> 33) as usize % live.len());
            ops.push(json!({"op": "delete", "key": hex::encode(key(gone))}));
        }
        for chunk in ops.chunks(100) {
            let body = json!({ "ops": chunk }).to_string();
            let resp = server.client.post(server.at("/batch")).body(body).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
        }
        let tags_before = tags(&server, &live).await;
        let resp = compact().await;
        assert_eq!(resp.status(), StatusCode::OK);
        let report: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        let (before, after) = (report["bytes_before"].as_u64().unwrap(), report["bytes_after"].as_u64().unwrap());
        assert!(after < before, "round {round}: {report}");
        assert_eq!(tags(&server, &live).await, tags_before, "round {round}: compaction keeps every version");
        compacted.push(after);
    }
    // 300 records of 2 KB live after every round: compacted, the files stay the same size.
    assert!(compacted[4] <= compacted[0] * 11 / 10, "{compacted:?}");
    let check: Value =
        serde_json::from_str(&server.client.get(server.at("/admin/check")).send().await.unwrap().text().await.unwrap())
            .unwrap();
    for report in check["reports"].as_array().unwrap() {
        assert_eq!(report["sqlite"], "ok", "{report}");
        assert_eq!(report["problems"], json!([]), "{report}");
        assert_eq!((report["missing_entries"].as_u64(), report["extra_entries"].as_u64()), (Some(0), Some(0)));
    }
    // Ids are never reused: the newest record of its partition deleted, the files compacted,
    // the same key written again gets an id above the old one.
    let put = || async { server.client.put(server.kv(&key(next))).body("v").send().await.unwrap() };
    let first = id_of(put().await.headers()["etag"].to_str().unwrap());
    assert_eq!(server.client.delete(server.kv(&key(next))).send().await.unwrap().status(), StatusCode::NO_CONTENT);
    assert_eq!(compact().await.status(), StatusCode::OK);
    let again = id_of(put().await.headers()["etag"].to_str().unwrap());
    assert!(again > first, "the id {again} after compaction, {first} before");
}

/// The tags of these records, in order.
async fn tags(server: &TestServer, records: &[u32]) -> Vec<String> {
    let mut tags = Vec::with_capacity(records.len());
    for &i in records {
        let resp = server.client.get(server.kv(&key(i))).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "record {i}");
        tags.push(resp.headers()["etag"].to_str().unwrap().to_owned());
    }
    tags
}

/// The record id of a tag `"epoch.id.counter"`.
fn id_of(tag: &str) -> u64 {
    tag.trim_matches('"').split('.').nth(1).unwrap().parse().unwrap()
}
