//! `shardlite bench matrix` end to end: a tiny matrix (two configurations, one workload), its
//! JSON checked against the schema, each run against the configuration it belongs to, the table
//! and the HTML page; and, when a PostgreSQL server is given, its row beside SQLite's.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

const EXE: &str = env!("CARGO_BIN_EXE_shardlite");

/// Runs `shardlite bench matrix --json` with `args`; its report, checked against the schema,
/// and its stderr (where the table goes).
fn matrix(args: &[&[&str]]) -> (serde_json::Value, String) {
    let out = Command::new(EXE).args(["bench", "matrix", "--json"]).args(args.concat()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = common::schema_problems(&report);
    assert!(problems.is_empty(), "the report breaks its schema:\n{}", problems.join("\n"));
    (report, stderr)
}

#[test]
fn a_tiny_matrix_runs_each_configuration_on_its_own_server() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("matrix.html");
    let (report, stderr) = matrix(&[
        &["--configs", "rollback,index-none", "--workloads", "insert", "--records", "500", "--partitions", "2"],
        &["--connections", "4", "--duration", "0.6", "--warmup", "0.2", "--html", html.to_str().unwrap()],
    ]);

    let runs = report["runs"].as_array().unwrap();
    let rows = report["matrix"]["configurations"].as_array().unwrap();
    assert_eq!(report["matrix"]["workloads"], serde_json::json!(["insert"]));
    assert_eq!(rows.len(), 2);
    let mut servers = Vec::new();
    for (i, (row, key, index)) in
        [(&rows[0], "rollback", "hash"), (&rows[1], "index-none", "none")].into_iter().enumerate()
    {
        assert_eq!((row["key"].as_str().unwrap(), row["index"].as_str().unwrap()), (key, index));
        assert_eq!(row["runs"], serde_json::json!([i]));
        let run = &runs[i];
        assert_eq!(run["name"], format!("insert [{key}]"));
        // Each configuration: a fresh directory loaded with 500 records, its own server with its flags.
        assert_eq!(run["records_before"], 500, "{key}");
        assert!(run["created_all"].as_u64().unwrap() > 0 && run["error_total"] == 0, "{key}");
        assert_eq!(run["server"]["serve_args"], row["serve_args"], "{key}");
        servers.push(run["server"]["url"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        rows[0]["serve_args"],
        serde_json::json!(["--journal", "delete", "--tx", "deferred", "--synchronous", "full"])
    );
    assert_ne!(servers[0], servers[1], "a server per configuration");

    // The table (on stderr with --json): a row per configuration with that run's queries/s.
    for (i, label) in ["rollback journal", "index none"].into_iter().enumerate() {
        let qps = format!("{:.0}", runs[i]["queries_per_sec"].as_f64().unwrap());
        let line =
            stderr.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label} row in {stderr}"));
        assert!(line.split_whitespace().any(|w| w == qps), "{qps} not in {line}");
    }

    let html = std::fs::read_to_string(&html).unwrap();
    assert!(html.contains("<h2>Matrix</h2>") && html.contains("rollback journal"));
    assert_eq!(html.matches("<svg ").count(), 2, "queries/s and p99 over time of insert");
    assert_eq!(html.matches("<polyline ").count(), 4, "a line per configuration in each");
}

/// With `--with-postgres`: a PostgreSQL row measured in the same run through the same HTTP
/// server, at each connection count, on a fresh table loaded with the same records and dropped
/// afterwards. Needs `SHARDLITE_TEST_POSTGRES` (CI sets it; `.ci/postgres start` makes one).
#[test]
fn with_postgres_the_matrix_has_a_postgres_row_per_connection_count() {
    let Some(url) = std::env::var("SHARDLITE_TEST_POSTGRES").ok().filter(|u| !u.is_empty()) else {
        eprintln!("skipped: SHARDLITE_TEST_POSTGRES not set");
        return;
    };
    let (report, stderr) = matrix(&[
        &["--configs", "immediate", "--workloads", "select,insert", "--records", "500", "--partitions", "2"],
        &["--concurrency", "2,4", "--duration", "0.5", "--warmup", "0.2", "--with-postgres", &url],
    ]);
    assert_eq!(report["matrix"]["concurrency"], serde_json::json!([2, 4]));
    let rows = report["matrix"]["configurations"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let pg = &rows[1];
    assert_eq!(
        (pg["key"].as_str(), pg["backend"].as_str(), pg["index"].as_str()),
        (Some("postgres"), Some("postgres"), Some("btree"))
    );
    let args: Vec<&str> = pg["serve_args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!((args[0], args[2], &args[4..6]), ("--backend", "--pg-table", &["--partitions", "2"][..]), "{args:?}");
    let table = args[3].to_owned();

    let runs = report["runs"].as_array().unwrap();
    let pg_runs: Vec<&serde_json::Value> =
        pg["runs"].as_array().unwrap().iter().map(|i| &runs[i.as_u64().unwrap() as usize]).collect();
    let names: Vec<&str> = pg_runs.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["select [postgres] c=2", "select [postgres] c=4", "insert [postgres] c=2", "insert [postgres] c=4"]
    );
    for run in &pg_runs {
        let name = run["name"].as_str().unwrap();
        assert!(run["queries_per_sec"].as_f64().unwrap() > 0.0, "{name}");
        assert_eq!(run["error_total"], 0, "{name}");
        assert_eq!(run["server"]["serve_args"], pg["serve_args"], "{name}");
    }
    // Loaded with the same 500 records as the SQLite row, through POST /batch.
    assert_eq!(pg_runs[0]["records_before"], 500);
    assert!(pg_runs[0]["statuses"]["200"].as_u64().unwrap() > 0 && pg_runs[0]["statuses"].get("404").is_none());
    assert!(pg_runs[2]["created_all"].as_u64().unwrap() > 0);

    // The table: a PostgreSQL line per connection count.
    for conns in ["2", "4"] {
        assert!(
            stderr.lines().any(|l| l.split_whitespace().take(2).eq(["PostgreSQL", conns])),
            "no PostgreSQL row at {conns} connections in {stderr}"
        );
    }
    assert_eq!(table_count(&url, &table), 0, "the benchmark's table is dropped afterwards");
}

/// How many tables named `table` the server at `url` has.
fn table_count(url: &str, table: &str) -> i64 {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        let connection = tokio::spawn(connection);
        let n = client.query_one("SELECT count(*) FROM pg_class WHERE relname = $1", &[&table]).await.unwrap().get(0);
        drop(client);
        let _ = connection.await;
        n
    })
}
