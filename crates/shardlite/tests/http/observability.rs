//! `/healthz`, `/stats` and `/metrics`: what they answer and that the figures are real.

use reqwest::{header, StatusCode};
use serde_json::Value;
use shardlite_engine::{Config, CreateOptions, KeyHasher, Synchronous};

use crate::common::{config, key, on_both_backends, Kind, TestServer, PARTITIONS};

on_both_backends!(stats_name_the_backend_and_count_its_records, metrics_carry_the_backends_own_figures);

#[tokio::test]
async fn healthz_answers_without_storage_work() {
    let server = TestServer::start(config()).await;
    let resp = server.client.get(server.at("/healthz")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.text().await.unwrap(), "ok\n");
    let resp = server.client.head(server.at("/healthz")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

/// A server that is no cluster's node has no map: `GET /cluster` is 404 `not_found` (a client
/// error, not a server's), and so is HEAD, without a body.
#[tokio::test]
async fn the_cluster_map_of_a_server_outside_a_cluster_is_not_found() {
    let server = TestServer::start(config()).await;
    let resp = server.client.get(server.at("/cluster")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"], "not_found", "{body}");
    let resp = server.client.head(server.at("/cluster")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn stats_reports_partitions_process_and_configuration() {
    let server = TestServer::start(config()).await;
    for i in 0..10 {
        server.client.put(server.kv(&key(i))).body("value").send().await.unwrap();
    }
    let resp = server.client.get(server.at("/stats")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    let stats: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(stats["totals"]["records"], 10);
    assert_eq!(stats["pid"], std::process::id(), "the server runs in this test process");
    let partitions = stats["store"]["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 4);
    assert_eq!(partitions.iter().map(|p| p["records"].as_u64().unwrap()).sum::<u64>(), 10);
    for field in ["db_bytes", "wal_bytes", "index_bytes", "commits", "merges"] {
        assert!(partitions[0][field].is_u64(), "{field}");
    }
    assert!(stats["totals"]["db_bytes"].as_u64().unwrap() > 0);
    assert!(stats["store"]["queue_depths"].is_array());
    assert!(stats["store"]["writers"]["batch_sizes"].is_array());
    assert!(stats["store"]["writers"]["commits"].as_u64().unwrap() >= 1);
    assert!(stats["process"]["cpu_user_seconds"].as_f64().is_some_and(|s| s >= 0.0));
    assert!(stats["process"]["rchar"].is_u64());
    assert_eq!(stats["config"]["partitions"], 4);
    assert_eq!(stats["config"]["synchronous"], "off");
    assert_eq!(stats["server"]["max_connections"], 1024);
    assert_eq!(stats["server"]["body_timeout_ms"], 30_000);
    assert_eq!(stats["auth"], false);
}

async fn stats_name_the_backend_and_count_its_records(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    for i in 0..10 {
        server.client.put(server.kv(&key(i))).body("value").send().await.unwrap();
    }
    // PostgreSQL's statistics reach its views up to a second after the commits.
    let mut stats = Value::Null;
    for _ in 0..50 {
        let resp = server.client.get(server.at("/stats")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        stats = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        if stats["totals"]["records"] == 10 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(stats["totals"]["records"], 10, "{stats:#}");
    assert!(stats["totals"]["db_bytes"].as_u64().unwrap() > 0);
    assert_eq!(stats["server"]["max_connections"], 1024);
    match kind {
        Kind::Sqlite => assert_eq!(stats["backend"], "sqlite"),
        Kind::Postgres => {
            assert_eq!(stats["backend"], "postgres");
            assert_eq!(stats["config"]["partitions"], 4);
            assert_eq!(stats["config"]["table"], server.storage.table.clone().unwrap());
            assert!(stats["store"]["database"]["xact_commit"].as_u64().unwrap() >= 10);
            assert_eq!(stats["store"]["pool"]["max_size"], 4);
            assert!(stats["store"]["wal"]["wal_bytes"].as_u64().unwrap() > 0);
            assert!(stats["config"].get("url").is_none(), "never the URL: it may hold a password");
        }
    }
}

#[tokio::test]
async fn metrics_count_requests_by_route_and_status_and_read_the_store() {
    let server = TestServer::start(config()).await;
    for i in 0..3 {
        server.client.put(server.kv(&key(i))).body("v").send().await.unwrap();
    }
    server.client.get(server.kv(&key(0))).send().await.unwrap();
    server.client.get(server.kv(&key(99))).send().await.unwrap();

    let resp = server.client.get(server.at("/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()[header::CONTENT_TYPE].to_str().unwrap().starts_with("application/openmetrics-text"));
    let text = resp.text().await.unwrap();
    let duration = "shardlite_http_request_duration_seconds_count";
    for line in [
        format!(r#"{duration}{{route="/kv/{{key}}",method="PUT",status="201"}} 3"#),
        format!(r#"{duration}{{route="/kv/{{key}}",method="GET",status="200"}} 1"#),
        format!(r#"{duration}{{route="/kv/{{key}}",method="GET",status="404"}} 1"#),
        "shardlite_records 3".to_owned(),
        "shardlite_commit_requests_total 3".to_owned(),
        "shardlite_flushes_total 0".to_owned(),
        "shardlite_http_connections_open 1".to_owned(),
    ] {
        assert!(text.lines().any(|l| l == line), "missing `{line}` in\n{text}");
    }
    for name in [
        "shardlite_http_request_duration_seconds_bucket",
        "shardlite_commits_total",
        "shardlite_commit_batch_size_bucket{le=\"1.0\"}",
        "shardlite_commit_batch_size_bucket{le=\"+Inf\"}",
        "shardlite_wal_bytes",
        "shardlite_db_bytes",
        "shardlite_index_bytes",
        "shardlite_index_merges_total",
        "shardlite_checkpoints_total",
        "shardlite_writer_queue_jobs",
        "process_cpu_seconds_total",
        "process_io_write_bytes_total",
    ] {
        assert!(text.contains(name), "missing {name} in\n{text}");
    }
    assert!(text.ends_with("# EOF\n"));
}

/// With `synchronous = full`, acknowledged writes are made durable by flushes of the commit
/// log: one write at a time, one flush each; a batch, one record per partition it touches and
/// at most as many flushes (fewer when writer threads share one).
#[tokio::test]
async fn metrics_count_the_commit_logs_flushes() {
    let config = Config { synchronous: Synchronous::Full, ..config() };
    let hasher = KeyHasher::new(CreateOptions::DEFAULT_HASH_SEED, PARTITIONS);
    let server = TestServer::start(config).await;
    for i in 0..3 {
        server.client.put(server.kv(&key(i))).body("v").send().await.unwrap();
    }
    let ops: Vec<serde_json::Value> =
        (10..30).map(|i| serde_json::json!({"op": "put", "key": hex::encode(key(i)), "value": "00"})).collect();
    let body = serde_json::json!({ "ops": ops }).to_string();
    assert_eq!(server.client.post(server.at("/batch")).body(body).send().await.unwrap().status(), StatusCode::OK);
    let text = server.client.get(server.at("/metrics")).send().await.unwrap().text().await.unwrap();
    let value = |name: &str| -> u64 {
        let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("no {name}"));
        line.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64
    };
    let touched = (10..30).map(|i| hasher.locate(&key(i)).partition).collect::<std::collections::BTreeSet<_>>().len();
    let flushes = value("shardlite_flushes_total");
    assert!((4..=3 + touched as u64).contains(&flushes), "3 single writes and one batch: {flushes} flushes");
    assert_eq!(value("shardlite_log_records_total"), 3 + touched as u64, "one record per partition's transaction");
    assert!(value("shardlite_log_bytes_total") > 20 * 32);
}

#[tokio::test]
async fn reads_of_a_key_fill_the_record_cache_and_a_write_empties_it() {
    let server = TestServer::start(config()).await;
    server.client.put(server.kv(&key(1))).body("one").send().await.unwrap();
    for _ in 0..2 {
        assert_eq!(server.client.get(server.kv(&key(1))).send().await.unwrap().text().await.unwrap(), "one");
    }
    server.client.put(server.kv(&key(1))).body("two").send().await.unwrap();
    assert_eq!(server.client.get(server.kv(&key(1))).send().await.unwrap().text().await.unwrap(), "two");

    let text = server.client.get(server.at("/metrics")).send().await.unwrap().text().await.unwrap();
    for line in ["shardlite_record_cache_hits_total 1", "shardlite_record_cache_misses_total 2"] {
        assert!(text.lines().any(|l| l == line), "missing `{line}` in\n{text}");
    }
}

/// The value of the sample `name` (no labels) in an OpenMetrics scrape.
fn sample(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok()).map(|v| v as u64)
}

async fn metrics_carry_the_backends_own_figures(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    for i in 0..5 {
        server.client.put(server.kv(&key(i))).body("value").send().await.unwrap();
    }
    server.client.put(server.kv(&key(0))).body("again").send().await.unwrap();
    // PostgreSQL's statistics reach its views up to a second after the commits.
    let mut text = String::new();
    for _ in 0..50 {
        text = server.client.get(server.at("/metrics")).send().await.unwrap().text().await.unwrap();
        if sample(&text, "shardlite_records") == Some(5) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(sample(&text, "shardlite_records"), Some(5), "{text}");
    assert!(sample(&text, "shardlite_db_bytes").unwrap() > 0);
    assert!(text.ends_with("# EOF\n"));
    if kind == Kind::Sqlite {
        assert!(!text.contains("shardlite_pg_"), "{text}");
        return;
    }
    let at_least = |name: &str, min: u64| {
        let v = sample(&text, name).unwrap_or_else(|| panic!("no {name} in\n{text}"));
        assert!(v >= min, "{name} {v} < {min}");
    };
    // Six autocommitted writes on this database (others' too: the figures are the database's).
    at_least("shardlite_pg_xact_commit_total", 6);
    at_least("shardlite_pg_tup_inserted_total", 5);
    at_least("shardlite_pg_tup_updated_total", 1);
    at_least("shardlite_pg_wal_bytes_total", 1);
    at_least("shardlite_pg_database_bytes", 1);
    at_least("shardlite_pg_blks_hit_total", 1);
    for name in ["shardlite_pg_xact_rollback_total", "shardlite_pg_blks_read_total", "shardlite_pg_wal_syncs_total"] {
        at_least(name, 0);
    }
    assert_eq!(sample(&text, "shardlite_pg_pool_waiting"), Some(0));
    assert!(text.contains("process_cpu_seconds_total"), "the process's metrics are still there");
}

/// The metric names `docs/http-api.md` documents, with `{a,b}` in a name expanded and a label
/// set at its end (`{route,method,status}`) dropped.
fn documented_metrics() -> Vec<String> {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/http-api.md")).unwrap();
    let mut names = Vec::new();
    for token in docs.split('`').skip(1).step_by(2) {
        let mut expanded = vec![String::new()];
        let mut rest = token;
        while let Some(open) = rest.find('{') {
            let close = rest[open..].find('}').map_or(rest.len(), |c| open + c);
            if close + 1 >= rest.len() {
                rest = &rest[..open];
                break;
            }
            let (before, choices) = (&rest[..open], &rest[open + 1..close]);
            expanded =
                expanded.iter().flat_map(|e| choices.split(',').map(move |c| format!("{e}{before}{c}"))).collect();
            rest = rest.get(close + 1..).unwrap_or_default();
        }
        names.extend(expanded.into_iter().map(|e| e + rest));
    }
    names
}

#[tokio::test]
async fn every_metric_is_documented_with_the_build_and_process_metrics() {
    let server = TestServer::start(config()).await;
    server.client.put(server.kv(&key(1))).body("v").send().await.unwrap();
    let text = server.client.get(server.at("/metrics")).send().await.unwrap().text().await.unwrap();
    let documented = documented_metrics();
    let mut seen: Vec<String> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap();
        // A histogram's series are documented under its name.
        let family = ["_bucket", "_count", "_sum"].iter().fold(name, |n, suffix| n.strip_suffix(suffix).unwrap_or(n));
        seen.push(if text.contains(&format!("# TYPE {family} histogram")) { family } else { name }.to_owned());
    }
    seen.dedup();
    let undocumented: Vec<&String> = seen.iter().filter(|name| !documented.contains(name)).collect();
    assert!(undocumented.is_empty(), "not documented in docs/http-api.md: {undocumented:?}");
    for name in [
        "shardlite_build_info",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_cpu_seconds_total",
        "process_start_time_seconds",
    ] {
        assert!(seen.iter().any(|s| s == name), "{name} missing from\n{text}");
    }
    let value = |name: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(name)).unwrap();
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(value("shardlite_build_info"), 1.0);
    assert!(text.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))), "{text}");
    assert!(value("process_open_fds") >= 3.0 && value("process_max_fds") >= value("process_open_fds"));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let started = value("process_start_time_seconds");
    assert!(started > 1e9 && started <= now, "{started}");
}
