//! [`State`]: what every request handler shares.

use std::{
    sync::{atomic::AtomicBool, Arc},
    time::Instant,
};

use super::{auth::Auth, forward::Forwarder, metrics::Metrics, options::ServerOptions, tls::Tls};
use crate::{backend::Backend, cluster::Cluster};

/// What every request handler shares.
#[derive(Debug)]
pub struct State {
    /// The storage every route but `/healthz` works on.
    pub backend: Arc<dyn Backend>,
    /// The server's options.
    pub options: ServerOptions,
    /// The bearer tokens and their roles.
    pub auth: Auth,
    /// TLS, if the server speaks it.
    pub tls: Option<Tls>,
    /// The request metrics.
    pub metrics: Metrics,
    /// When the server started.
    pub started: Instant,
    /// Set once shutdown began: `/readyz` answers 503 from then on.
    pub closing: AtomicBool,
    /// The cluster this server is a node of, if any: which partitions it serves.
    pub cluster: Option<Arc<Cluster>>,
    /// The pooled HTTP client that sends requests on to the nodes owning their partitions.
    pub forwarder: Forwarder,
}

impl State {
    /// The state of a server of `backend`; fails if the token file or the TLS files cannot be
    /// read.
    pub fn new(
        backend: Arc<dyn Backend>,
        options: ServerOptions,
        cluster: Option<Arc<Cluster>>,
    ) -> Result<Self, String> {
        let forwarder = Forwarder::new(options.node_ca.as_deref())?;
        Ok(Self {
            auth: Auth::new(options.token_source())?,
            tls: options.tls_files()?.map(Tls::load).transpose()?,
            metrics: Metrics::default(),
            backend,
            options,
            started: Instant::now(),
            closing: AtomicBool::new(false),
            cluster,
            forwarder,
        })
    }
}
