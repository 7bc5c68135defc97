//! [`Pool`]: the keep-alive HTTP/1.1 connections of a client to its one server, on hyper's
//! low-level `client::conn::http1`, shared by every task that holds a clone of the client.
//!
//! A connection has no task of its own. The task that checks it out drives it while its
//! request is in flight, as `shardlite bench` drives its connections, so an answer wakes the
//! requesting task directly, not a connection task that would then wake it. An idle connection
//! waits in the pool undriven; whether the server closed it meanwhile is seen when it is next
//! checked out. Connections are opened by hyper-rustls's connector (`http://`, and `https://`
//! over rustls), with `TCP_NODELAY` and the connect timeout.

use std::{
    future::{poll_fn, Future},
    pin::pin,
    sync::{Arc, Mutex, Weak},
    task::Poll,
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{
    client::conn::http1::{self, Connection, SendRequest},
    http::response::Parts,
    Request, Uri,
};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::{client::legacy::connect::HttpConnector, rt::TokioIo};
use tokio::net::TcpStream;
use tower_service::Service;

use crate::error::Error;

/// A request body: whole, of known length.
pub(crate) type Body = Full<Bytes>;

/// One connection's byte stream: TCP, or TLS over TCP.
type Io = MaybeHttpsStream<TokioIo<TcpStream>>;

/// The connections to one server. Cheap to clone: clones share the connections.
#[derive(Clone)]
pub(crate) struct Pool {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("origin", &self.shared.origin).finish_non_exhaustive()
    }
}

/// What the clones of a [`Pool`] share.
struct Shared {
    /// Opens connections (TCP, then TLS for `https://`).
    connector: HttpsConnector<HttpConnector>,
    /// `scheme://authority` of the server, what the connector connects to.
    origin: Uri,
    /// The idle connections, the longest idle first. A plain mutex: it is held only to push or
    /// pop one connection (or to split off the expired ones), never across an await.
    idle: Mutex<Vec<Idle>>,
    /// How long a connection may stay idle before it is closed.
    idle_timeout: Duration,
    /// The most idle connections kept.
    max_idle: usize,
    /// Whether the task that closes expired idle connections runs.
    reaping: std::sync::atomic::AtomicBool,
}

/// A connection waiting in the pool, and since when. Boxed: a connection (its buffers, a TLS
/// session) is large, and it moves in and out of the pool on every request.
struct Idle {
    conn: Box<Conn>,
    since: Instant,
}

/// One keep-alive connection: its sending half and the future that drives it.
pub(crate) struct Conn {
    sender: SendRequest<Body>,
    driver: Driver,
    /// Taken from the pool rather than opened for this request.
    reused: bool,
}

/// The future that reads and writes a connection, and whether it has finished.
struct Driver {
    connection: Connection<Io, Body>,
    /// The connection is closed (by the server, or on an error).
    closed: bool,
}

/// How an exchange on one connection failed.
pub(crate) enum Failure {
    /// The request was never written (the connection was closed first): it may be sent on
    /// another connection, whatever its method.
    NotSent(Request<Body>),
    /// The request may have reached the server.
    Failed(Error),
}

impl Pool {
    /// A pool of connections to `origin`, opened by `connector`.
    pub fn new(connector: HttpsConnector<HttpConnector>, origin: Uri, idle_timeout: Duration, max_idle: usize) -> Self {
        let shared =
            Shared { connector, origin, idle: Mutex::new(Vec::new()), idle_timeout, max_idle, reaping: false.into() };
        Self { shared: Arc::new(shared) }
    }

    /// Sends `request` and reads its whole answer, on an idle connection if one is still open,
    /// else on a new one; the connection goes back to the pool after the answer's last byte.
    pub async fn exchange(&self, mut request: Request<Body>) -> Result<(Parts, Bytes), Error> {
        loop {
            let mut conn = match self.checkout().await {
                Some(conn) => conn,
                None => self.connect().await?,
            };
            match conn.exchange(request).await {
                Ok(answer) => {
                    self.checkin(conn);
                    return Ok(answer);
                }
                // The server closed an idle connection as it was taken: try the next one.
                Err(Failure::NotSent(unsent)) if conn.reused => request = unsent,
                Err(Failure::NotSent(_)) => {
                    return Err(Error::Transport("a new connection closed before the request".into()))
                }
                Err(Failure::Failed(e)) => return Err(e),
            }
        }
    }

    /// The most recently used idle connection still open; the expired ones are closed.
    async fn checkout(&self) -> Option<Box<Conn>> {
        loop {
            let mut conn = {
                let mut idle = self.shared.idle.lock().unwrap_or_else(|p| p.into_inner());
                idle.pop()?
            };
            if conn.since.elapsed() >= self.shared.idle_timeout {
                // The rest were idle longer still.
                drop(self.shared.expired(Instant::now()));
                return None;
            }
            // A driver that finishes now has read the server's close (or an error).
            let open = poll_fn(|cx| Poll::Ready(conn.conn.driver.poll_open(cx))).await;
            if open {
                conn.conn.reused = true;
                return Some(conn.conn);
            }
        }
    }

    /// Opens a new connection.
    async fn connect(&self) -> Result<Box<Conn>, Error> {
        let mut connector = self.shared.connector.clone();
        poll_fn(|cx| connector.poll_ready(cx)).await.map_err(Error::Transport)?;
        let io = connector.call(self.shared.origin.clone()).await.map_err(Error::Transport)?;
        let (sender, driver) = http1::handshake(io).await.map_err(|e| Error::Transport(Box::new(e)))?;
        Ok(Box::new(Conn { sender, driver: Driver { connection: driver, closed: false }, reused: false }))
    }

    /// Puts `conn` back for the next request, unless it is closed or the pool is full.
    fn checkin(&self, conn: Box<Conn>) {
        if conn.driver.closed || self.shared.max_idle == 0 {
            return;
        }
        {
            let mut idle = self.shared.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() >= self.shared.max_idle {
                return;
            }
            idle.push(Idle { conn, since: Instant::now() });
        }
        if !self.shared.reaping.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tokio::spawn(reap(Arc::downgrade(&self.shared)));
        }
    }
}

impl Shared {
    /// Takes out the connections idle since before `now - idle_timeout`, to be dropped (closed)
    /// outside the lock.
    fn expired(&self, now: Instant) -> Vec<Idle> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = idle.partition_point(|i| now.saturating_duration_since(i.since) >= self.idle_timeout);
        idle.drain(..fresh).collect()
    }
}

/// Closes the connections idle longer than the idle timeout, once per idle timeout, while the
/// pool lives: unused connections do not stay open because no request came to take them.
async fn reap(pool: Weak<Shared>) {
    let period = pool.upgrade().map_or(Duration::ZERO, |p| p.idle_timeout).max(Duration::from_millis(100));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(shared) = pool.upgrade() else { return };
        drop(shared.expired(Instant::now()));
    }
}

impl Driver {
    /// Polls the connection, unless it has finished; whether it is still open.
    fn poll_open(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        if !self.closed && Future::poll(std::pin::Pin::new(&mut self.connection), cx).is_ready() {
            self.closed = true;
        }
        !self.closed
    }
}

impl Conn {
    /// Sends `request` and reads the whole answer, driving the connection meanwhile.
    async fn exchange(&mut self, request: Request<Body>) -> Result<(Parts, Bytes), Failure> {
        let Self { sender, driver, .. } = self;
        let failed = |e: hyper::Error| Failure::Failed(Error::Transport(Box::new(e)));
        let exchange = async {
            if sender.ready().await.is_err() {
                return Err(Failure::NotSent(request));
            }
            let response = sender.try_send_request(request).await.map_err(|mut e| match e.take_message() {
                Some(request) => Failure::NotSent(request),
                None => failed(e.into_error()),
            })?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await.map_err(failed)?.to_bytes();
            Ok((parts, body))
        };
        let mut exchange = pin!(exchange);
        // The driver first: what it reads this turn is what the exchange then finds.
        poll_fn(|cx| {
            driver.poll_open(cx);
            exchange.as_mut().poll(cx)
        })
        .await
    }
}
