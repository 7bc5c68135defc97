//! `shardlite serve`'s settings: the flags, the TOML file (`--config`) and how they combine.
//! Flags win over the file, the file over the defaults. The file uses the same names with `_`
//! for `-` at its top level: the server's keys below, and every field of the engine's
//! [`Config`] (`--tx` is `transaction` there, as in `Config`).

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::Context;
use serde::Deserialize;
use shardlite_engine::{Config, CreateOptions, IndexMode, JournalMode, Synchronous, TxMode};
use shardlite_server::ServerOptions;

/// Where the server listens unless told otherwise: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// The flags of `shardlite serve`. Every setting is optional here so that an absent flag can
/// fall back to the file.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// Data directory; created on first start.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Serve from PostgreSQL instead of a data directory: postgres://USER[:PASSWORD]@HOST:PORT/DB.
    /// Uses (and creates) the table `kv` (or --pg-table), hash-partitioned if --partitions is given.
    #[arg(long, value_name = "URL")]
    pub backend: Option<String>,
    /// The PostgreSQL table: lowercase letters, digits and _ [default: kv].
    #[arg(long, value_name = "NAME")]
    pub pg_table: Option<String>,
    /// Connections of the PostgreSQL pool [default: one per CPU, at least 4].
    #[arg(long)]
    pub pg_pool_size: Option<usize>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// TOML file with any of these settings (flags win over it).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Engine settings.
    #[command(flatten)]
    pub engine: EngineFlags,
    /// HTTP settings.
    #[command(flatten)]
    pub server: ServerFlags,
}

/// Every knob of the engine's [`Config`], as flags.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Engine")]
pub struct EngineFlags {
    /// Partitions of a new data directory [default: 256].
    #[arg(long)]
    pub partitions: Option<u32>,
    /// Index mode of a new data directory: hash, sqlite or none [default: hash].
    #[arg(long)]
    pub index: Option<IndexMode>,
    /// Key hash seed of a new data directory.
    #[arg(long)]
    pub hash_seed: Option<u64>,
    /// SQLite journal: wal or delete [default: wal].
    #[arg(long)]
    pub journal: Option<JournalMode>,
    /// What an acknowledged write survives: full (power loss), normal (a crash of the process)
    /// or off [default: full].
    #[arg(long)]
    pub synchronous: Option<Synchronous>,
    /// With synchronous=full: make commits durable with one flush of the shared commit log per
    /// round of commits (true), or with an fsync of each partition's WAL (false) [default: true].
    #[arg(long, value_name = "BOOL")]
    pub commit_log: Option<bool>,
    /// MiB preallocated for each commit log segment [default: 64].
    #[arg(long)]
    pub log_segment_mib: Option<u64>,
    /// SQLite page size of new partitions, bytes [default: 4096].
    #[arg(long)]
    pub page_size: Option<u32>,
    /// SQLite mmap_size per connection, bytes [default: 0].
    #[arg(long)]
    pub mmap_size: Option<u64>,
    /// SQLite page cache per connection, KiB [default: 2048].
    #[arg(long)]
    pub cache_size_kib: Option<u32>,
    /// Writer transactions: immediate or deferred [default: immediate].
    #[arg(long = "tx")]
    pub transaction: Option<TxMode>,
    /// Largest value, bytes [default: 1048576].
    #[arg(long)]
    pub max_value: Option<usize>,
    /// Group-commit writer threads [default: 16].
    #[arg(long)]
    pub writer_threads: Option<usize>,
    /// Jobs each writer queue (and the lookup queue) holds before answering 503 [default: 4096].
    #[arg(long)]
    pub queue_capacity: Option<usize>,
    /// Most write requests per commit; 1 turns group commit off [default: 1024].
    #[arg(long)]
    pub max_batch: Option<usize>,
    /// How long a writer waits for more requests after the first, µs [default: 0].
    #[arg(long)]
    pub max_linger_us: Option<u64>,
    /// Threads serving reads [default: 8].
    #[arg(long)]
    pub lookup_threads: Option<usize>,
    /// RAM for recently read records, MiB; 0: no cache [default: 64].
    #[arg(long)]
    pub record_cache_mib: Option<u64>,
    /// Read-only SQLite connections per partition [default: 2].
    #[arg(long)]
    pub readers_per_partition: Option<usize>,
    /// WAL pages after which a writer checkpoints [default: 1000].
    #[arg(long)]
    pub checkpoint_pages: Option<u32>,
    /// Index entries held in RAM before a merge into the index file [default: 1048576].
    #[arg(long)]
    pub merge_threshold: Option<usize>,
    /// Open even though a partition's write-ahead log is missing and the commits in it are
    /// lost (refused otherwise, saying so), serving what the database files hold.
    #[arg(long)]
    pub accept_wal_loss: bool,
}

/// The HTTP server's own flags.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "HTTP")]
pub struct ServerFlags {
    /// Require `Authorization: Bearer TOKEN` on every route but /healthz.
    #[arg(long, value_name = "TOKEN")]
    pub auth_token: Option<String>,
    /// Connections served at once [default: 1024].
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Time to receive a request's headers (also the keep-alive idle limit), ms [default: 10000].
    #[arg(long)]
    pub header_timeout_ms: Option<u64>,
    /// Time to receive a request's body, ms [default: 30000].
    #[arg(long)]
    pub body_timeout_ms: Option<u64>,
    /// Most operations in one POST /batch [default: 1000].
    #[arg(long)]
    pub batch_max_ops: Option<usize>,
    /// Largest POST /batch body, bytes [default: 16777216].
    #[arg(long)]
    pub batch_max_bytes: Option<usize>,
    /// How long shutdown waits for in-flight requests, ms [default: 30000].
    #[arg(long)]
    pub shutdown_grace_ms: Option<u64>,
    /// Log one line per request.
    #[arg(long)]
    pub request_log: bool,
    /// Async runtime worker threads [default: one per CPU].
    #[arg(long)]
    pub worker_threads: Option<usize>,
}

/// The config file: the server's keys, and at the same level every field of [`Config`].
#[derive(Debug, Default, Deserialize)]
struct File {
    data: Option<PathBuf>,
    backend: Option<String>,
    pg_table: Option<String>,
    pg_pool_size: Option<usize>,
    listen: Option<SocketAddr>,
    auth_token: Option<String>,
    max_connections: Option<usize>,
    header_timeout_ms: Option<u64>,
    body_timeout_ms: Option<u64>,
    batch_max_ops: Option<usize>,
    batch_max_bytes: Option<usize>,
    shutdown_grace_ms: Option<u64>,
    request_log: Option<bool>,
    worker_threads: Option<usize>,
    /// Every other key: the engine's, checked by `Config`'s own `deny_unknown_fields`.
    #[serde(flatten)]
    engine: toml::Table,
}

/// Where the records live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// shardlite's engine in this data directory.
    Data(PathBuf),
    /// A PostgreSQL server (the data directory is not used).
    Postgres {
        /// `postgres://...`.
        url: String,
        /// The table (`None`: `kv`).
        table: Option<String>,
        /// Hash partitions of the table (1: one plain table).
        partitions: u32,
        /// Connections in the pool (`None`: one per CPU, at least 4).
        pool_size: Option<usize>,
    },
}

/// Everything `serve` needs, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Where the records live.
    pub storage: Storage,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The settings fixed at creation that were given (an existing directory must match them).
    pub create: CreateOptions,
    /// The engine's configuration.
    pub engine: Config,
    /// The HTTP layer's options.
    pub server: ServerOptions,
    /// Async runtime worker threads (`None`: one per CPU).
    pub worker_threads: Option<usize>,
}

/// Combines the flags, the file they name (if any) and the defaults.
pub fn resolve(args: &ServeArgs) -> anyhow::Result<Settings> {
    let file = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            toml::from_str::<File>(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => File::default(),
    };
    let mut engine_keys = file.engine;
    let create_keys: toml::Table = ["partitions", "index", "hash_seed", "fingerprint_bits"]
        .into_iter()
        .filter_map(|k| engine_keys.remove_entry(k))
        .collect();
    let in_file = |what: &str| match &args.config {
        Some(path) => format!("{what} in {}", path.display()),
        None => what.to_owned(),
    };
    let mut create: CreateOptions = create_keys.try_into().with_context(|| in_file("settings of a new directory"))?;
    let mut engine: Config = engine_keys.try_into().with_context(|| in_file("engine settings"))?;
    let flags = &args.engine;
    create.partitions = flags.partitions.or(create.partitions);
    create.index = flags.index.or(create.index);
    create.hash_seed = flags.hash_seed.or(create.hash_seed);
    create.validate()?;
    macro_rules! flags_win {
        ($($field:ident),+ $(,)?) => {$(
            if let Some(v) = flags.$field.clone() {
                engine.$field = v;
            }
        )+};
    }
    flags_win!(
        journal,
        synchronous,
        commit_log,
        log_segment_mib,
        page_size,
        mmap_size,
        cache_size_kib,
        transaction,
        max_value,
        writer_threads,
        queue_capacity,
        max_batch,
        max_linger_us,
        lookup_threads,
        record_cache_mib,
        readers_per_partition,
        checkpoint_pages,
        merge_threshold,
    );
    engine.accept_wal_loss |= flags.accept_wal_loss;
    engine.validate()?;

    let s = &args.server;
    let defaults = ServerOptions::default();
    let ms =
        |flag: Option<u64>, file: Option<u64>, default: Duration| flag.or(file).map_or(default, Duration::from_millis);
    let server = ServerOptions {
        auth_token: s.auth_token.clone().or(file.auth_token),
        max_connections: s.max_connections.or(file.max_connections).unwrap_or(defaults.max_connections),
        header_timeout: ms(s.header_timeout_ms, file.header_timeout_ms, defaults.header_timeout),
        body_timeout: ms(s.body_timeout_ms, file.body_timeout_ms, defaults.body_timeout),
        batch_max_ops: s.batch_max_ops.or(file.batch_max_ops).unwrap_or(defaults.batch_max_ops),
        batch_max_bytes: s.batch_max_bytes.or(file.batch_max_bytes).unwrap_or(defaults.batch_max_bytes),
        request_log: s.request_log || file.request_log.unwrap_or(defaults.request_log),
        shutdown_grace: ms(s.shutdown_grace_ms, file.shutdown_grace_ms, defaults.shutdown_grace),
    };
    anyhow::ensure!(server.max_connections > 0, "max_connections must be at least 1");
    anyhow::ensure!(server.auth_token.as_deref() != Some(""), "auth_token must not be empty");
    let storage = match (args.backend.clone().or(file.backend), args.data.clone().or(file.data)) {
        (Some(_), Some(_)) => anyhow::bail!("give a data directory (--data) or a --backend URL, not both"),
        (Some(url), None) => {
            anyhow::ensure!(
                url.starts_with("postgres://") || url.starts_with("postgresql://"),
                "--backend takes a PostgreSQL URL: postgres://USER@HOST:PORT/DB"
            );
            let pool_size = args.pg_pool_size.or(file.pg_pool_size);
            anyhow::ensure!(pool_size != Some(0), "pg_pool_size must be at least 1");
            let table = args.pg_table.clone().or(file.pg_table);
            let partitions = create.partitions.unwrap_or(1);
            Storage::Postgres { url, table, partitions, pool_size }
        }
        (None, Some(dir)) => {
            anyhow::ensure!(
                args.pg_table.is_none() && file.pg_table.is_none(),
                "pg_table needs --backend postgres://..."
            );
            Storage::Data(dir)
        }
        (None, None) => anyhow::bail!(
            "no data directory: pass --data DIR (or `data` in the config file), or --backend postgres://..."
        ),
    };
    let listen = match args.listen.or(file.listen) {
        Some(addr) => addr,
        None => DEFAULT_LISTEN.parse()?,
    };
    Ok(Settings { storage, listen, create, engine, server, worker_threads: s.worker_threads.or(file.worker_threads) })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Command};

    fn parse(argv: &[&str]) -> anyhow::Result<Settings> {
        let cli = Cli::try_parse_from(["shardlite", "serve"].iter().chain(argv))?;
        let Command::Serve(args) = cli.command else { panic!("not serve") };
        resolve(&args)
    }

    fn write_config(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn defaults_bind_loopback_and_use_the_engine_defaults() {
        let s = parse(&["--data", "/tmp/d"]).unwrap();
        assert_eq!(s.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(s.storage, Storage::Data(PathBuf::from("/tmp/d")));
        assert_eq!(s.engine, Config::default());
        assert_eq!(s.server, ServerOptions::default());
        assert_eq!(s.create, CreateOptions::default(), "no setting of a new directory given");
        assert_eq!(s.worker_threads, None);
    }

    #[test]
    fn every_engine_flag_reaches_the_config() {
        let s = parse(&[
            "--data",
            "d",
            "--partitions",
            "16",
            "--index",
            "sqlite",
            "--hash-seed",
            "7",
            "--journal",
            "delete",
            "--synchronous",
            "normal",
            "--commit-log",
            "false",
            "--log-segment-mib",
            "8",
            "--page-size",
            "1024",
            "--mmap-size",
            "4096",
            "--cache-size-kib",
            "64",
            "--tx",
            "deferred",
            "--max-value",
            "100",
            "--writer-threads",
            "3",
            "--queue-capacity",
            "9",
            "--max-batch",
            "1",
            "--max-linger-us",
            "250",
            "--lookup-threads",
            "5",
            "--record-cache-mib",
            "7",
            "--readers-per-partition",
            "1",
            "--checkpoint-pages",
            "100",
            "--merge-threshold",
            "1000",
            "--accept-wal-loss",
        ])
        .unwrap();
        let want = Config {
            journal: JournalMode::Delete,
            synchronous: Synchronous::Normal,
            commit_log: false,
            log_segment_mib: 8,
            page_size: 1024,
            mmap_size: 4096,
            cache_size_kib: 64,
            transaction: TxMode::Deferred,
            max_value: 100,
            writer_threads: 3,
            queue_capacity: 9,
            max_batch: 1,
            max_linger_us: 250,
            lookup_threads: 5,
            record_cache_mib: 7,
            readers_per_partition: 1,
            checkpoint_pages: 100,
            merge_threshold: 1000,
            accept_wal_loss: true,
        };
        assert_eq!(s.engine, want);
        let create = CreateOptions {
            partitions: Some(16),
            index: Some(IndexMode::Sqlite),
            hash_seed: Some(7),
            ..CreateOptions::default()
        };
        assert_eq!(s.create, create);
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let file = write_config(
            r#"
            data = "/from/file"
            listen = "127.0.0.1:9999"
            auth_token = "file-token"
            max_connections = 50
            header_timeout_ms = 1500
            request_log = true
            worker_threads = 3
            synchronous = "off"
            max_batch = 64
            transaction = "deferred"
            "#,
        );
        let path = file.path().to_str().unwrap();
        let s = parse(&["--config", path, "--max-batch", "1", "--listen", "127.0.0.1:7000", "--auth-token", "flag"])
            .unwrap();
        assert_eq!(s.engine.max_batch, 1, "the flag wins");
        assert_eq!(s.engine.synchronous, Synchronous::Off, "the file beats the default");
        assert_eq!(s.engine.transaction, TxMode::Deferred);
        assert_eq!(s.create, CreateOptions::default(), "the default fills the rest");
        assert_eq!(s.listen, "127.0.0.1:7000".parse().unwrap());
        assert_eq!(s.storage, Storage::Data(PathBuf::from("/from/file")));
        assert_eq!(s.server.auth_token.as_deref(), Some("flag"));
        assert_eq!(s.server.max_connections, 50);
        assert_eq!(s.server.header_timeout, Duration::from_millis(1500));
        assert_eq!(s.server.body_timeout, ServerOptions::default().body_timeout);
        assert!(s.server.request_log);
        assert_eq!(s.worker_threads, Some(3));
    }

    #[test]
    fn fixed_settings_in_the_file_count_as_given() {
        let file = write_config("partitions = 4\n");
        let s = parse(&["--data", "d", "--config", file.path().to_str().unwrap()]).unwrap();
        assert_eq!(s.create, CreateOptions { partitions: Some(4), ..CreateOptions::default() });
    }

    #[test]
    fn a_postgres_backend_replaces_the_data_directory() {
        let url = "postgres://me@127.0.0.1:5432/db";
        let s = parse(&["--backend", url]).unwrap();
        let pg = |table: Option<&str>, partitions, pool_size| Storage::Postgres {
            url: url.to_owned(),
            table: table.map(str::to_owned),
            partitions,
            pool_size,
        };
        assert_eq!(s.storage, pg(None, 1, None));
        let s = parse(&["--backend", url, "--partitions", "8", "--pg-pool-size", "16", "--pg-table", "run1"]).unwrap();
        assert_eq!(s.storage, pg(Some("run1"), 8, Some(16)));
        let file = write_config(&format!("backend = \"{url}\"\npg_pool_size = 3\npg_table = \"t\"\n"));
        let s = parse(&["--config", file.path().to_str().unwrap()]).unwrap();
        assert_eq!(s.storage, pg(Some("t"), 1, Some(3)));
        assert!(parse(&["--data", "d", "--pg-table", "t"]).unwrap_err().to_string().contains("needs --backend"));
        assert!(parse(&["--backend", url, "--data", "d"]).unwrap_err().to_string().contains("not both"));
        assert!(parse(&["--backend", "mysql://x"]).unwrap_err().to_string().contains("PostgreSQL URL"));
        assert!(parse(&["--backend", url, "--pg-pool-size", "0"]).is_err());
    }

    #[test]
    fn bad_input_is_refused_with_a_reason() {
        let unknown = write_config("no_such_knob = 1\n");
        let err = parse(&["--data", "d", "--config", unknown.path().to_str().unwrap()]).unwrap_err();
        assert!(format!("{err:#}").contains("no_such_knob"), "{err:#}");
        let err = parse(&[]).unwrap_err();
        assert!(err.to_string().contains("--data"), "{err}");
        let err = parse(&["--data", "d", "--page-size", "3000"]).unwrap_err();
        assert!(err.to_string().contains("page_size"), "{err}");
        assert!(parse(&["--data", "d", "--synchronous", "fast"]).is_err());
        assert!(parse(&["--data", "d", "--auth-token", ""]).is_err());
    }
}
