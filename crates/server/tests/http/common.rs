//! Starting a real server on 127.0.0.1:0 over a real store in a temporary directory, and the
//! small clients the tests talk to it with.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use shardlite_engine::{Config, Store, Synchronous};
use shardlite_server::ServerOptions;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::oneshot,
    task::JoinHandle,
};

/// A small, fast configuration: few partitions, no fsync (durability is tested by the engine).
pub fn config() -> Config {
    Config {
        partitions: 4,
        synchronous: Synchronous::Off,
        writer_threads: 2,
        lookup_threads: 2,
        readers_per_partition: 1,
        cache_size_kib: 256,
        ..Config::default()
    }
}

/// A running server.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its address.
    pub addr: SocketAddr,
    /// A client with no proxy.
    pub client: reqwest::Client,
    /// The data directory (kept alive as long as the server).
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Starts a server with the default options.
    pub async fn start(config: Config) -> Self {
        Self::start_with(config, ServerOptions::default()).await
    }

    /// Starts a server with these options over a new data directory.
    pub async fn start_with(config: Config, options: ServerOptions) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::create(dir.path(), config).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(shardlite_server::run(listener, store, options, async {
            let _ = stopped.await;
        }));
        Self { url: format!("http://{addr}"), addr, client: client(), dir, stop: Some(stop), task: Some(task) }
    }

    /// `url` + `path`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// The URL of a key.
    pub fn kv(&self, key: &[u8]) -> String {
        self.at(&format!("/kv/{}", hex::encode(key)))
    }

    /// Shuts the server down and waits until `run` returned (the store is then closed).
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), task).await.unwrap().unwrap().unwrap();
        }
    }
}

/// An HTTP client that ignores proxy settings.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// Sends raw bytes on a new connection and reads until the server closes it (or 10 s pass).
pub async fn raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    read_to_close(&mut stream).await
}

/// Reads what the server sends until it closes the connection (bounded at 10 s).
pub async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of a raw HTTP/1.1 response.
pub fn status_of(response: &str) -> u16 {
    response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The JSON error body of a response: `(error, message)`.
pub async fn error_of(resp: reqwest::Response) -> (String, String) {
    let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(ct.as_deref(), Some("application/json"));
    let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    (body["error"].as_str().unwrap().to_owned(), body["message"].as_str().unwrap().to_owned())
}

/// The i-th test key: 32 bytes, like DB-A's.
pub fn key(i: u32) -> Vec<u8> {
    let mut k = i.to_be_bytes().to_vec();
    k.resize(32, 0x6b);
    k
}
