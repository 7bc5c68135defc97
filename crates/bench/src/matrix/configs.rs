//! The configurations `bench matrix` compares, as typed values: the SQLite settings the public
//! write-ups measured (`docs/sizing.md`), cumulatively as in the Django one (rollback journal,
//! WAL, + IMMEDIATE, + synchronous NORMAL, + mmap), then group commit off and the other index
//! modes, each a one-setting change from `+ mmap` (which is group commit on and index `hash`);
//! and the row of each in the report ([`MatrixRow::new`], [`MatrixRow::postgres`]).

use shardlite_engine::{CreateOptions, IndexMode, JournalMode, Synchronous, TxMode};

use crate::report::MatrixRow;

/// One configuration: a fresh data directory of an index mode, and the server's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The name on the command line (`--configs`).
    pub key: &'static str,
    /// The row's label in the table.
    pub label: &'static str,
    /// The data directory's index mode.
    pub index: IndexMode,
    /// SQLite's journal.
    pub journal: JournalMode,
    /// How the writer begins transactions.
    pub transaction: TxMode,
    /// What an acknowledged write survives.
    pub synchronous: Synchronous,
    /// SQLite mmap per connection, bytes (`None`: the server's default).
    pub mmap_size: Option<u64>,
    /// Most requests per commit (`None`: the server's default).
    pub max_batch: Option<usize>,
    /// Only `insert` runs (an index mode without lookups by key).
    pub inserts_only: bool,
}

impl Config {
    /// The data directory of this configuration with `partitions` partitions.
    pub fn create(&self, partitions: u32) -> CreateOptions {
        CreateOptions { partitions: Some(partitions), index: Some(self.index), ..CreateOptions::default() }
    }

    /// The `shardlite serve` flags of this configuration's settings (the report's `serve_args`).
    pub fn serve_args(&self) -> Vec<String> {
        let set = [
            ("journal", Some(self.journal.to_string())),
            ("tx", Some(self.transaction.to_string())),
            ("synchronous", Some(self.synchronous.to_string())),
            ("mmap-size", self.mmap_size.map(|m| m.to_string())),
            ("max-batch", self.max_batch.map(|b| b.to_string())),
        ];
        set.into_iter().filter_map(|(flag, value)| Some([format!("--{flag}"), value?])).flatten().collect()
    }
}

const fn config(
    key: &'static str,
    label: &'static str,
    journal: JournalMode,
    transaction: TxMode,
    synchronous: Synchronous,
) -> Config {
    let (index, mmap_size, max_batch, inserts_only) = (IndexMode::Hash, None, None, false);
    Config { key, label, index, journal, transaction, synchronous, mmap_size, max_batch, inserts_only }
}

/// `+ mmap`: every tuning on; the base of the rows after it.
const TUNED: Config = Config {
    mmap_size: Some(256 << 20),
    ..config("mmap", "+ mmap 256 MiB", JournalMode::Wal, TxMode::Immediate, Synchronous::Normal)
};

/// Every configuration, in the table's order.
pub const CONFIGS: [Config; 8] = [
    config("rollback", "rollback journal", JournalMode::Delete, TxMode::Deferred, Synchronous::Full),
    config("wal", "WAL", JournalMode::Wal, TxMode::Deferred, Synchronous::Full),
    config("immediate", "+ IMMEDIATE", JournalMode::Wal, TxMode::Immediate, Synchronous::Full),
    config("normal", "+ synchronous NORMAL", JournalMode::Wal, TxMode::Immediate, Synchronous::Normal),
    TUNED,
    Config { key: "no-group-commit", label: "group commit off", max_batch: Some(1), ..TUNED },
    Config { key: "index-sqlite", label: "index sqlite", index: IndexMode::Sqlite, ..TUNED },
    Config { key: "index-none", label: "index none", index: IndexMode::None, inserts_only: true, ..TUNED },
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

/// The PostgreSQL row's key and label when its spawned cluster has a synchronous standby
/// (`--pg-standby`).
pub const POSTGRES_STANDBY: (&str, &str) = ("postgres-standby", "PostgreSQL + sync standby");

impl MatrixRow {
    /// The row of `config` whose runs are `runs`.
    pub fn new(config: &Config, runs: Vec<usize>) -> Self {
        Self {
            key: config.key.to_owned(),
            label: config.label.to_owned(),
            backend: "sqlite".to_owned(),
            index: config.index.to_string(),
            serve_args: config.serve_args(),
            runs,
        }
    }

    /// The PostgreSQL row ([`POSTGRES`] or [`POSTGRES_STANDBY`]: `name`): a server with
    /// `serve_args` (its `--backend`, password hidden).
    pub fn postgres(name: (&str, &str), serve_args: Vec<String>, runs: Vec<usize>) -> Self {
        let (key, label) = name;
        let (key, label, backend, index) =
            (key.to_owned(), label.to_owned(), "postgres".to_owned(), "btree".to_owned());
        Self { key, label, backend, index, serve_args, runs }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_change_one_thing_at_a_time() {
        let flags = |key: &str| find(key).unwrap().serve_args().join(" ");
        assert_eq!(flags("rollback"), "--journal delete --tx deferred --synchronous full");
        assert_eq!(flags("mmap"), format!("{} --mmap-size 268435456", flags("normal")));
        assert_eq!(flags("no-group-commit"), format!("{} --max-batch 1", flags("mmap")));
        assert_eq!((flags("index-sqlite"), find("index-sqlite").unwrap().index.as_str()), (flags("mmap"), "sqlite"));
        assert!(find("index-none").unwrap().inserts_only && !find("mmap").unwrap().inserts_only);
        assert!(find("fast").unwrap_err().contains("rollback, wal, immediate"));
    }
}
