//! [`ServerOptions`]: what the HTTP layer is told (the engine's knobs are its own
//! [`shardlite_engine::Config`]).

use std::time::Duration;

use serde::Serialize;

/// How the server treats connections and requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerOptions {
    /// If set, every route but `/healthz` requires `Authorization: Bearer <token>`.
    #[serde(skip)] // a secret: /stats says only whether auth is on
    pub auth_token: Option<String>,
    /// Connections served at once; the server stops accepting while this many are open (the
    /// kernel's backlog holds the rest), so memory and file descriptors stay bounded.
    pub max_connections: usize,
    /// Time a client has to send a request's headers once the server waits for them; this
    /// also closes keep-alive connections idle for that long.
    #[serde(rename = "header_timeout_ms", serialize_with = "millis")]
    pub header_timeout: Duration,
    /// Time a client has to send a request's body once its headers arrived (408 after it).
    #[serde(rename = "body_timeout_ms", serialize_with = "millis")]
    pub body_timeout: Duration,
    /// Most operations in one `POST /batch`.
    pub batch_max_ops: usize,
    /// Largest `POST /batch` body, bytes.
    pub batch_max_bytes: usize,
    /// Log one line per request (`info`, target `shardlite_server::request`).
    pub request_log: bool,
    /// How long shutdown waits for in-flight requests before dropping their connections
    /// (queued writes are committed by the store's close either way).
    #[serde(rename = "shutdown_grace_ms", serialize_with = "millis")]
    pub shutdown_grace: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            auth_token: None,
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            batch_max_ops: 1000,
            batch_max_bytes: 16 << 20,
            request_log: false,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// Durations appear in `/stats` as milliseconds, like the flags that set them.
fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
