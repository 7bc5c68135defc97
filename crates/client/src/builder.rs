//! [`ClientBuilder`]: a [`Client`]'s settings — the server's URL, the bearer token, timeouts,
//! retries, the connection pool, TLS trust, whether the URL is a cluster's node — each declared
//! once, with its default; and the two ways to start one, [`Client::builder`] and [`Client::new`].

use std::{sync::Arc, time::Duration};

use rustls::pki_types::{pem::PemObject, CertificateDer};

use crate::{
    client::{Client, Servers},
    cluster::Router,
    error::Error,
    retry::Retry,
    transport::{Setup, Transport},
};

/// Builds a [`Client`]: `Client::builder("http://127.0.0.1:8080")....build()`.
#[derive(Debug, Clone)]
#[must_use]
pub struct ClientBuilder {
    url: String,
    token: Option<String>,
    timeout: Duration,
    connect_timeout: Duration,
    retry: Retry,
    cas_attempts: u32,
    idle_timeout: Duration,
    max_idle: usize,
    ca_pem: Vec<Vec<u8>>,
    cluster: bool,
}

impl Client {
    /// A builder for the server at `url` (`http://127.0.0.1:8080`, or `https://...`).
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// A client of the server at `url` with the default settings.
    pub fn new(url: impl Into<String>) -> Result<Self, Error> {
        ClientBuilder::new(url).build()
    }
}

impl ClientBuilder {
    /// The defaults for the server at `url` (`http://host:port`, or `https://`, with an optional
    /// path prefix).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            token: None,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            retry: Retry::default(),
            cas_attempts: 16,
            // Below the server's keep-alive limit (`--header-timeout-ms`, 10 s by default), so a
            // pooled connection is not reused just as the server closes it.
            idle_timeout: Duration::from_secs(5),
            max_idle: usize::MAX,
            ca_pem: Vec::new(),
            cluster: false,
        }
    }

    /// Sends `Authorization: Bearer <token>` with every request (default: none).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The longest one attempt may take, from sending the request to the answer's last byte
    /// (default 30 s); then [`Error::Timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest opening a connection may take (TCP connect; default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How 503s are retried (default: 3 retries, 50 ms doubling, waits capped at 2 s; see
    /// [`Retry`]).
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Conditional writes [`Client::compare_and_set`] tries before it gives up with
    /// [`Error::Contention`] (default 16).
    pub fn cas_attempts(mut self, attempts: u32) -> Self {
        self.cas_attempts = attempts.max(1);
        self
    }

    /// How long an unused connection stays open in the pool (default 5 s).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// The most unused connections the pool keeps open (default: no limit; the pool opens a
    /// connection per request in flight and keeps them for reuse).
    pub fn max_idle_connections(mut self, max: usize) -> Self {
        self.max_idle = max;
        self
    }

    /// Trusts the CA certificates of this PEM text for `https://`, besides the system's.
    pub fn add_root_certificates_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem.push(pem.into());
        self
    }

    /// The URL is a node of a cluster (docs/cluster.md; default: one server). The client reads
    /// the map from it (`GET /cluster`, at the first request), sends each key's request straight
    /// to its partition's owner over a connection pool per node, splits a batch by owner, and
    /// reads the map again when a node answers 421 `misdirected` (a partition moved). Each node
    /// must accept the token.
    pub fn cluster(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// The client.
    pub fn build(self) -> Result<Client, Error> {
        let tls = tls_config(&self.ca_pem)?;
        let setup = Setup {
            url: self.url,
            token: self.token,
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            idle_timeout: self.idle_timeout,
            max_idle: self.max_idle,
            tls,
            routed: false,
        };
        let servers = match self.cluster {
            true => Servers::Cluster(Box::new(Router::new(setup)?)),
            false => Servers::One(Transport::new(setup)?),
        };
        Ok(Client::from_parts(servers, self.retry, self.cas_attempts))
    }
}

/// rustls (ring) trusting the system's roots and the CAs of `ca_pem`; HTTP/1.1 through ALPN.
pub(crate) fn tls_config(ca_pem: &[Vec<u8>]) -> Result<rustls::ClientConfig, Error> {
    let mut roots = rustls::RootCertStore::empty();
    // The system's store may be absent or partly unreadable (a container): the CAs given are
    // then what is trusted.
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    for pem in ca_pem {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Config(format!("a CA certificate that is not PEM: {e}")))?;
        if certs.is_empty() {
            return Err(Error::Config("no certificate in the CA PEM text".into()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| Error::Config(format!("a CA certificate rustls refuses: {e}")))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused_at_build() {
        assert!(matches!(ClientBuilder::new("localhost:8080").build(), Err(Error::Config(_))));
        let not_pem = ClientBuilder::new("https://localhost:8443").add_root_certificates_pem("nothing here");
        assert!(matches!(not_pem.build(), Err(Error::Config(_))));
    }
}
