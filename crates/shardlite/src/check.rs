//! `shardlite check --data DIR`: the engine's check of every partition (SQLite `quick_check`, the
//! record count, index <-> data both ways), with a progress bar; exits non-zero on any finding.

use std::path::PathBuf;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use shardlite_engine::{Config, PartitionCheck, Store};

/// Flags of `shardlite check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The data directory (no server may be running on it).
    #[arg(long)]
    pub data: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `shardlite check`.
pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let store =
        Store::open(&args.data, Config::inspection()).with_context(|| format!("opening {}", args.data.display()))?;
    let partitions = store.manifest().partitions;
    let bar = ProgressBar::new(u64::from(partitions)).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} partitions checked, eta {eta}").expect("a valid template"),
    );
    let mut reports = Vec::with_capacity(partitions as usize);
    for p in 0..partitions {
        reports.push(store.check_partition(p)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print!("{}", render(&reports));
    }
    let bad = reports.iter().filter(|r| !r.is_ok()).count();
    anyhow::ensure!(bad == 0, "{bad} of {} partitions failed the check", reports.len());
    Ok(())
}

/// One line per partition, then its problems, indented.
pub fn render(reports: &[PartitionCheck]) -> String {
    let mut out = String::new();
    for r in reports {
        let verdict = if r.is_ok() { "ok" } else { "FAILED" };
        out.push_str(&format!(
            "p{:04} {verdict}: {} records, sqlite {}, index {} + {} entries, {} missing, {} extra, {} stale\n",
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

    #[test]
    fn findings_are_listed_under_their_partition() {
        let good =
            PartitionCheck { partition: 0, sqlite: "ok".into(), records: 5, counted_records: 5, ..Default::default() };
        let bad = PartitionCheck {
            partition: 1,
            sqlite: "ok".into(),
            missing_entries: 1,
            problems: vec!["record id 7 has no entry in the index file".into()],
            ..Default::default()
        };
        let text = super::render(&[good, bad]);
        assert!(text.starts_with("p0000 ok: 5 records"), "{text}");
        assert!(text.contains("p0001 FAILED") && text.contains("\n  record id 7 has no entry"), "{text}");
    }
}
