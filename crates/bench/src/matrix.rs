//! `shardlite bench matrix`: the SQLite configurations the write-ups measured, cumulatively as in
//! the Django write-up's table (rollback journal, WAL, + IMMEDIATE, + synchronous NORMAL, + mmap),
//! then group commit off and the other index modes, each a one-flag change from `+ mmap` (which
//! is group commit on and index `hash`); optionally PostgreSQL behind the same HTTP layer
//! ([`MatrixRow::postgres`]). The model of the side-by-side result (a top-level `matrix` in the
//! JSON report) and its text table: a row per configuration and connection count.

use std::fmt::Write;

use serde::Serialize;

use crate::{
    report::{Report, RunReport},
    workload::Workload,
};

/// One configuration: a fresh data directory of an index mode and a server's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The name on the command line (`--configs`).
    pub key: &'static str,
    /// The row's label in the table.
    pub label: &'static str,
    /// `--index` of the data directory (given to `shardlite load` and `serve`).
    pub index: &'static str,
    /// The `shardlite serve` flags.
    pub serve_args: &'static [&'static str],
    /// Only `insert` runs (an index mode without lookups by key).
    pub inserts_only: bool,
}

const fn config(key: &'static str, label: &'static str, serve_args: &'static [&'static str]) -> Config {
    Config { key, label, index: "hash", serve_args, inserts_only: false }
}

/// `+ mmap`: every tuning on; the base of the rows after it.
const TUNED: &[&str] =
    &["--journal", "wal", "--tx", "immediate", "--synchronous", "normal", "--mmap-size", "268435456"];

/// Every configuration, in the table's order.
pub const CONFIGS: [Config; 8] = [
    config("rollback", "rollback journal", &["--journal", "delete", "--tx", "deferred", "--synchronous", "full"]),
    config("wal", "WAL", &["--journal", "wal", "--tx", "deferred", "--synchronous", "full"]),
    config("immediate", "+ IMMEDIATE", &["--journal", "wal", "--tx", "immediate", "--synchronous", "full"]),
    config("normal", "+ synchronous NORMAL", &["--journal", "wal", "--tx", "immediate", "--synchronous", "normal"]),
    config("mmap", "+ mmap 256 MiB", TUNED),
    config(
        "no-group-commit",
        "group commit off",
        &[
            "--journal",
            "wal",
            "--tx",
            "immediate",
            "--synchronous",
            "normal",
            "--mmap-size",
            "268435456",
            "--max-batch",
            "1",
        ],
    ),
    Config { index: "sqlite", ..config("index-sqlite", "index sqlite", TUNED) },
    Config { index: "none", inserts_only: true, ..config("index-none", "index none", TUNED) },
];

/// The configuration named `key`.
pub fn find(key: &str) -> Result<Config, String> {
    CONFIGS.into_iter().find(|c| c.key == key).ok_or_else(|| {
        let keys: Vec<&str> = CONFIGS.iter().map(|c| c.key).collect();
        format!("unknown configuration `{key}` ({})", keys.join(", "))
    })
}

/// The key and label of the PostgreSQL row (`--with-postgres`, `--spawn-postgres`).
pub const POSTGRES: (&str, &str) = ("postgres", "PostgreSQL");

/// The side-by-side result: which runs measured which configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Matrix {
    /// The columns.
    pub workloads: Vec<Workload>,
    /// The connection counts each configuration ran at (a table row each).
    pub concurrency: Vec<usize>,
    /// The rows, in the order run.
    pub configurations: Vec<MatrixRow>,
}

/// One configuration's row.
#[derive(Debug, Clone, Serialize)]
pub struct MatrixRow {
    /// [`Config::key`], or `postgres`.
    pub key: String,
    /// [`Config::label`], or `PostgreSQL`.
    pub label: String,
    /// `sqlite` (shardlite's engine) or `postgres`.
    pub backend: String,
    /// The data directory's index mode; `btree` (the primary key) for PostgreSQL.
    pub index: String,
    /// The server's flags.
    pub serve_args: Vec<String>,
    /// Indices into the report's `runs`.
    pub runs: Vec<usize>,
}

impl MatrixRow {
    /// The row of `config` whose runs are `runs`.
    pub fn new(config: &Config, runs: Vec<usize>) -> Self {
        Self {
            key: config.key.to_owned(),
            label: config.label.to_owned(),
            backend: "sqlite".to_owned(),
            index: config.index.to_owned(),
            serve_args: config.serve_args.iter().map(|s| (*s).to_owned()).collect(),
            runs,
        }
    }

    /// The PostgreSQL row: a server with `serve_args` (its `--backend`, password hidden).
    pub fn postgres(serve_args: Vec<String>, runs: Vec<usize>) -> Self {
        let (key, label) = POSTGRES;
        let (key, label, backend, index) =
            (key.to_owned(), label.to_owned(), "postgres".to_owned(), "btree".to_owned());
        Self { key, label, backend, index, serve_args, runs }
    }

    /// This row's run of `workload` with `connections`, if there was one.
    pub fn run<'a>(&self, report: &'a Report, workload: Workload, connections: usize) -> Option<&'a RunReport> {
        self.runs
            .iter()
            .filter_map(|&i| report.runs.get(i))
            .find(|r| r.options.workload == workload && r.options.schedule.connections() == connections)
    }
}

/// Width of a workload's column group: queries/s, then p50, p99 and max in ms.
const GROUP: usize = 34;

/// The table: a row per configuration and connection count; per workload, queries/s and the
/// p50, p99 and max latency (ms) of its answers; `-` where it did not run.
pub fn render_text(report: &Report, matrix: &Matrix) -> String {
    let mut head = format!("{:<22} {:>5}", "configuration", "conns");
    let mut units = format!("{:<28}", "");
    for w in &matrix.workloads {
        let _ = write!(head, "  {:>w$}", w.name(), w = GROUP);
        let _ = write!(units, "  {:>9} {:>7} {:>7} {:>8}", "queries/s", "p50 ms", "p99 ms", "max ms");
    }
    let mut out = format!("{head}\n{units}\n");
    for row in &matrix.configurations {
        for &connections in &matrix.concurrency {
            let _ = write!(out, "{:<22} {:>5}", row.label, connections);
            for &w in &matrix.workloads {
                let _ = match row.run(report, w, connections) {
                    Some(r) => {
                        let l = &r.latency_ms;
                        write!(out, "  {:>9.0} {:>7.2} {:>7.2} {:>8.2}", r.queries_per_sec, l.p50, l.p99, l.max)
                    }
                    None => write!(out, "  {:>9} {:>7} {:>7} {:>8}", "-", "-", "-", "-"),
                };
            }
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_change_one_thing_at_a_time() {
        let flags = |key: &str| find(key).unwrap().serve_args.join(" ");
        assert_eq!(flags("rollback"), "--journal delete --tx deferred --synchronous full");
        assert_eq!(flags("mmap"), format!("{} --mmap-size 268435456", flags("normal")));
        assert_eq!(flags("no-group-commit"), format!("{} --max-batch 1", flags("mmap")));
        assert_eq!((flags("index-sqlite"), find("index-sqlite").unwrap().index), (flags("mmap"), "sqlite"));
        assert!(find("index-none").unwrap().inserts_only && !find("mmap").unwrap().inserts_only);
        assert!(find("fast").unwrap_err().contains("rollback, wal, immediate"));
    }

    /// A run of `workload` with `connections` whose answers took `latencies_ms`, over 1 s
    /// (HDR histograms: values under 8 ms print exactly at two decimals).
    fn run(workload: Workload, connections: usize, latencies_ms: &[u64]) -> RunReport {
        use std::time::Duration;

        let mut recorded = crate::recorder::Recorder::default();
        for &ms in latencies_ms {
            recorded.record(Duration::ZERO, Duration::from_millis(ms), crate::recorder::Outcome::Status(200));
        }
        let result = crate::runner::RunResult {
            recorded,
            elapsed: Duration::from_secs(1),
            samples: Vec::new(),
            server_counted: None,
            stats_before: None,
            stats_after: None,
            generator_cpu_seconds: 0.0,
        };
        let options = crate::runner::RunOptions {
            workload,
            mix: crate::workload::Mix::default(),
            dist: crate::workload::KeyDist::Uniform,
            schedule: crate::schedule::Schedule::Closed { connections },
            warmup: Duration::ZERO,
            duration: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
            records: 10,
            seed: 1,
            key_size: 32,
            value_size: 32,
        };
        let server =
            crate::report::ServerInfo { url: String::new(), spawned: true, data_dir: None, serve_args: vec![] };
        RunReport::new(format!("{workload}"), server, options, &result, 0, 0)
    }

    #[test]
    fn the_table_has_a_row_per_configuration_and_connection_count() {
        let runs = vec![
            run(Workload::Select, 10, &[1, 2, 3]),
            run(Workload::Select, 100, &[4, 5, 6, 7]),
            run(Workload::Insert, 10, &[2, 4]),
            run(Workload::Select, 10, &[1]),
        ];
        let report = Report {
            schema_version: 1,
            generator: crate::report::Generator { version: "x".into(), threads: 2, cores: 2 },
            runs,
            matrix: None,
        };
        let pg_args = vec!["--backend".to_owned(), "postgres://u@h/db".to_owned()];
        let matrix = Matrix {
            workloads: vec![Workload::Select, Workload::Insert],
            concurrency: vec![10, 100],
            configurations: vec![
                MatrixRow::new(&find("immediate").unwrap(), vec![0, 1, 2]),
                MatrixRow::postgres(pg_args.clone(), vec![3]),
            ],
        };
        let pg = &matrix.configurations[1];
        assert_eq!((pg.key.as_str(), pg.backend.as_str(), pg.index.as_str()), ("postgres", "postgres", "btree"));
        assert_eq!(pg.serve_args, pg_args);
        assert_eq!(matrix.configurations[0].backend, "sqlite");
        let rows = |text: &str| -> Vec<Vec<String>> {
            text.lines().map(|l| l.split_whitespace().map(str::to_owned).collect()).collect()
        };
        let table = rows(&render_text(&report, &matrix));
        assert_eq!(table[0], ["configuration", "conns", "select", "insert"]);
        assert_eq!(table[1].join(" "), "queries/s p50 ms p99 ms max ms queries/s p50 ms p99 ms max ms");
        // queries/s (over 1 s), then p50, p99 and max in ms; `-` where a workload did not run.
        let row = |cells: &[&str]| cells.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
        assert_eq!(table[2], row(&["+", "IMMEDIATE", "10", "3", "2.00", "3.00", "3.00", "2", "2.00", "4.00", "4.00"]));
        assert_eq!(table[3], row(&["+", "IMMEDIATE", "100", "4", "5.00", "7.00", "7.00", "-", "-", "-", "-"]));
        assert_eq!(table[4], row(&["PostgreSQL", "10", "1", "1.00", "1.00", "1.00", "-", "-", "-", "-"]));
        assert_eq!(table[5], row(&["PostgreSQL", "100", "-", "-", "-", "-", "-", "-", "-", "-"]));
        assert_eq!(table.len(), 6);
    }
}
