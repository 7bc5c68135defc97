//! A server for a test: a store in a temporary directory (small and without fsync unless the
//! test says otherwise), served by `shardlite_server::run` on a free loopback port until the
//! test ends; and its metrics.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;

use shardlite_engine::{Config, CreateOptions, Store, Synchronous};
use shardlite_server::{ServerOptions, SqliteBackend};
use tokio::{net::TcpListener, sync::oneshot};

/// A running server; stopped (its store closed) when dropped.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Reads `/metrics`: one pooled connection, reused, so that the server counts one
    /// connection of the test's own while it answers.
    metrics: hyper_util::client::legacy::Client<HttpConnector, Empty<Bytes>>,
    _stop: oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

/// A small, fast configuration: 4 partitions, no fsync (durability is the engine's tests').
pub fn fast() -> (CreateOptions, Config) {
    let config = Config { synchronous: Synchronous::Off, writer_threads: 2, lookup_threads: 2, ..Config::default() };
    (CreateOptions { partitions: Some(4), ..CreateOptions::default() }, config)
}

impl TestServer {
    /// A server of the [`fast`] configuration.
    pub async fn start() -> Self {
        let (create, config) = fast();
        Self::with(create, config, ServerOptions::default()).await
    }

    /// A server over a new directory created with `create`, run with `config` and `options`.
    pub async fn with(create: CreateOptions, config: Config, options: ServerOptions) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path(), create, config).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let backend = Arc::new(SqliteBackend::new(Arc::new(store)));
        tokio::spawn(shardlite_server::run(listener, backend, options, async {
            let _ = stopped.await;
        }));
        let metrics = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_max_idle_per_host(1)
            .build_http();
        Self { url, metrics, _stop: stop, _dir: dir }
    }

    /// A client of this server with the default settings.
    pub fn client(&self) -> shardlite_client::Client {
        shardlite_client::Client::new(&self.url).unwrap()
    }

    /// Requests the server answered with `status` on `method /kv/{key}`, from `/metrics`.
    pub async fn answered(&self, method: &str, status: u16) -> u64 {
        self.metric(&format!(
            "shardlite_http_request_duration_seconds_count{{route=\"/kv/{{key}}\",method=\"{method}\",status=\"{status}\"}}"
        ))
        .await
    }

    /// The HTTP connections the server has open, not counting the test's own.
    pub async fn connections_open(&self) -> u64 {
        self.metric("shardlite_http_connections_open").await - 1
    }

    /// The sum of the `/metrics` lines of `series`.
    async fn metric(&self, series: &str) -> u64 {
        let response = self.metrics.get(format!("{}/metrics", self.url).parse().unwrap()).await.unwrap();
        let text = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix(series))
            .filter(|v| v.starts_with(' '))
            .map(|v| v.trim().parse::<u64>().unwrap())
            .sum()
    }

    /// Waits, up to 10 s, until the server has `n` connections open besides the one that asks.
    pub async fn until_connections_open(&self, n: u64) {
        for _ in 0..200 {
            if self.connections_open().await == n {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("the server still has {} connections open, not {n}", self.connections_open().await);
    }
}
