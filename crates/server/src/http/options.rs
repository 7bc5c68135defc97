//! [`ServerOptions`]: what the HTTP layer is told (the engine's knobs are its own
//! [`shardlite_engine::Config`]). Each field's doc line is also its `shardlite serve` flag's
//! help; the name `/stats` and the TOML file give it is its flag's, with `_` for `-`.

use std::{path::PathBuf, time::Duration};

use super::{auth::TokenSource, tls::TlsFiles};

use serde::{Deserialize, Serialize};

/// How the server treats connections and requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "HTTP"))]
#[serde(default, deny_unknown_fields)]
pub struct ServerOptions {
    /// One bearer token holding every role (better: --auth-token-file, or this variable, as a
    /// flag shows the token to every user of the machine).
    #[serde(skip_serializing)] // a secret: /stats says only whether auth is on
    #[cfg_attr(feature = "cli", arg(long, value_name = "TOKEN"))]
    pub auth_token: Option<String>,
    /// File of bearer tokens, one `ROLE TOKEN` a line (roles: read, write, admin, metrics, node);
    /// re-read on SIGHUP.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub auth_token_file: Option<PathBuf>,
    /// Serve HTTPS with this certificate chain (PEM; re-read on SIGHUP). Needs --tls-key.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by these CAs (PEM): mutual TLS.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub tls_client_ca: Option<PathBuf>,
    /// Trust these CAs (PEM) for the certificates of the other nodes of a cluster whose
    /// addresses are https:// (besides the system's roots).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub node_ca: Option<PathBuf>,
    /// Connections served at once.
    // The server stops accepting while this many are open (the kernel's backlog holds the
    // rest), so memory and file descriptors stay bounded.
    #[cfg_attr(feature = "cli", arg(long))]
    pub max_connections: usize,
    /// Time to receive a request's headers (also the keep-alive idle limit), ms.
    #[serde(with = "millis")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "MS", value_parser = millis::parse))]
    pub header_timeout_ms: Duration,
    /// Time to receive a request's body, ms.
    // Counted once its headers arrived; 408 after it.
    #[serde(with = "millis")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "MS", value_parser = millis::parse))]
    pub body_timeout_ms: Duration,
    /// Most operations in one POST /batch.
    #[cfg_attr(feature = "cli", arg(long))]
    pub batch_max_ops: usize,
    /// Largest POST /batch body, bytes.
    #[cfg_attr(feature = "cli", arg(long))]
    pub batch_max_bytes: usize,
    /// How long shutdown waits for in-flight requests, ms.
    // Then their connections are dropped; queued writes are committed by the store's close
    // either way.
    #[serde(with = "millis")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "MS", value_parser = millis::parse))]
    pub shutdown_grace_ms: Duration,
    /// Longest a partition move may hold the partition's writes on a cluster node, ms: the
    /// last round of changes and the map's change; past it the move fails, the map unchanged.
    #[serde(with = "millis")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "MS", value_parser = millis::parse))]
    pub move_freeze_timeout_ms: Duration,
    /// For tests only: a cluster node waits this long between deciding to serve a read of its
    /// own partition (GET or HEAD of /kv, /keys, /export) and reading it, ms; 0 (the
    /// default): never.
    // Widens the moment a partition move's flip can fall into, so that tests meet it at will.
    #[serde(with = "millis")]
    #[cfg_attr(feature = "cli", arg(hide = true, long, value_name = "MS", value_parser = millis::parse))]
    pub test_read_pause_ms: Duration,
    /// Log one line per request.
    // At `info`, target `shardlite_server::request`.
    #[cfg_attr(feature = "cli", arg(long))]
    pub request_log: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            auth_token: None,
            auth_token_file: None,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            node_ca: None,
            max_connections: 1024,
            header_timeout_ms: Duration::from_secs(10),
            body_timeout_ms: Duration::from_secs(30),
            batch_max_ops: 1000,
            batch_max_bytes: 16 << 20,
            request_log: false,
            shutdown_grace_ms: Duration::from_secs(30),
            move_freeze_timeout_ms: Duration::from_secs(1),
            test_read_pause_ms: Duration::ZERO,
        }
    }
}

impl ServerOptions {
    /// The TLS files, if the server speaks TLS; an error for a partial set.
    pub fn tls_files(&self) -> Result<Option<TlsFiles>, String> {
        match (&self.tls_cert, &self.tls_key, &self.tls_client_ca) {
            (Some(cert), Some(key), client_ca) => {
                Ok(Some(TlsFiles { cert: cert.clone(), key: key.clone(), client_ca: client_ca.clone() }))
            }
            (None, None, None) => Ok(None),
            (Some(_), None, _) => Err("tls_cert needs tls_key".into()),
            (None, Some(_), _) => Err("tls_key needs tls_cert".into()),
            (None, None, Some(_)) => Err("tls_client_ca needs tls_cert and tls_key".into()),
        }
    }

    /// Where the bearer tokens come from: the file if one is named, else the one token.
    pub fn token_source(&self) -> TokenSource {
        match (&self.auth_token_file, &self.auth_token) {
            (Some(file), _) => TokenSource::File(file.clone()),
            (None, Some(token)) => TokenSource::Single(token.clone()),
            (None, None) => TokenSource::None,
        }
    }
}

/// Durations appear as milliseconds in `/stats`, the TOML file and the flags.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }

    /// A flag's value.
    #[cfg(feature = "cli")]
    pub fn parse(text: &str) -> Result<Duration, std::num::ParseIntError> {
        text.parse().map(Duration::from_millis)
    }
}
