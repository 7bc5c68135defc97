//! `shardlite stats --data DIR`: a data directory's records and bytes, per partition and in
//! total, and its manifest.

use std::path::PathBuf;

use anyhow::Context;
use shardlite_engine::{Config, Store, StoreStats};

/// Flags of `shardlite stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// The data directory.
    #[arg(long)]
    pub data: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `shardlite stats`.
pub fn run(args: StatsArgs) -> anyhow::Result<()> {
    let store = Store::open_existing(&args.data, Config::default())
        .with_context(|| format!("opening {}", args.data.display()))?;
    let stats = store.stats();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        print!("{}", render(&stats));
    }
    Ok(())
}

/// The stats as a table: one row per partition, then the totals.
pub fn render(stats: &StoreStats) -> String {
    let m = &stats.manifest;
    let mut out = format!(
        "{}: format {}, {} partitions, index {}, hash seed {}\n{:>9} {:>14} {:>14} {:>12} {:>14} {:>10}\n",
        stats.data_dir,
        m.format_version,
        m.partitions,
        m.index,
        m.hash_seed,
        "partition",
        "records",
        "db bytes",
        "wal bytes",
        "index bytes",
        "B/record"
    );
    let per_record = |bytes: u64, records: u64| bytes as f64 / records.max(1) as f64;
    let (mut records, mut db, mut wal, mut index) = (0, 0, 0, 0);
    for p in &stats.partitions {
        let bytes = p.db_bytes + p.wal_bytes + p.index_bytes;
        out.push_str(&format!(
            "{:>9} {:>14} {:>14} {:>12} {:>14} {:>10.1}\n",
            p.partition,
            p.records,
            p.db_bytes,
            p.wal_bytes,
            p.index_bytes,
            per_record(bytes, p.records)
        ));
        (records, db, wal, index) = (records + p.records, db + p.db_bytes, wal + p.wal_bytes, index + p.index_bytes);
    }
    out.push_str(&format!(
        "{:>9} {:>14} {:>14} {:>12} {:>14} {:>10.1}\n",
        "total",
        records,
        db,
        wal,
        index,
        per_record(db + wal + index, records)
    ));
    out.push_str(&format!(
        "per record: db {:.1} B, index {:.2} B\n",
        per_record(db, records),
        per_record(index, records)
    ));
    out
}
