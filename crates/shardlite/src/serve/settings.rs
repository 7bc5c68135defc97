//! `shardlite serve`'s settings. Each is declared once, as a field of the layer it belongs to,
//! whose doc line is its flag's help:
//!
//! | layer | declared in | `--help` heading |
//! |---|---|---|
//! | where the records are: a data directory or PostgreSQL | [`StorageFlags`] (here) | Options |
//! | where to listen | [`ServeOptions`] (here) | Options |
//! | what a new data directory is created with | [`CreateOptions`] (engine) | Engine |
//! | the engine at run time | [`Config`] (engine) | Engine |
//! | the HTTP layer | [`ServerOptions`] (server) | HTTP |
//! | the async runtime | [`RuntimeOptions`] (here) | HTTP |
//! | the logs | [`LogOptions`] (here) | Logs |
//! | where the cluster map is (etcd) | [`EtcdOptions`] (`crate::cluster::etcd`) | Cluster |
//! | serving as a node of a cluster | [`ClusterOptions`] (here) | Cluster |
//!
//! From that one declaration come the flag (`--max-batch`), its environment variable
//! (`SHARDLITE_MAX_BATCH`), its key in the `--config` TOML file (`max_batch`, at the top level)
//! and, from the layer's `Default`, the default `--help` shows ([`layer`]). Flags win over the
//! environment, the environment over the file, the file over the defaults: the file is read
//! into each layer (the layer's defaults fill what it leaves out), then the flags and variables
//! that were given overwrite their fields ([`File::layer`]), so the merge names no setting.

use std::{net::SocketAddr, path::PathBuf};

use anyhow::Context;
use clap::{parser::ValueSource, ArgMatches, Args, Command, FromArgMatches};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use shardlite_engine::{Config, CreateOptions};
use shardlite_server::{auth::TokenSource, ServerOptions};

use crate::{
    cluster::{etcd::EtcdOptions, node::NodeSettings},
    litestream::config::replica_url,
    logging::LogFormat,
};

/// Where the records are: a data directory, or (with the `postgres` feature) a PostgreSQL table.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageFlags {
    /// Data directory; created on first start.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Serve from PostgreSQL instead of a data directory: postgres://USER[:PASSWORD]@HOST:PORT/DB.
    /// Uses (and creates) the table `kv` (or --pg-table), hash-partitioned if --partitions is given.
    #[cfg(feature = "postgres")]
    #[arg(long, value_name = "URL")]
    pub backend: Option<String>,
    /// The PostgreSQL table: lowercase letters, digits and _.
    #[cfg(feature = "postgres")]
    #[arg(long, value_name = "NAME")]
    pub pg_table: Option<String>,
    /// Connections of the PostgreSQL pool (unless given: one per CPU, at least 4).
    #[cfg(feature = "postgres")]
    #[arg(long)]
    pub pg_pool_size: Option<usize>,
}

impl StorageFlags {
    /// The defaults `--help` shows (those the storage applies when not given).
    fn shown() -> Self {
        #[cfg(feature = "postgres")]
        return Self { pg_table: Some(shardlite_postgres::DEFAULT_TABLE.into()), ..Self::default() };
        #[cfg(not(feature = "postgres"))]
        Self::default()
    }
}

/// Where `serve` listens.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeOptions {
    /// Address to listen on.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Allow a non-loopback --listen without any token: every route open to the network.
    #[arg(long)]
    pub insecure_no_auth: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        // Loopback only unless told otherwise.
        Self { listen: SocketAddr::from(([127, 0, 0, 1], 8080)), insecure_no_auth: false }
    }
}

/// The async runtime serving HTTP.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
#[command(next_help_heading = "HTTP")]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeOptions {
    /// Async runtime worker threads (unless given: one per CPU).
    #[arg(long)]
    pub worker_threads: Option<usize>,
}

/// The process's logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
#[command(next_help_heading = "Logs")]
#[serde(default, deny_unknown_fields)]
pub struct LogOptions {
    /// Log lines as text or as JSON objects (colours only when stderr is a terminal).
    #[arg(long, value_enum)]
    pub log_format: LogFormat,
    /// Append one line per request to this file (as --request-log logs them to stderr).
    #[arg(long, value_name = "FILE")]
    pub access_log: Option<PathBuf>,
}

/// Serving as a node of a cluster (docs/cluster.md).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
#[command(next_help_heading = "Cluster")]
#[serde(default, deny_unknown_fields)]
pub struct ClusterOptions {
    /// Serve as a node of the cluster whose map is in etcd (--etcd): this node's partitions
    /// here, the others' requests forwarded to their owners.
    #[arg(long)]
    pub cluster: bool,
    /// This node's id in the cluster map.
    #[arg(long, value_name = "ID")]
    pub node_id: Option<String>,
    /// For another node's partition, answer 421 Misdirected Request naming the owner instead of
    /// forwarding the request to it.
    #[arg(long)]
    pub redirect: bool,
    /// Seconds of this node's lease in etcd: this long after the node stops renewing it
    /// (killed, frozen, cut off from etcd) it has stopped serving its partitions, and the other
    /// nodes see it dead (etcd's minimum: 2).
    #[arg(long, value_name = "SECONDS")]
    pub lease_ttl: u64,
    /// When another node loses its lease, fail its partitions over to the live nodes (restored
    /// from its Litestream replica); one live node runs each failover.
    #[arg(long)]
    pub auto_failover: bool,
    /// Where this node's Litestream replicates its partitions (the --replica given to
    /// `litestream-config`: a directory or a URL); recorded in etcd, so that a failover
    /// restores this node's partitions from there.
    #[arg(long, value_name = "URL")]
    pub litestream_replica: Option<String>,
    /// The litestream binary this node restores a dead node's partitions with (a name is looked
    /// up on PATH).
    #[arg(long, value_name = "PATH")]
    pub litestream_bin: PathBuf,
    /// With replicas (`cluster init --copies`): how long a write waits for the cluster's
    /// `acks` copies to hold it before it fails with 503 `unreplicated` (rolled back).
    #[arg(long, value_name = "MS")]
    pub replication_timeout_ms: u64,
    /// With replicas: a write that fewer than `acks` copies held within the timeout (or whose
    /// copy nodes are known unreachable) is acknowledged anyway, held by fewer copies, instead
    /// of failing with 503 `unreplicated`; `/readyz`, `/stats` and metrics say so. A failover
    /// may then lose it.
    #[arg(long)]
    pub degrade_to_async: bool,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            cluster: false,
            node_id: None,
            redirect: false,
            lease_ttl: 5,
            auto_failover: false,
            litestream_replica: None,
            litestream_bin: "litestream".into(),
            replication_timeout_ms: 2000,
            degrade_to_async: false,
        }
    }
}

/// The `--config` flag: the TOML file, which is no key of itself.
#[derive(Debug, Clone, Default, clap::Args, Serialize)]
struct ConfigFile {
    /// TOML file with any of these settings (flags win over it).
    #[arg(long)]
    config: Option<PathBuf>,
}

/// The flags of `shardlite serve` as given (with their environment variables); [`resolve`]
/// combines them with the file and the defaults.
#[derive(Debug, Clone)]
pub struct ServeArgs(ArgMatches);

impl FromArgMatches for ServeArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(Self(matches.clone()))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.0 = matches.clone();
        Ok(())
    }
}

impl Args for ServeArgs {
    fn augment_args(cmd: Command) -> Command {
        let cmd = layer(cmd, &StorageFlags::shown());
        let cmd = layer(cmd, &ServeOptions::default());
        let cmd = layer(cmd, &ConfigFile::default());
        let cmd = layer(cmd, &CreateOptions::defaults());
        let cmd = layer(cmd, &Config::default());
        let cmd = layer(cmd, &ServerOptions::default());
        let cmd = layer(cmd, &RuntimeOptions::default());
        let cmd = layer(cmd, &LogOptions::default());
        let cmd = layer(cmd, &EtcdOptions::default());
        layer(cmd, &ClusterOptions::default())
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// Adds the flags of layer `T` to `cmd`, each with its environment variable (`SHARDLITE_` and
/// the flag's name) and, where `defaults` has one, its default for `--help`. No flag is
/// required: what is not given comes from the file or the defaults.
fn layer<T: Args + Serialize>(cmd: Command, defaults: &T) -> Command {
    let before: Vec<clap::Id> = cmd.get_arguments().map(|a| a.get_id().clone()).collect();
    let cmd = T::augment_args(cmd);
    let added: Vec<clap::Id> =
        cmd.get_arguments().map(|a| a.get_id().clone()).filter(|id| !before.contains(id)).collect();
    let defaults = toml::Table::try_from(defaults).unwrap_or_default();
    added.into_iter().fold(cmd, |cmd, id| {
        cmd.mut_arg(&id, |arg| {
            let name = arg.get_long().unwrap_or(id.as_str()).replace('-', "_").to_uppercase();
            let arg = arg.env(format!("SHARDLITE_{name}")).hide_env_values(true).required(false);
            match defaults.get(id.as_str()) {
                Some(value) if arg.get_action().takes_values() => arg.default_value(text(value)),
                _ => arg,
            }
        })
    })
}

/// A default as `--help` shows it (strings without their TOML quotes).
fn text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Where the records live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// shardlite's engine in this data directory.
    Data(PathBuf),
    /// A PostgreSQL server (the data directory is not used).
    #[cfg(feature = "postgres")]
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
    pub serve: ServeOptions,
    /// The settings fixed at creation that were given (an existing directory must match them).
    pub create: CreateOptions,
    /// The engine's configuration.
    pub engine: Config,
    /// The HTTP layer's options.
    pub server: ServerOptions,
    /// The async runtime.
    pub runtime: RuntimeOptions,
    /// The logs.
    pub log: LogOptions,
    /// The cluster this server is a node of, if any.
    pub cluster: Option<NodeSettings>,
    /// Whether the token was given as a flag (which `ps` shows): worth a warning.
    pub token_on_command_line: bool,
}

/// Combines the flags and environment variables, the file they name (if any) and the defaults.
pub fn resolve(args: &ServeArgs) -> anyhow::Result<Settings> {
    let mut matches = args.0.clone();
    // What only a default said is left to the file (and, if it is silent, the same default).
    let defaulted: Vec<clap::Id> = matches
        .ids()
        .filter(|id| matches.value_source(id.as_str()) == Some(ValueSource::DefaultValue))
        .cloned()
        .collect();
    for id in defaulted {
        matches.try_clear_id(id.as_str())?;
    }
    let file = File::read(matches.get_one::<PathBuf>("config").cloned())?;
    file.refuse_unknown_keys()?;
    let stored: StorageFlags = file.layer(&matches)?;
    let serve: ServeOptions = file.layer(&matches)?;
    let create: CreateOptions = file.layer(&matches)?;
    let engine: Config = file.layer(&matches)?;
    let server: ServerOptions = file.layer(&matches)?;
    let runtime: RuntimeOptions = file.layer(&matches)?;
    let log: LogOptions = file.layer(&matches)?;
    let etcd: EtcdOptions = file.layer(&matches)?;
    let cluster: ClusterOptions = file.layer(&matches)?;
    create.validate()?;
    engine.validate()?;
    anyhow::ensure!(server.max_connections > 0, "max_connections must be at least 1");
    let mut server = server;
    // The access log holds the request lines: the server must write them.
    server.request_log |= log.access_log.is_some();
    anyhow::ensure!(server.auth_token.as_deref() != Some(""), "auth_token must not be empty");
    anyhow::ensure!(
        server.auth_token.is_none() || server.auth_token_file.is_none(),
        "give auth_token or auth_token_file, not both"
    );
    server.tls_files().map_err(anyhow::Error::msg)?;
    // Client certificates authenticate too: only holders of one signed by the CA connect.
    let authenticated = server.token_source() != TokenSource::None || server.tls_client_ca.is_some();
    anyhow::ensure!(
        serve.listen.ip().is_loopback() || authenticated || serve.insecure_no_auth,
        "refusing to listen on {} (not a loopback address) without a token: give --auth-token-file FILE \
         (or SHARDLITE_AUTH_TOKEN, or --tls-client-ca), or --insecure-no-auth to serve every route to the \
         network",
        serve.listen
    );
    let storage = storage(stored, &create)?;
    let cluster = node_settings(cluster, etcd, &storage, &server)?;
    let token_on_command_line = args.0.value_source("auth_token") == Some(ValueSource::CommandLine);
    Ok(Settings { storage, serve, create, engine, server, runtime, log, cluster, token_on_command_line })
}

/// The cluster settings, if `--cluster` was given (with what it needs); the cluster flags
/// without it are refused rather than ignored.
fn node_settings(
    cluster: ClusterOptions,
    etcd: EtcdOptions,
    storage: &Storage,
    server: &ServerOptions,
) -> anyhow::Result<Option<NodeSettings>> {
    if !cluster.cluster {
        let defaults = ClusterOptions::default();
        anyhow::ensure!(
            cluster == defaults && etcd.etcd.is_none(),
            "node_id, redirect, lease_ttl, auto_failover, litestream_replica, litestream_bin, \
             replication_timeout_ms, degrade_to_async and etcd are settings of a cluster node: add --cluster"
        );
        return Ok(None);
    }
    let Storage::Data(data) = storage else {
        anyhow::bail!("a cluster node serves a data directory (--data), not --backend")
    };
    anyhow::ensure!(etcd.etcd.is_some(), "--cluster needs --etcd http://HOST:PORT[,...]: where the cluster map is");
    anyhow::ensure!(
        cluster.lease_ttl >= 2,
        "--lease-ttl {}: etcd grants leases of 2 seconds or more",
        cluster.lease_ttl
    );
    anyhow::ensure!(cluster.replication_timeout_ms > 0, "--replication-timeout-ms must be above 0");
    let node_id = cluster.node_id.context("--cluster needs --node-id ID: this node's id in the cluster map")?;
    let litestream_replica = cluster.litestream_replica.as_deref().map(replica_url).transpose()?;
    Ok(Some(NodeSettings {
        etcd,
        node_id,
        redirect: cluster.redirect,
        lease_ttl: std::time::Duration::from_secs(cluster.lease_ttl),
        auto_failover: cluster.auto_failover,
        litestream_replica,
        litestream_bin: cluster.litestream_bin,
        node_token: shardlite_server::auth::node_token(&server.token_source()).map_err(anyhow::Error::msg)?,
        node_ca: server.node_ca.clone(),
        scratch: data.join(".takeover"),
        replication: shardlite_server::ReplicationPolicy {
            timeout: std::time::Duration::from_millis(cluster.replication_timeout_ms),
            degrade_to_async: cluster.degrade_to_async,
        },
    }))
}

/// Where the records live: the data directory, or PostgreSQL's URL.
#[cfg(feature = "postgres")]
fn storage(pg: StorageFlags, create: &CreateOptions) -> anyhow::Result<Storage> {
    Ok(match (pg.backend, pg.data) {
        (Some(_), Some(_)) => anyhow::bail!("give a data directory (--data) or a --backend URL, not both"),
        (Some(url), None) => {
            anyhow::ensure!(
                url.starts_with("postgres://") || url.starts_with("postgresql://"),
                "--backend takes a PostgreSQL URL: postgres://USER@HOST:PORT/DB"
            );
            anyhow::ensure!(pg.pg_pool_size != Some(0), "pg_pool_size must be at least 1");
            let partitions = create.partitions.unwrap_or(1);
            Storage::Postgres { url, table: pg.pg_table, partitions, pool_size: pg.pg_pool_size }
        }
        (None, Some(dir)) => {
            anyhow::ensure!(pg.pg_table.is_none(), "pg_table needs --backend postgres://...");
            Storage::Data(dir)
        }
        (None, None) => anyhow::bail!(
            "no data directory: pass --data DIR (or `data` in the config file), or --backend postgres://..."
        ),
    })
}

/// Where the records live: the data directory.
#[cfg(not(feature = "postgres"))]
fn storage(stored: StorageFlags, _: &CreateOptions) -> anyhow::Result<Storage> {
    let data = stored.data.context("no data directory: pass --data DIR (or `data` in the config file)")?;
    Ok(Storage::Data(data))
}

/// The `--config` file: every key at the top level, each a field of one layer.
struct File {
    /// What the file says (empty without a file).
    table: toml::Table,
    /// The file's name, for messages.
    name: String,
}

impl File {
    /// Reads the file at `path`, if any.
    fn read(path: Option<PathBuf>) -> anyhow::Result<Self> {
        let Some(path) = path else { return Ok(Self { table: toml::Table::new(), name: String::new() }) };
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let table = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        Ok(Self { table, name: path.display().to_string() })
    }

    /// Refuses a key that is no layer's, naming the nearest key of any layer.
    fn refuse_unknown_keys(&self) -> anyhow::Result<()> {
        let known = known_keys();
        let Some(unknown) = self.table.keys().find(|k| !known.contains(&k.as_str())) else { return Ok(()) };
        let nearest = known
            .iter()
            .map(|k| (strsim::jaro_winkler(unknown, k), *k))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .filter(|(likeness, _)| *likeness > 0.8);
        match nearest {
            Some((_, key)) => anyhow::bail!("{}: unknown key `{unknown}`; did you mean `{key}`?", self.name),
            None => anyhow::bail!("{}: unknown key `{unknown}` (the keys: {})", self.name, known.join(", ")),
        }
    }

    /// Layer `T`: the file's keys of it over its defaults, then the flags and environment
    /// variables that were given (`matches` holds nothing that came from a default).
    fn layer<T: DeserializeOwned + FromArgMatches>(&self, matches: &ArgMatches) -> anyhow::Result<T> {
        let keys = fields::<T>();
        let table: toml::Table = self
            .table
            .iter()
            .filter(|(k, _)| keys.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut layer: T = table.try_into().with_context(|| format!("in {}", self.name))?;
        layer.update_from_arg_matches(matches)?;
        Ok(layer)
    }
}

/// Every key the file may hold: the fields of every layer.
fn known_keys() -> Vec<&'static str> {
    [
        fields::<StorageFlags>(),
        fields::<ServeOptions>(),
        fields::<CreateOptions>(),
        fields::<Config>(),
        fields::<ServerOptions>(),
        fields::<RuntimeOptions>(),
        fields::<LogOptions>(),
        fields::<EtcdOptions>(),
        fields::<ClusterOptions>(),
    ]
    .concat()
}

/// The fields of `T` as its TOML keys (serde's names), which serde hands a deserializer of a
/// struct: read by one that reads nothing else.
fn fields<T: DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{self, Visitor};

    struct Fields<'a>(&'a mut &'static [&'static str]);

    impl<'de> de::Deserializer<'de> for Fields<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("only the fields were asked for"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }

    let mut names: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut names));
    names
}

#[cfg(test)]
mod tests {
    use std::{sync::Mutex, time::Duration};

    use clap::{CommandFactory, Parser};
    use shardlite_engine::{IndexMode, JournalMode, Synchronous, TxMode};

    use super::*;
    use crate::{Cli, Command};

    /// The environment is the process's: tests that read it take turns with the one that sets it.
    static ENVIRONMENT: Mutex<()> = Mutex::new(());

    fn parse(argv: &[&str]) -> anyhow::Result<Settings> {
        let _turn = ENVIRONMENT.lock().unwrap_or_else(|p| p.into_inner());
        parse_now(argv)
    }

    fn parse_now(argv: &[&str]) -> anyhow::Result<Settings> {
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
        assert_eq!(s.serve.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(s.storage, Storage::Data(PathBuf::from("/tmp/d")));
        assert_eq!(s.engine, Config::default());
        assert_eq!(s.server, ServerOptions::default());
        assert_eq!(s.create, CreateOptions::default(), "no setting of a new directory given");
        assert_eq!(s.runtime.worker_threads, None);
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
            "--memory-budget-mib",
            "96",
            "--cache-size-kib",
            "64",
            "--tx",
            "deferred",
            "--max-value",
            "100",
            "--writer-threads",
            "3",
            "--inline-writes-below",
            "4",
            "--queue-capacity",
            "9",
            "--max-batch",
            "1",
            "--max-linger-us",
            "250",
            "--hold-groups",
            "2",
            "--hold-kib",
            "32",
            "--lookup-threads",
            "5",
            "--inline-read-us",
            "0",
            "--record-cache-mib",
            "7",
            "--readers-per-partition",
            "1",
            "--checkpoint-pages",
            "100",
            "--idle-wal-secs",
            "5",
            "--litestream",
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
            memory_budget_mib: Some(96),
            cache_size_kib: 64,
            transaction: TxMode::Deferred,
            max_value: 100,
            writer_threads: 3,
            inline_writes_below: 4,
            queue_capacity: 9,
            max_batch: 1,
            max_linger_us: 250,
            hold_groups: 2,
            hold_kib: 32,
            lookup_threads: 5,
            inline_read_us: 0,
            record_cache_mib: 7,
            readers_per_partition: 1,
            checkpoint_pages: 100,
            idle_wal_secs: 5,
            litestream: true,
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
            accept_wal_loss = true
            "#,
        );
        let path = file.path().to_str().unwrap();
        let s = parse(&["--config", path, "--max-batch", "1", "--listen", "127.0.0.1:7000", "--auth-token", "flag"])
            .unwrap();
        assert_eq!(s.engine.max_batch, 1, "the flag wins");
        assert_eq!(s.engine.synchronous, Synchronous::Off, "the file beats the default");
        assert_eq!(s.engine.transaction, TxMode::Deferred);
        assert!(s.engine.accept_wal_loss, "a flag not given leaves the file's true alone");
        assert_eq!(s.create, CreateOptions::default(), "the default fills the rest");
        assert_eq!(s.serve.listen, "127.0.0.1:7000".parse().unwrap());
        assert_eq!(s.storage, Storage::Data(PathBuf::from("/from/file")));
        assert_eq!(s.server.auth_token.as_deref(), Some("flag"));
        assert_eq!(s.server.max_connections, 50);
        assert_eq!(s.server.header_timeout_ms, Duration::from_millis(1500));
        assert_eq!(s.server.body_timeout_ms, ServerOptions::default().body_timeout_ms);
        assert!(s.server.request_log);
        assert_eq!(s.runtime.worker_threads, Some(3));
    }

    #[test]
    fn the_environment_wins_over_the_file_and_flags_over_the_environment() {
        let _turn = ENVIRONMENT.lock().unwrap_or_else(|p| p.into_inner());
        let file = write_config("max_batch = 64\nmax_linger_us = 5\nbody_timeout_ms = 10\n");
        let path = file.path().to_str().unwrap();
        let variables =
            [("SHARDLITE_MAX_BATCH", "8"), ("SHARDLITE_TX", "deferred"), ("SHARDLITE_BODY_TIMEOUT_MS", "20")];
        for (name, value) in variables {
            std::env::set_var(name, value);
        }
        let s = parse_now(&["--data", "d", "--config", path, "--body-timeout-ms", "30"]);
        for (name, _) in variables {
            std::env::remove_var(name);
        }
        let s = s.unwrap();
        assert_eq!(s.engine.max_batch, 8, "the environment beats the file");
        assert_eq!(s.engine.transaction, TxMode::Deferred, "a variable is named after the flag (--tx)");
        assert_eq!(s.engine.max_linger_us, 5, "the file beats the default");
        assert_eq!(s.server.body_timeout_ms, Duration::from_millis(30), "the flag beats the environment");
    }

    #[test]
    fn fixed_settings_in_the_file_count_as_given() {
        let file = write_config("partitions = 4\nfingerprint_bits = 8\n");
        let s = parse(&["--data", "d", "--config", file.path().to_str().unwrap()]).unwrap();
        let want = CreateOptions { partitions: Some(4), fingerprint_bits: Some(8), ..CreateOptions::default() };
        assert_eq!(s.create, want);
    }

    #[cfg(feature = "postgres")]
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

    #[test]
    fn a_non_loopback_address_needs_a_token_or_the_insecure_switch() {
        let err = parse(&["--data", "d", "--listen", "0.0.0.0:8080"]).unwrap_err();
        assert!(err.to_string().contains("--insecure-no-auth"), "{err}");
        assert!(parse(&["--data", "d", "--listen", "[::1]:8080"]).is_ok(), "IPv6 loopback");
        let open = parse(&["--data", "d", "--listen", "0.0.0.0:8080", "--insecure-no-auth"]).unwrap();
        assert!(open.serve.insecure_no_auth);
        let s = parse(&["--data", "d", "--listen", "10.0.0.1:8080", "--auth-token-file", "/etc/tokens"]).unwrap();
        assert_eq!(s.server.token_source(), TokenSource::File(PathBuf::from("/etc/tokens")));
        let mtls = ["--tls-cert", "c", "--tls-key", "k", "--tls-client-ca", "ca", "--listen", "0.0.0.0:8443"];
        assert!(parse(&[&["--data", "d"][..], &mtls].concat()).is_ok(), "client certificates authenticate");
        let err = parse(&["--data", "d", "--tls-cert", "c"]).unwrap_err();
        assert!(err.to_string().contains("tls_key"), "{err}");
        let err = parse(&["--data", "d", "--auth-token-file", "f", "--auth-token", "t"]).unwrap_err();
        assert!(err.to_string().contains("not both"), "{err}");
    }

    #[test]
    fn a_mistyped_key_of_any_layer_is_answered_with_the_nearest_key() {
        for (typo, key) in
            [("max_bach", "max_batch"), ("max_conections", "max_connections"), ("partition", "partitions")]
        {
            let file = write_config(&format!("{typo} = 1\n"));
            let err = parse(&["--data", "d", "--config", file.path().to_str().unwrap()]).unwrap_err();
            assert!(err.to_string().contains(&format!("unknown key `{typo}`; did you mean `{key}`?")), "{err}");
        }
    }

    #[test]
    fn every_key_is_a_flag_with_a_variable_and_help_shows_each_default_once() {
        let mut cli = Cli::command();
        let serve = cli.find_subcommand_mut("serve").unwrap();
        let help = serve.render_help().to_string();
        for key in known_keys().into_iter().filter(|k| *k != "fingerprint_bits") {
            let flag = if key == "transaction" { "tx".to_owned() } else { key.replace('_', "-") };
            let arg = serve.get_arguments().find(|a| a.get_long() == Some(flag.as_str()));
            let arg = arg.unwrap_or_else(|| panic!("no --{flag}"));
            let variable = format!("SHARDLITE_{}", flag.replace('-', "_").to_uppercase());
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(variable.as_str()), "--{flag}");
            // Tuning and test flags are hidden from --help (docs/operations.md lists them).
            if !arg.is_hide_set() {
                assert!(help.contains(&format!("--{flag}")), "no --{flag} in\n{help}");
                assert!(help.contains(&format!("[env: {variable}]")), "no {variable} in\n{help}");
            }
        }
        assert_eq!(help.matches("[default: 1024]").count(), 1, "max_connections (max_batch is hidden)\n{help}");
        assert!(help.contains("[default: 127.0.0.1:8080]") && help.contains("[default: 256]"), "{help}");
        assert!(help.contains("[possible values: hash, sqlite, none]"), "{help}");
        assert!(help.contains("[possible values: full, normal, off]"), "{help}");
        assert!(!help.contains("[default: false]"), "a switch has no default to show\n{help}");
        assert!(!help.contains("SPEC"), "{help}");
    }
}
