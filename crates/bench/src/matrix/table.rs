//! The side-by-side table of `bench matrix`: a row per configuration and connection count, a
//! column group per workload.

use std::fmt::Write;

use crate::report::{Matrix, Report};

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
    use crate::{
        matrix::find,
        report::{MatrixRow, RunReport},
        workload::Workload,
    };

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
            nodes: Vec::new(),
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
                MatrixRow::postgres(crate::matrix::POSTGRES, pg_args.clone(), vec![3]),
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
