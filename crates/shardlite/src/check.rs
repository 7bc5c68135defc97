//! `shardlite check --data DIR` (or `--url URL`: a running server's `GET /admin/check`): the
//! engine's check of every partition (SQLite `quick_check`, the
//! record count, index <-> data both ways), with a progress bar. Prints the partitions with
//! findings and a summary line (or, with `--json`, one document), and says what it found in its
//! exit status: 0 clean, 1 findings, 2 could not run (no such directory, in use by a
//! server, a bad manifest, unreadable files).

use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use shardlite_engine::{Config, Error, PartitionCheck, Store};

use crate::{
    interrupt,
    remote::{Auth, Target},
};
use reqwest::Method;

/// What the check concluded; its exit status is the discriminant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Verdict {
    /// Every partition passed: exit 0.
    Clean = 0,
    /// The check ran and found problems: exit 1.
    Findings = 1,
    /// The check could not run: exit 2.
    CouldNotRun = 2,
    /// Ctrl-C or SIGTERM stopped it: exit 130.
    Interrupted = interrupt::EXIT_STATUS as isize,
}

/// Flags of `shardlite check`.
#[derive(Debug, clap::Args)]
#[command(after_help = "With --url: GET /admin/check, a token with the admin role; the writes of a partition \
                        being checked wait meanwhile.\n\nExit status: 0 clean, 1 findings, 2 could not run, 130 \
                        interrupted.\n\nExamples:\n  \
                        shardlite check --data /var/lib/shardlite\n  \
                        shardlite check --url http://127.0.0.1:8080 --token-file admin.token --json")]
pub struct CheckArgs {
    #[command(flatten)]
    pub target: Target,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What a check found.
#[derive(Debug, Serialize)]
struct Report {
    /// `clean`, `findings` or `could_not_run`.
    verdict: Verdict,
    /// Partitions checked.
    partitions: usize,
    /// Partitions with findings.
    failed: Vec<u32>,
    /// Records found, all partitions.
    records: u64,
    /// Why the check could not run, or the damage that kept the directory from opening.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Each partition's report.
    reports: Vec<PartitionCheck>,
}

/// Runs `shardlite check`; its exit status.
pub fn run(args: CheckArgs) -> ExitCode {
    let report = match (&args.target.data, &args.target.remote.url) {
        (Some(data), _) => examine(data),
        (None, Some(url)) => ask(&args.target.remote.auth, url),
        (None, None) => refused(Verdict::CouldNotRun, "give --data or --url".into()),
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(err) => eprintln!("error: {err}"),
        }
    } else {
        print!("{}", render(&report));
        if let Some(err) = &report.error {
            eprintln!("error: {err}");
        }
    }
    ExitCode::from(report.verdict as u8)
}

/// A report of a check that did not get to the partitions.
fn refused(verdict: Verdict, error: String) -> Report {
    Report { verdict, partitions: 0, failed: Vec::new(), records: 0, error: Some(error), reports: Vec::new() }
}

/// The report of checked partitions.
fn judged(reports: Vec<PartitionCheck>) -> Report {
    let failed: Vec<u32> = reports.iter().filter(|r| !r.is_ok()).map(|r| r.partition).collect();
    Report {
        verdict: if failed.is_empty() { Verdict::Clean } else { Verdict::Findings },
        partitions: reports.len(),
        records: reports.iter().map(|r| r.records).sum(),
        failed,
        error: None,
        reports,
    }
}

/// Asks the server at `url` to check its partitions (`GET /admin/check`).
fn ask(auth: &Auth, url: &str) -> Report {
    #[derive(serde::Deserialize)]
    struct Reports {
        reports: Vec<PartitionCheck>,
    }
    let fetched = auth.connect(url).and_then(|server| server.json::<Reports>(Method::GET, "/admin/check", None));
    match fetched {
        Ok(fetched) => judged(fetched.reports),
        Err(err) => refused(Verdict::CouldNotRun, format!("{err:#}")),
    }
}

/// Opens the directory and checks every partition.
fn examine(data: &std::path::Path) -> Report {
    let store = match Store::open(data, Config::inspection()) {
        Ok(store) => store,
        // Damage found while opening is a finding; anything else kept the check from running.
        Err(err @ (Error::Corrupt { .. } | Error::WalMissing { .. } | Error::Sqlite(_))) => {
            return refused(Verdict::Findings, format!("opening {}: {err}", data.display()))
        }
        Err(err) => return refused(Verdict::CouldNotRun, format!("opening {}: {err}", data.display())),
    };
    let partitions = store.manifest().partitions;
    let bar = ProgressBar::new(u64::from(partitions)).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} partitions checked, eta {eta}").expect("a valid template"),
    );
    let mut reports = Vec::with_capacity(partitions as usize);
    for p in 0..partitions {
        if interrupt::check().is_err() {
            bar.finish_and_clear();
            let why = format!("{p} of {partitions} partitions checked, nothing changed; run the check again");
            return refused(Verdict::Interrupted, format!("the check stopped: {why}"));
        }
        match store.check_partition(p) {
            Ok(report) => reports.push(report),
            Err(err) => {
                bar.finish_and_clear();
                return refused(Verdict::CouldNotRun, format!("checking partition {p}: {err}"));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    judged(reports)
}

/// The partitions with findings, each with its problems indented, then the summary line.
fn render(report: &Report) -> String {
    let mut out = findings(&report.reports);
    out.push_str(&match report.verdict {
        Verdict::Clean => {
            format!("clean: {} partitions checked, {} records, no findings\n", report.partitions, report.records)
        }
        Verdict::Findings if report.error.is_some() => {
            "findings: the directory is damaged (see the error)\n".to_owned()
        }
        Verdict::Findings => format!(
            "findings: {} of {} partitions failed ({}); {} records\n",
            report.failed.len(),
            report.partitions,
            report.failed.iter().map(|p| format!("p{p:04}")).collect::<Vec<_>>().join(", "),
            report.records
        ),
        Verdict::CouldNotRun => "could not run the check\n".to_owned(),
        Verdict::Interrupted => "interrupted\n".to_owned(),
    });
    out
}

/// One line for each partition with findings, then its problems, indented.
pub fn findings(reports: &[PartitionCheck]) -> String {
    let mut out = String::new();
    for r in reports.iter().filter(|r| !r.is_ok()) {
        out.push_str(&format!(
            "p{:04} FAILED: {} records, sqlite {}, index {} + {} entries, {} missing, {} extra, {} stale\n",
            r.partition,
            r.records,
            r.sqlite,
            r.index_file_entries,
            r.index_recent_entries,
            r.missing_entries,
            r.extra_entries,
            r.stale_entries
        ));
        for p in &r.problems {
            out.push_str(&format!("  {p}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use shardlite_engine::PartitionCheck;

    use super::*;

    #[test]
    fn findings_are_listed_under_their_partition_then_summed_up() {
        let good =
            PartitionCheck { partition: 0, sqlite: "ok".into(), records: 5, counted_records: 5, ..Default::default() };
        let bad = PartitionCheck {
            partition: 1,
            sqlite: "ok".into(),
            missing_entries: 1,
            problems: vec!["record id 7 has no entry in the index file".into()],
            ..Default::default()
        };
        let report = Report {
            verdict: Verdict::Findings,
            partitions: 2,
            failed: vec![1],
            records: 5,
            error: None,
            reports: vec![good, bad],
        };
        let text = render(&report);
        assert!(text.starts_with("p0001 FAILED") && text.contains("\n  record id 7 has no entry"), "{text}");
        assert!(!text.contains("p0000"), "partitions that passed are only counted: {text}");
        assert!(text.ends_with("findings: 1 of 2 partitions failed (p0001); 5 records\n"), "{text}");
    }
}
