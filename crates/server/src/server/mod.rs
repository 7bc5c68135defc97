//! The server's front door. [`run`]: the accept loop, the connection cap, the HTTP/1 and HTTP/2
//! connections (over TLS if configured) with their timeouts, reloading the token and TLS files
//! on request, and the orderly shutdown: stop accepting, let in-flight requests finish (up to
//! the grace period), then close the backend (SQLite: commit every queued write and checkpoint).
//!
//! - `service`: one request, from its route and token to its handler's answer and its metrics.

mod service;

use std::{convert::Infallible, future::Future, sync::Arc, time::Duration};

use hyper::service::service_fn;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{
        conn::auto,
        graceful::{GracefulShutdown, Watcher},
    },
};
use prometheus_client::metrics::gauge::Gauge;
use shardlite_engine::Store;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{Notify, OwnedSemaphorePermit, Semaphore},
};

use crate::{
    backend::{sqlite::SqliteBackend, Backend},
    cluster::Cluster,
    http::{options::ServerOptions, state::State, tls::Tls},
};
use service::handle;

/// After a failed `accept` (say, out of file descriptors), wait this long before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// How long a node of a cluster stopping waits for its copies to hold what it shipped.
const DRAIN_WITHIN: Duration = Duration::from_secs(2);

/// Serves the API over shardlite's SQLite engine: [`run`] with a [`SqliteBackend`] of `store`.
/// Returns once the store is closed: every acknowledged write is durable (as the store's
/// `synchronous` setting defines) and the files are checkpointed.
pub async fn run_store(
    listener: TcpListener,
    store: Arc<Store>,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    run(listener, Arc::new(SqliteBackend::new(store)), options, shutdown).await
}

/// Serves the API on `listener` over `backend` until `shutdown` resolves, then shuts down in
/// order and closes the backend. Returns once it is closed.
pub async fn run(
    listener: TcpListener,
    backend: Arc<dyn Backend>,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    run_reloading(listener, backend, options, Reload::default(), None, shutdown).await
}

/// Asks a running server to re-read its token file and TLS files (what SIGHUP does to
/// `shardlite serve`).
/// Cheap to clone; a request made while the server is busy reloading is not lost.
#[derive(Debug, Clone, Default)]
pub struct Reload(Arc<Notify>);

impl Reload {
    /// Asks for a reload.
    pub fn request(&self) {
        self.0.notify_one();
    }
}

/// [`run`], re-reading what can be re-read whenever `reload` is requested; as a node of
/// `cluster` if given (serving its partitions, sending the others' requests on).
pub async fn run_reloading(
    listener: TcpListener,
    backend: Arc<dyn Backend>,
    options: ServerOptions,
    reload: Reload,
    cluster: Option<Arc<Cluster>>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let connections = Arc::new(Semaphore::new(options.max_connections));
    let grace = options.shutdown_grace_ms;
    let state = Arc::new(State::new(Arc::clone(&backend), options, cluster).map_err(std::io::Error::other)?);
    let builder = Arc::new(http_builder(&state.options));
    let graceful = GracefulShutdown::new();
    let (max_connections, auth, name) = (state.options.max_connections, state.auth.enabled(), backend.name());
    // While the storage opens (`backend = "opening"`) only the probes answer: not yet serving.
    let listening = if name == "opening" { "listening; the storage is opening" } else { "serving" };
    tracing::info!(%addr, max_connections, auth, backend = name, "{listening}");

    let reloading = tokio::spawn(reload_on_request(reload, Arc::clone(&state)));
    tokio::pin!(shutdown);
    loop {
        // Wait for a free connection slot before accepting, so excess clients wait in the
        // kernel's backlog instead of costing memory here.
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = Arc::clone(&connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break, // the semaphore is never closed
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    tracing::error!(%err, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        // Responses are small and written whole: send them now, not after Nagle's delay.
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(%err, "set_nodelay failed");
        }
        let open = Open::new(state.metrics.connections().clone(), permit);
        tokio::spawn(serve_connection(Arc::clone(&state), Arc::clone(&builder), graceful.watcher(), stream, open));
    }

    state.closing.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(listener);
    reloading.abort();
    let open = graceful.count();
    tracing::info!(connections = open, grace_ms = grace.as_millis() as u64, "shutting down: no longer accepting");
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!("requests still in flight after the grace period; dropping their connections");
    }
    if let Some(cluster) = &state.cluster {
        drain(cluster).await;
    }
    let opened = backend.name() != "opening";
    backend.close().await;
    match opened {
        true => tracing::info!("shutdown complete: queued writes committed, backend closed"),
        false => tracing::info!("stopped before the storage opened"),
    }
    Ok(())
}

/// Serves one connection until it ends: the TLS handshake first if the server speaks TLS
/// (within the header timeout), then HTTP/1.1 or HTTP/2.
async fn serve_connection(
    state: Arc<State>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    watcher: Watcher,
    stream: TcpStream,
    open: Open,
) {
    let service = {
        let state = Arc::clone(&state);
        service_fn(move |req| {
            let state = Arc::clone(&state);
            async move { Ok::<_, Infallible>(handle(state, req).await) }
        })
    };
    let ended = match &state.tls {
        None => watcher.watch(builder.serve_connection(TokioIo::new(stream), service).into_owned()).await,
        Some(tls) => match tokio::time::timeout(state.options.header_timeout_ms, tls.acceptor().accept(stream)).await {
            Ok(Ok(stream)) => watcher.watch(builder.serve_connection(TokioIo::new(stream), service).into_owned()).await,
            Ok(Err(err)) => return tracing::debug!(%err, "TLS handshake failed"),
            Err(_) => return tracing::debug!("TLS handshake timed out"),
        },
    };
    if let Err(err) = ended {
        // Clients that vanish or send garbage end up here: worth a debug line, no more.
        tracing::debug!(%err, "connection ended with an error");
    }
    drop(open);
}

/// Re-reads the token file and the TLS files at each request for it; files that do not load
/// leave what is in force as it was.
async fn reload_on_request(reload: Reload, state: Arc<State>) {
    loop {
        reload.0.notified().await;
        match state.auth.reload() {
            Ok(()) => tracing::info!("reloaded the token file"),
            Err(err) => tracing::error!(%err, "reloading the token file failed; the tokens in force stay"),
        }
        match state.tls.as_ref().map(Tls::reload) {
            None => {}
            Some(Ok(())) => tracing::info!("reloaded the TLS certificate"),
            Some(Err(err)) => tracing::error!(%err, "reloading the TLS files failed; the certificate in force stays"),
        }
    }
}

/// The HTTP connection settings: HTTP/1.1 keep-alive (and HTTP/2 with prior knowledge), the
/// header read timeout, and pipelined responses flushed together.
fn http_builder(options: &ServerOptions) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(options.header_timeout_ms).pipeline_flush(true);
    builder.http2().timer(TokioTimer::new());
    builder
}

/// An open connection: holds its slot and counts in the gauge until dropped, however the
/// connection's task ends.
struct Open {
    gauge: Gauge,
    _slot: OwnedSemaphorePermit,
}

impl Open {
    fn new(gauge: Gauge, slot: OwnedSemaphorePermit) -> Self {
        gauge.inc();
        Self { gauge, _slot: slot }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// Waits (at most [`DRAIN_WITHIN`]) until every copy node this node's links stream to holds
/// everything shipped, so that a copy does not miss the last writes and need snapshots once this
/// node restarts (its next stream begins past them), and was told how far the log is committed,
/// so that it applies them (or cancels those refused) before this node is gone.
async fn drain(cluster: &Cluster) {
    let deadline = tokio::time::Instant::now() + DRAIN_WITHIN;
    while !cluster.replication().drained() {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                "copies still lack writes this node shipped (they will come from snapshots after its \
                 restart), or do not know them committed (they apply them once it is back)"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
