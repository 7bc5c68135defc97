//! `shardlite bench` end to end: a short run against a spawned server, its JSON checked against
//! the published schema and against the server's own counters and the records on disk.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

const EXE: &str = env!("CARGO_BIN_EXE_shardlite");

#[test]
fn a_short_bench_agrees_with_the_server_and_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = Command::new(EXE)
        .args(["bench", "--json", "--load", "2000", "--partitions", "4", "--concurrency", "4"])
        .args(["--duration", "0.5", "--warmup", "0.2", "--workloads", "noop,select,insert,mix,insert-noindex"])
        .arg("--data")
        .arg(&data)
        .arg("--html")
        .arg(dir.path().join("report.html"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = common::schema_problems(&report);
    assert!(problems.is_empty(), "the report breaks its schema:\n{}", problems.join("\n"));

    let runs = report["runs"].as_array().unwrap();
    let names: Vec<&str> = runs.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["noop", "select", "insert", "mix", "insert (index none)"]);
    let mut created_on_data = 0;
    for run in runs {
        let name = run["name"].as_str().unwrap();
        // Every request sent, warm-up included, is one the server counted; none failed.
        assert!(run["sent"].as_u64().unwrap() > 0, "{name}");
        assert_eq!(run["server_counted"], run["sent"], "{name}");
        assert_eq!(run["error_total"], 0, "{name}: {}", run["errors"]);
        assert!(run["ok"].as_u64().unwrap() > 0 && run["queries_per_sec"].as_f64().unwrap() > 0.0, "{name}");
        // Records inserted = records present afterwards.
        let (before, after) = (run["records_before"].as_u64().unwrap(), run["records_after"].as_u64().unwrap());
        assert_eq!(after - before, run["created_all"].as_u64().unwrap(), "{name}");
        // Inserts took fresh keys: above the loaded ones and above the previous run's.
        let (first, next) = (run["insert_first_index"].as_u64().unwrap(), run["insert_next_index"].as_u64().unwrap());
        assert_eq!(next - first, run["created_all"].as_u64().unwrap(), "{name}");
        if name.starts_with("insert") || name == "mix" {
            assert!(run["created_all"].as_u64().unwrap() > 0, "{name}");
            assert_eq!(first, before, "{name}");
        }
        if run["server"]["data_dir"] == data.display().to_string() {
            created_on_data += run["created_all"].as_u64().unwrap();
        }
        // A spawned server on this machine: its costs are known.
        assert!(run["cost"]["records"].is_u64() && run["cost"]["server_cpu_pct"].is_number(), "{name}");
        assert!(run["cost"]["server_rss_bytes"].as_u64().unwrap() > 0, "{name}");
        assert!(!run["timeline"].as_array().unwrap().is_empty(), "{name}");
    }
    assert_eq!(runs[1]["statuses"]["200"], runs[1]["ok"], "selects found every loaded key");
    assert!(report.get("matrix").is_none());

    // The HTML page: two charts (queries/s, p99 over time) per workload, each run's numbers.
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert_eq!(html.matches("<svg ").count(), 2 * 4, "noop, select, insert (both servers), mix");
    assert_eq!(html.matches("<polyline ").count(), 2 * runs.len());
    for run in runs {
        let (name, qps) = (run["name"].as_str().unwrap(), run["queries_per_sec"].as_f64().unwrap());
        let row = format!("<td>{name}</td><td>{qps:.0}</td>");
        assert!(html.contains(&row), "{row} not in the HTML");
    }
    // Self-contained: no scripts, no address but the SVG namespace.
    assert!(!html.contains("<script"));
    assert_eq!(html.matches("http").count(), html.matches("http://www.w3.org/2000/svg").count());

    // After the server stopped, the directory holds the loaded records plus every insert.
    let stats = Command::new(EXE).args(["stats", "--json", "--data"]).arg(&data).output().unwrap();
    assert!(stats.status.success(), "{}", String::from_utf8_lossy(&stats.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    let on_disk: u64 = stats["partitions"].as_array().unwrap().iter().map(|p| p["records"].as_u64().unwrap()).sum();
    assert_eq!(on_disk, 2000 + created_on_data);
}

#[test]
fn a_cold_bench_limits_the_server_and_measures_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = Command::new(EXE)
        .args(["bench", "--json", "--load", "2000", "--partitions", "4", "--concurrency", "4", "--cold=96MiB"])
        .args(["--duration", "0.5", "--warmup", "0.2", "--workloads", "select,update"])
        .arg("--data")
        .arg(&data)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = common::schema_problems(&report);
    assert!(problems.is_empty(), "the report breaks its schema:\n{}", problems.join("\n"));

    for run in report["runs"].as_array().unwrap() {
        let (name, cold) = (run["name"].as_str().unwrap(), &run["cold"]);
        assert_eq!(run["error_total"], 0, "{name}: {}", run["errors"]);
        assert_eq!(cold["limit_bytes"], 96 << 20, "{name}");
        assert!(cold["evicted_files"].as_u64().unwrap() >= 4, "{name}: the partitions' files at least");
        if cold["limited"].as_bool().unwrap() {
            let peak = cold["group_peak_bytes"].as_u64().unwrap();
            assert!(peak > 0 && peak <= 96 << 20, "{name}: peak {peak}");
            assert_eq!(cold["oom_kills"], 0, "{name}");
        } else {
            assert!(stderr.contains("the server runs without a memory limit"), "{stderr}");
        }
        // The device was read at the run's concurrency, and the run's reads set against it.
        let device = &cold["device"];
        assert!(device["reads_per_sec"].as_f64().unwrap() > 0.0, "{name}: {device}");
        assert_eq!((device["threads"].as_u64(), device["files"].as_u64()), (Some(4), Some(4)), "{name}");
        assert!(cold["device_use_pct"].is_number() && run["reads_per_query"].is_number(), "{name}: {cold}");
        let line = format!("{} ", name.to_uppercase());
        assert!(stderr.lines().any(|l| l.starts_with(&line) && l.contains(" reads each = ")), "{stderr}");
    }
    assert_eq!(stderr.matches("the device's ceiling: random 4 KiB").count(), 1, "measured once per concurrency");
}
