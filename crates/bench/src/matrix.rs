//! `shardlite bench matrix`: the SQLite configurations the write-ups measured, cumulatively as in
//! the Django write-up's table (rollback journal, WAL, + IMMEDIATE, + synchronous NORMAL, + mmap),
//! then group commit off and the other index modes, each a one-flag change from `+ mmap` (which
//! is group commit on and index `hash`). The model of the side-by-side result (a top-level
//! `matrix` in the JSON report) and its text table.

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

/// The side-by-side result: which runs measured which configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Matrix {
    /// The columns.
    pub workloads: Vec<Workload>,
    /// The rows, in the order run.
    pub configurations: Vec<MatrixRow>,
}

/// One configuration's row.
#[derive(Debug, Clone, Serialize)]
pub struct MatrixRow {
    /// [`Config::key`].
    pub key: String,
    /// [`Config::label`].
    pub label: String,
    /// The data directory's index mode.
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
            index: config.index.to_owned(),
            serve_args: config.serve_args.iter().map(|s| (*s).to_owned()).collect(),
            runs,
        }
    }

    /// This row's run of `workload`, if there was one.
    pub fn run<'a>(&self, report: &'a Report, workload: Workload) -> Option<&'a RunReport> {
        self.runs.iter().filter_map(|&i| report.runs.get(i)).find(|r| r.options.workload == workload)
    }
}

/// The table: one row per configuration, queries/s and p99 (ms) per workload.
pub fn render_text(report: &Report, matrix: &Matrix) -> String {
    let mut head = format!("{:<22}", "configuration");
    let mut units = format!("{:<22}", "");
    for w in &matrix.workloads {
        let _ = write!(head, "  {:>19}", w.name());
        let _ = write!(units, "  {:>10} {:>8}", "queries/s", "p99 ms");
    }
    let mut out = format!("{head}\n{units}\n");
    for row in &matrix.configurations {
        let _ = write!(out, "{:<22}", row.label);
        for &w in &matrix.workloads {
            let _ = match row.run(report, w) {
                Some(r) => write!(out, "  {:>10.0} {:>8.2}", r.queries_per_sec, r.latency_ms.p99),
                None => write!(out, "  {:>10} {:>8}", "-", "-"),
            };
        }
        out.push('\n');
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
}
