//! `/admin/backup`: the SQLite backend starts a backup at once (202) and reports it until done;
//! a second one into a used directory, a relative path and a bad body are refused; the
//! PostgreSQL backend answers that it makes no backups (501).

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
