//! `shardlite bench matrix` end to end: a tiny matrix (two configurations, one workload), its
//! JSON checked against the schema, each run against the configuration it belongs to, the table
//! and the HTML page.
#![allow(clippy::unwrap_used)]

use std::process::Command;

const EXE: &str = env!("CARGO_BIN_EXE_shardlite");

#[test]
fn a_tiny_matrix_runs_each_configuration_on_its_own_server() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("matrix.html");
    let out = Command::new(EXE)
        .args(["bench", "matrix", "--json", "--configs", "rollback,index-none", "--workloads", "insert"])
        .args(["--records", "500", "--partitions", "2", "--connections", "4", "--duration", "0.6", "--warmup", "0.2"])
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = shardlite_bench::schema::validate(&report);
    assert!(problems.is_empty(), "the report breaks its schema:\n{}", problems.join("\n"));

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
