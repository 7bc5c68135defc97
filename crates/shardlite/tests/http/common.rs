//! Starting a real server on 127.0.0.1:0 over a real store in a temporary directory — or over
//! a fresh table of the PostgreSQL server `SHARDLITE_TEST_POSTGRES` names — and the small
//! clients the tests talk to it with. [`on_both_backends!`] runs a test on both backends.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    time::Duration,
};

use shardlite_engine::{Config, CreateOptions, Store, Synchronous};
use shardlite_postgres::{PgBackend, PgOptions};
use shardlite_server::{Backend, ServerOptions, SqliteBackend};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::oneshot,
    task::JoinHandle,
};

/// Partitions of a test directory (and of a PostgreSQL test table).
pub const PARTITIONS: u32 = 4;

/// A small data directory: [`PARTITIONS`] partitions, the defaults for the rest.
pub fn directory() -> CreateOptions {
    CreateOptions { partitions: Some(PARTITIONS), ..CreateOptions::default() }
}

/// A small, fast configuration: no fsync (durability is tested by the engine).
pub fn config() -> Config {
    Config {
        synchronous: Synchronous::Off,
        writer_threads: 2,
        lookup_threads: 2,
        readers_per_partition: 1,
        cache_size_kib: 256,
        ..Config::default()
    }
}

/// The environment variable naming the PostgreSQL server of the PostgreSQL variants.
pub const POSTGRES_ENV: &str = "SHARDLITE_TEST_POSTGRES";

/// The storage a test server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// shardlite's engine in a temporary directory.
    Sqlite,
    /// A new table (hash-partitioned like the config's partitions) on `SHARDLITE_TEST_POSTGRES`.
    Postgres,
}

/// The PostgreSQL URL of the tests, if any.
pub fn postgres_url() -> Option<String> {
    std::env::var(POSTGRES_ENV).ok().filter(|url| !url.is_empty())
}

/// Runs each `async fn name(kind: Kind)` twice, as `name::sqlite` and `name::postgres`; the
/// PostgreSQL variant says it is skipped and passes when `SHARDLITE_TEST_POSTGRES` is unset.
macro_rules! on_both_backends {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name($crate::common::Kind::Sqlite).await;
            }

            #[tokio::test]
            async fn postgres() {
                if $crate::common::postgres_url().is_none() {
                    eprintln!("skipped: {} not set", $crate::common::POSTGRES_ENV);
                    return;
                }
                super::$name($crate::common::Kind::Postgres).await;
            }
        }
    )+};
}
pub(crate) use on_both_backends;

/// A backend of a test: shardlite's engine in a temporary directory, or a table of its own (so
/// tests run in parallel) on `SHARDLITE_TEST_POSTGRES`, dropped with it.
pub struct TestBackend {
    /// The backend.
    pub backend: Arc<dyn Backend>,
    /// The data directory (kept alive as long as the backend; unused by PostgreSQL).
    pub dir: tempfile::TempDir,
    /// The PostgreSQL table.
    pub table: Option<String>,
}

impl TestBackend {
    /// A new backend of `kind`: a store of [`directory`] with `config`, or a new table with
    /// [`PARTITIONS`] partitions and the config's `max_value` (and a pool of 4).
    pub async fn new(kind: Kind, config: Config) -> Self {
        Self::created(kind, directory(), config).await
    }

    /// A new backend of `kind`: a store created with `create`, or a new table with its
    /// partitions (1 if not given) and the config's `max_value` (and a pool of 4).
    pub async fn created(kind: Kind, create: CreateOptions, config: Config) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (backend, table): (Arc<dyn Backend>, _) = match kind {
            Kind::Sqlite => {
                let store = Store::create(dir.path(), create, config).unwrap();
                (Arc::new(SqliteBackend::new(Arc::new(store))), None)
            }
            Kind::Postgres => {
                let table = fresh_table();
                let url = postgres_url().expect("SHARDLITE_TEST_POSTGRES names the test server");
                let options = PgOptions {
                    table: table.clone(),
                    partitions: create.partitions.unwrap_or(1),
                    pool_size: 4,
                    max_value: config.max_value,
                    ..PgOptions::new(url)
                };
                (Arc::new(PgBackend::connect(options).await.unwrap()), Some(table))
            }
        };
        Self { backend, dir, table }
    }
}

impl Drop for TestBackend {
    /// Drops the PostgreSQL table (and its partitions), on a thread of its own: the test's
    /// runtime may be shutting down.
    fn drop(&mut self) {
        let (Some(table), Some(url)) = (self.table.take(), postgres_url()) else { return };
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(shardlite_postgres::drop_table(&url, &table)).unwrap();
        });
        let _ = dropped.join();
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
    /// What it serves (its data directory or table live as long as the server).
    pub storage: TestBackend,
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
        Self::on_with(Kind::Sqlite, config, options).await
    }

    /// Starts a server with the default options on `kind`.
    pub async fn on(kind: Kind, config: Config) -> Self {
        Self::on_with(kind, config, ServerOptions::default()).await
    }

    /// Starts a server with these options on a new [`TestBackend`] of `kind`.
    pub async fn on_with(kind: Kind, config: Config, options: ServerOptions) -> Self {
        Self::serve(TestBackend::new(kind, config).await, options).await
    }

    /// Starts a server with the default options over a new data directory created with `create`.
    pub async fn start_created(create: CreateOptions, config: Config) -> Self {
        Self::serve(TestBackend::created(Kind::Sqlite, create, config).await, ServerOptions::default()).await
    }

    /// Starts a server with these options on `storage`.
    async fn serve(storage: TestBackend, options: ServerOptions) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(shardlite_server::run(listener, Arc::clone(&storage.backend), options, async {
            let _ = stopped.await;
        }));
        Self { url: format!("http://{addr}"), addr, client: client(), storage, stop: Some(stop), task: Some(task) }
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

/// A table name no other test (of this run or an earlier one) uses.
fn fresh_table() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("t{}_{nanos}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// An HTTP client that ignores proxy settings and gives up on a request after 20 s, so a
/// request the server never answers fails the test instead of hanging it.
pub fn client() -> reqwest::Client {
    tls_provider();
    reqwest::Client::builder().no_proxy().timeout(std::time::Duration::from_secs(20)).build().unwrap()
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

/// Installs ring as the process's rustls provider, which reqwest (built with
/// `rustls-no-provider` for `https://` URLs) needs before any client is built.
pub fn tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
