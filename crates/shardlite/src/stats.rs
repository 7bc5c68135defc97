//! `shardlite stats --data DIR` (offline) or `--url URL` (a running server's `/stats`, `http://`
//! or `https://`): records and bytes per partition and in total, and the manifest.

use anyhow::Context;
use shardlite_engine::{Config, Store, StoreStats};
use shardlite_server::cluster::ReplicationReport;

use crate::remote::{Connection, Target};

/// Flags of `shardlite stats`.
#[derive(Debug, clap::Args)]
#[command(after_help = "With --url: the server's /stats, a token with the metrics role.\n\nExamples:\n  \
                        shardlite stats --data /var/lib/shardlite\n  \
                        SHARDLITE_AUTH_TOKEN=... shardlite stats --url http://127.0.0.1:8080 --json")]
pub struct StatsArgs {
    #[command(flatten)]
    pub target: Target,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `shardlite stats`.
pub fn run(args: StatsArgs) -> anyhow::Result<()> {
    let stats = match (&args.target.data, &args.target.remote.url) {
        (Some(data), _) => {
            Store::open(data, Config::inspection()).with_context(|| format!("opening {}", data.display()))?.stats()
        }
        (None, Some(url)) => fetch(&args.target.remote.auth.connect(url)?)?,
        (None, None) => anyhow::bail!("give --data or --url"),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        print!("{}", render(&stats));
    }
    Ok(())
}

/// The store's figures from a running server's `/stats`.
pub fn fetch(server: &Connection) -> anyhow::Result<StoreStats> {
    Ok(fetch_node(server)?.store)
}

/// What `cluster status` reads of a node's `/stats`.
#[derive(serde::Deserialize)]
pub struct NodeStats {
    /// The store's figures.
    pub store: StoreStats,
    /// Its replication to the copies of its partitions, if they have copies.
    #[serde(default)]
    pub replication: Option<ReplicationReport>,
}

/// A running server's `/stats`: its store's figures and its replication.
pub fn fetch_node(server: &Connection) -> anyhow::Result<NodeStats> {
    server.json::<NodeStats>(reqwest::Method::GET, "/stats", None)
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

#[cfg(test)]
mod tests {
    use shardlite_engine::{Condition, Config, CreateOptions, Store};

    #[test]
    fn the_table_has_a_row_per_partition_and_the_totals() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(
            dir.path(),
            CreateOptions { partitions: Some(3), ..CreateOptions::default() },
            Config::default(),
        )
        .unwrap();
        for i in 0u32..300 {
            store.put(&i.to_le_bytes(), vec![0; 10], Condition::None).unwrap();
        }
        let table = super::render(&store.stats());
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].contains("3 partitions, index hash"), "{table}");
        assert_eq!(lines.len(), 2 + 3 + 2, "{table}");
        assert!(lines[5].trim_start().starts_with("total") && lines[5].contains(" 300 "), "{table}");
    }
}
