//! The report model, built from runs, and its renderings: JSON (`serde`; the schema is
//! `report.schema.json`, documented in `docs/bench.md`) and the text table in the form of the
//! first prototype's results (`docs/sizing.md`), `SELECT 1500 queries/s 4800 iops 405 MB_rd/s 0 MB_wr/s ...`, with a per-second
//! timeline under it. Throughput never appears without its cost beside it.

use std::{collections::BTreeMap, fmt::Write};

use serde::Serialize;

use crate::{
    cold::ColdReport,
    cost::Cost,
    recorder::{Errors, Percentiles},
    runner::{RunOptions, RunResult},
    workload::Workload,
};

/// The version of the JSON document's shape; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// The JSON Schema (2020-12) of the JSON document, `report.schema.json`: published in
/// `docs/bench.md`, and what the tests check every report they make against.
pub const SCHEMA: &str = include_str!("report.schema.json");

/// A whole `shardlite bench` invocation.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The generator: its version, threads, and the machine's cores.
    pub generator: Generator,
    /// One entry per run, in the order run.
    pub runs: Vec<RunReport>,
    /// `bench matrix`: which runs measured which configuration (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matrix: Option<Matrix>,
}

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
    /// The configuration's key (`--configs`), or `postgres`.
    pub key: String,
    /// The configuration's label, or `PostgreSQL`.
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
    /// This row's run of `workload` with `connections`, if there was one.
    pub fn run<'a>(&self, report: &'a Report, workload: Workload, connections: usize) -> Option<&'a RunReport> {
        self.runs
            .iter()
            .filter_map(|&i| report.runs.get(i))
            .find(|r| r.options.workload == workload && r.options.schedule.connections() == connections)
    }
}

/// The load generator itself.
#[derive(Debug, Clone, Serialize)]
pub struct Generator {
    /// shardlite's version.
    pub version: String,
    /// Threads of the generator's runtime.
    pub threads: usize,
    /// CPU cores of the machine.
    pub cores: usize,
}

/// The server a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct ServerInfo {
    /// Its base URL.
    pub url: String,
    /// Whether the bench started it (`--spawn`).
    pub spawned: bool,
    /// Its data directory, if known.
    pub data_dir: Option<String>,
    /// Its `shardlite serve` flags, if spawned.
    pub serve_args: Vec<String>,
}

/// One workload run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The label in the table, e.g. `select` or `insert --index none`.
    pub name: String,
    /// The server.
    pub server: ServerInfo,
    /// What was run.
    pub options: RunOptions,
    /// The measured window, seconds (its start to the last answer).
    pub seconds: f64,
    /// Measured requests answered 2xx.
    pub ok: u64,
    /// Successful requests per second: the table's `queries/s`.
    pub queries_per_sec: f64,
    /// Measured answers 201 (records created by inserts).
    pub created: u64,
    /// Answers 201 including the warm-up's: what `records_after - records_before` should be.
    pub created_all: u64,
    /// Latency of successful requests, ms (open loop: from the intended start).
    pub latency_ms: Percentiles,
    /// Errors by kind.
    pub errors: Errors,
    /// All errors.
    pub error_total: u64,
    /// Measured answers by status code.
    pub statuses: BTreeMap<String, u64>,
    /// Every request sent, warm-up included.
    pub sent: u64,
    /// Requests the server counted on the route (`/metrics`), if it exposes that.
    pub server_counted: Option<u64>,
    /// Open loop: measured requests sent late (more than 1 ms after their intended start).
    pub late: u64,
    /// Open loop: requests due before the end but never sent.
    pub unsent: u64,
    /// Records (`/stats`) before the first request, if known.
    pub records_before: Option<u64>,
    /// Records after the last answer, if known.
    pub records_after: Option<u64>,
    /// The first key index inserts used.
    pub insert_first_index: u64,
    /// One past the last key index inserts used (the next run starts here or above).
    pub insert_next_index: u64,
    /// What the measured window cost.
    pub cost: Cost,
    /// Disk reads per successful request, if the disk is known.
    pub reads_per_query: Option<f64>,
    /// The generator's CPU use over the measured window, percent of one core.
    pub generator_cpu_pct: f64,
    /// One entry per second of the measured window.
    pub timeline: Vec<SecondReport>,
    /// `--cold`: the server's memory limit and use, and the device's ceiling; `None` otherwise.
    pub cold: Option<ColdReport>,
    /// `--url` of a cluster's node: per node, the requests sent to it (warm-up included) and
    /// how many it served as their partition's owner (the rest were answered 421). Empty for
    /// one server.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<crate::cluster::NodeTally>,
}

/// One second of a run.
#[derive(Debug, Clone, Serialize)]
pub struct SecondReport {
    /// Seconds since the measured window began (0-based).
    pub second: usize,
    /// Successful requests answered in this second.
    pub ok: u64,
    /// Errors in this second.
    pub errors: u64,
    /// Latency of this second's successful requests, ms (2 significant digits).
    pub latency_ms: Percentiles,
    /// What this second cost (from the samples around it), if sampled.
    pub cost: Option<Cost>,
}

impl RunReport {
    /// The report of one run.
    pub fn new(
        name: String,
        server: ServerInfo,
        options: RunOptions,
        result: &RunResult,
        first_fresh: u64,
        next_fresh: u64,
    ) -> Self {
        let r = &result.recorded;
        let seconds = result.elapsed.as_secs_f64();
        let cost = match (result.samples.first(), result.samples.last()) {
            (Some(a), Some(b)) if result.samples.len() > 1 => Cost::between(a, b),
            _ => Cost::default(),
        };
        let reads_per_query = cost.disk_reads_per_sec.map(|reads| reads * seconds / r.ok.max(1) as f64);
        // Seconds that began within the window; later ones hold only the tail of answers.
        let whole = (options.duration.as_secs_f64().ceil() as usize).max(1);
        let timeline = r
            .seconds
            .iter()
            .take(whole)
            .enumerate()
            .map(|(i, s)| SecondReport {
                second: i,
                ok: s.ok,
                errors: s.errors,
                latency_ms: Percentiles::of(&s.latency),
                cost: result.samples.get(i).zip(result.samples.get(i + 1)).map(|(a, b)| Cost::between(a, b)),
            })
            .collect();
        Self {
            name,
            server,
            seconds,
            ok: r.ok,
            queries_per_sec: r.ok as f64 / seconds.max(1e-9),
            created: r.created,
            created_all: r.created_all,
            latency_ms: Percentiles::of(&r.latency),
            errors: r.errors,
            error_total: r.errors.total(),
            statuses: r.statuses.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
            sent: r.sent,
            server_counted: result.server_counted,
            late: r.late,
            unsent: r.unsent,
            records_before: result.stats_before.map(|s| s.records),
            records_after: result.stats_after.map(|s| s.records),
            insert_first_index: first_fresh,
            insert_next_index: next_fresh,
            cost,
            reads_per_query,
            generator_cpu_pct: 100.0 * result.generator_cpu_seconds / seconds.max(1e-9),
            timeline,
            options,
            cold: None,
            nodes: result.nodes.clone(),
        }
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
}

/// One run's line, in the form of the first prototype's results.
pub fn summary_line(r: &RunReport) -> String {
    let c = &r.cost;
    let pct = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}%"));
    let wal = c.wal_bytes.map_or_else(|| "-".to_owned(), |b| format!("{:.1} MB", b as f64 / 1e6));
    let l = &r.latency_ms;
    format!(
        "{:<20} {:>8.0} queries/s {:>6} iops {:>6} MB_rd/s {:>6} MB_wr/s  rd/query {:>5}  WAL {:>8}  \
         CPU busy {:>4} idle {:>4} iowait {:>4}  p50 {:.2} p90 {:.2} p99 {:.2} p99.9 {:.2} max {:.2} ms  errors {}",
        r.name.to_uppercase(),
        r.queries_per_sec,
        opt(c.iops, 0),
        opt(c.mb_read_per_sec, 1),
        opt(c.mb_written_per_sec, 1),
        opt(r.reads_per_query, 2),
        wal,
        pct(c.cpu_busy_pct),
        pct(c.cpu_idle_pct),
        pct(c.cpu_iowait_pct),
        l.p50,
        l.p90,
        l.p99,
        l.p999,
        l.max,
        r.error_total,
    )
}

/// A `--cold` run's rate against the device's ceiling and its memory, e.g. `SELECT 12,884/s =
/// 1.28 reads each = 44% of the device's 29,300 reads/s; memory limit 200 MiB, ...`; `None` for
/// other runs.
pub fn cold_line(r: &RunReport) -> Option<String> {
    let cold = r.cold.as_ref()?;
    let device = match (cold.device, cold.device_use_pct) {
        (Some(d), Some(pct)) => format!("{pct:.0}% of the device's {} reads/s", thousands(d.reads_per_sec)),
        (Some(d), None) => format!("the device's {} reads/s", thousands(d.reads_per_sec)),
        (None, _) => "the device's ceiling unknown".to_owned(),
    };
    let mib = |b: Option<u64>| b.map_or_else(|| "-".to_owned(), |b| format!("{} MiB", b >> 20));
    let memory = if cold.limited {
        let killed = match cold.oom_kills {
            Some(0) => "0".to_owned(),
            Some(n) => format!("{n} (the server was killed for want of memory)"),
            None => "-".to_owned(),
        };
        format!(
            "memory limit {}, group peak {}, OOM kills {killed}",
            mib(Some(cold.limit_bytes)),
            mib(cold.group_peak_bytes)
        )
    } else {
        format!("no memory limit (asked for {}: no memory controller to use)", mib(Some(cold.limit_bytes)))
    };
    Some(format!(
        "{} {}/s = {} reads each = {device}; {memory}, server RSS {}",
        r.name.to_uppercase(),
        thousands(r.queries_per_sec),
        opt(r.reads_per_query, 2),
        mib(r.cost.server_rss_bytes),
    ))
}

/// `v` rounded, its thousands apart: `12,884`.
fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The text report: the table, then each run's details and timeline.
pub fn render_text(report: &Report) -> String {
    let mut out = String::new();
    for r in &report.runs {
        let _ = writeln!(out, "{}", summary_line(r));
    }
    for line in report.runs.iter().filter_map(cold_line) {
        let _ = writeln!(out, "{line}");
    }
    for r in &report.runs {
        let c = &r.cost;
        let _ = writeln!(out, "\n{} ({} on {}):", r.name, schedule_text(&r.options), r.server.url);
        let _ = writeln!(
            out,
            "  sent {} (server counted {}), ok {}, created {} ({} with warm-up), records {} -> {}, errors: 3xx {} 4xx {} 5xx {} \
             timeout {} connection {}, late {}, unsent {}",
            r.sent,
            r.server_counted.map_or_else(|| "-".to_owned(), |n| n.to_string()),
            r.ok,
            r.created,
            r.created_all,
            r.records_before.map_or_else(|| "-".to_owned(), |n| n.to_string()),
            r.records_after.map_or_else(|| "-".to_owned(), |n| n.to_string()),
            r.errors.status_3xx,
            r.errors.status_4xx,
            r.errors.status_5xx,
            r.errors.timeout,
            r.errors.connection,
            r.late,
            r.unsent,
        );
        let _ = writeln!(
            out,
            "  server CPU {}% of a core, RSS {} MB, process I/O {} MB_rd/s {} MB_wr/s; generator CPU {:.0}% of a core",
            opt(c.server_cpu_pct, 0),
            opt(c.server_rss_bytes.map(|b| b as f64 / 1e6), 1),
            opt(c.server_mb_read_per_sec, 1),
            opt(c.server_mb_written_per_sec, 1),
            r.generator_cpu_pct,
        );
        for s in &r.timeline {
            let sc = s.cost.unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:>3}s {:>8} ok {:>5} err  p50 {:>7.2} p99 {:>7.2} max {:>7.2} ms  {:>6} iops {:>6} MB_rd/s {:>6} MB_wr/s  busy {:>4}%",
                s.second + 1,
                s.ok,
                s.errors,
                s.latency_ms.p50,
                s.latency_ms.p99,
                s.latency_ms.max,
                opt(sc.iops, 0),
                opt(sc.mb_read_per_sec, 1),
                opt(sc.mb_written_per_sec, 1),
                opt(sc.cpu_busy_pct, 0),
            );
        }
    }
    out
}

fn schedule_text(o: &RunOptions) -> String {
    match o.schedule {
        crate::schedule::Schedule::Closed { connections } => format!("closed loop, {connections} connections"),
        crate::schedule::Schedule::Open { connections, rate } => {
            format!("open loop at {rate:.0} req/s, {connections} connections")
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    /// Every way `doc` breaks [`SCHEMA`], as `path: problem` lines.
    fn problems(doc: &Value) -> String {
        let schema: Value = serde_json::from_str(SCHEMA).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        validator.iter_errors(doc).map(|e| format!("{}: {e}\n", e.instance_path())).collect()
    }

    #[test]
    fn thousands_are_set_apart() {
        let cases = [(0.0, "0"), (999.4, "999"), (12884.0, "12,884"), (29300.2, "29,300"), (1234567.0, "1,234,567")];
        for (v, text) in cases {
            assert_eq!(thousands(v), text);
        }
    }

    #[test]
    fn the_schema_parses_and_rejects_what_it_should() {
        let schema: Value = serde_json::from_str(SCHEMA).unwrap();
        assert_eq!(schema["properties"]["schema_version"]["enum"][0], SCHEMA_VERSION);
        let generator = json!({"version": "x", "threads": 2, "cores": 2});
        assert_eq!(problems(&json!({"schema_version": 1, "generator": generator, "runs": []})), "");
        let matrix = json!({"workloads": ["insert"], "configurations": [
            {"key": "wal", "label": "WAL", "index": "hash", "serve_args": ["--journal", "wal"], "runs": []}
        ]});
        assert_eq!(problems(&json!({"schema_version": 1, "generator": generator, "runs": [], "matrix": matrix})), "");
        let bad_matrix = json!({"workloads": ["scan"], "configurations": [{"key": "wal", "index": "lsm"}]});
        let text = problems(&json!({"schema_version": 1, "generator": generator, "runs": [], "matrix": bad_matrix}));
        for expected in [
            "/matrix/workloads/0: \"scan\" is not one of",
            "/matrix/configurations/0: \"runs\" is a required property",
            "/matrix/configurations/0/index: \"lsm\" is not one of",
        ] {
            assert!(text.contains(expected), "{expected} not in\n{text}");
        }
        let text =
            problems(&json!({"schema_version": 2, "generator": {"version": 1, "threads": 2}, "runs": [{}], "x": 0}));
        for expected in [
            "/schema_version: 2 is not one of",
            "/generator/version: 1 is not of type",
            "/generator: \"cores\" is a required property",
            "/runs/0: \"name\" is a required property",
            ": Additional properties are not allowed ('x' was unexpected)",
        ] {
            assert!(text.contains(expected), "{expected} not in\n{text}");
        }
    }
}
