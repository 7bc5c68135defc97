//! The HTTP side of the load generator: the [`Target`] (where the server is, over TLS for an
//! `https://` URL) and one HTTP/1.1 keep-alive [`Conn`] on hyper's low-level client, whose connection future the caller's task
//! drives itself (no extra task per connection, no pool: one request in flight per connection).
//! Also the small GETs of the control path (`/stats`, `/metrics`) on a fresh connection each,
//! and [`DrivenConn`]: a connection among several of one task (one per node of a cluster),
//! driven only while its request is in flight.

use std::{
    future::{poll_fn, Future},
    net::SocketAddr,
    path::Path,
    pin::{pin, Pin},
    sync::Arc,
    time::Duration,
};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{
    client::conn::http1::{self, SendRequest},
    header, Method, Request, Uri,
};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::tls::{self, Stream};

/// A request body: always whole and of known length, so hyper sends `Content-Length`.
pub type Body = Full<Bytes>;

/// Where the server is.
#[derive(Clone)]
pub struct Target {
    /// The resolved address.
    pub addr: SocketAddr,
    /// The `Host` header (`host:port` of the URL).
    pub host: String,
    /// Path prefix before `/kv/...`, `/healthz`, ... (the URL's path without a trailing `/`).
    pub prefix: String,
    /// For an `https://` URL: the connector and the name the certificate must carry.
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        write!(f, "Target({scheme}://{}{})", self.host, self.prefix)
    }
}

impl Target {
    /// Parses and resolves an `http://host:port[/prefix]` URL, or an `https://` one whose
    /// certificate the system's roots trust.
    pub async fn resolve(url: &str) -> anyhow::Result<Self> {
        Self::resolve_trusting(url, None).await
    }

    /// [`Target::resolve`], an `https://` server's certificate also trusted if the CAs of the
    /// PEM file `ca` signed it.
    pub async fn resolve_trusting(url: &str, ca: Option<&Path>) -> anyhow::Result<Self> {
        let uri: Uri = url.parse().with_context(|| format!("bad URL `{url}`"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => anyhow::bail!("only http:// and https:// URLs are supported: `{url}`"),
        };
        let authority = uri.authority().with_context(|| format!("no host in `{url}`"))?;
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let addr = tokio::net::lookup_host((authority.host(), port))
            .await
            .with_context(|| format!("resolving {authority}"))?
            .next()
            .with_context(|| format!("{authority} has no address"))?;
        let tls = match https {
            // One request at a time per connection: HTTP/1.1, as over plain TCP.
            true => {
                let config = tls::client_config(ca, &[b"http/1.1"])?;
                let name = ServerName::try_from(authority.host().to_owned())
                    .with_context(|| format!("`{}` is not a server name", authority.host()))?;
                Some((TlsConnector::from(Arc::new(config)), name))
            }
            false => None,
        };
        Ok(Self { addr, host: authority.to_string(), prefix: uri.path().trim_end_matches('/').to_owned(), tls })
    }

    /// Whether the server runs on this machine, so its data directory and `/proc` are ours.
    pub fn is_local(&self) -> bool {
        self.addr.ip().is_loopback()
    }

    /// A request to `path` (which starts with `/`).
    pub fn request(&self, method: Method, path: &str, body: Bytes) -> anyhow::Result<Request<Body>> {
        Ok(Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix))
            .header(header::HOST, &self.host)
            .body(Full::new(body))?)
    }

    /// Opens a keep-alive connection.
    pub async fn connect(&self) -> anyhow::Result<(Conn, http1::Connection<TokioIo<Stream>, Body>)> {
        let stream = TcpStream::connect(self.addr).await?;
        // Requests are small and written whole: send them now, not after Nagle's delay.
        stream.set_nodelay(true)?;
        let stream = match &self.tls {
            None => Stream::Plain(stream),
            Some((connector, name)) => Stream::Tls(Box::new(connector.connect(name.clone(), stream).await?)),
        };
        let (sender, driver) = http1::handshake(TokioIo::new(stream)).await?;
        Ok((Conn { sender }, driver))
    }

    /// `GET path` on a fresh connection: the status and the whole body. For the control path
    /// (`/stats`, `/metrics`), never for measured requests.
    pub async fn get(&self, path: &str, timeout: Duration) -> anyhow::Result<(u16, Bytes)> {
        let fetch = async {
            let (mut conn, driver) = self.connect().await?;
            let driving = tokio::spawn(driver);
            let answer = conn.send(self.request(Method::GET, path, Bytes::new())?).await;
            driving.abort();
            answer
        };
        tokio::time::timeout(timeout, fetch).await.with_context(|| format!("GET {path} timed out"))?
    }
}

/// The sending half of one keep-alive connection.
pub struct Conn {
    sender: SendRequest<Body>,
}

impl Conn {
    /// Sends `req` and reads the whole answer: its status and body. The connection's driver
    /// must be polled meanwhile (by the same task, see the runner).
    pub async fn send(&mut self, req: Request<Body>) -> anyhow::Result<(u16, Bytes)> {
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status().as_u16();
        // Read the body to the end: the connection is reusable only after it.
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}

/// A keep-alive connection and its driver, which [`DrivenConn::send`] polls beside the request:
/// a task can hold several (one per node of a cluster) without a task per connection.
pub struct DrivenConn {
    conn: Conn,
    driver: http1::Connection<TokioIo<Stream>, Body>,
    /// The driver finished: the server closed the connection, or it failed.
    closed: bool,
}

impl DrivenConn {
    /// Opens a keep-alive connection to `target`.
    pub async fn open(target: &Target) -> anyhow::Result<Self> {
        let (conn, driver) = target.connect().await?;
        Ok(Self { conn, driver, closed: false })
    }

    /// Sends `req` and reads the whole answer, driving the connection meanwhile.
    pub async fn send(&mut self, req: Request<Body>) -> anyhow::Result<(u16, Bytes)> {
        let Self { conn, driver, closed } = self;
        let mut exchange = pin!(conn.send(req));
        poll_fn(|cx| {
            // The driver first: what it reads this turn is what the exchange then finds.
            if !*closed && Pin::new(&mut *driver).poll(cx).is_ready() {
                *closed = true;
            }
            exchange.as_mut().poll(cx)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn parses_urls() {
        let t = Target::resolve("http://127.0.0.1:8080").await.unwrap();
        assert_eq!((t.addr.port(), t.host.as_str(), t.prefix.as_str()), (8080, "127.0.0.1:8080", ""));
        assert!(t.is_local());
        let t = Target::resolve("http://127.0.0.1:9/api/").await.unwrap();
        assert_eq!(t.prefix, "/api");
        assert_eq!(t.request(Method::GET, "/healthz", Bytes::new()).unwrap().uri(), "/api/healthz");
        let t = Target::resolve("https://localhost:8443").await.unwrap();
        assert_eq!((t.addr.port(), format!("{t:?}")), (8443, "Target(https://localhost:8443)".to_owned()));
        assert!(Target::resolve("ftp://127.0.0.1").await.is_err());
    }
}
