//! [`State`]: what every request handler shares.

use std::{sync::Arc, time::Instant};

use crate::{auth::Auth, backend::Backend, metrics::Metrics, options::ServerOptions};

/// What every request handler shares.
#[derive(Debug)]
pub struct State {
    /// The storage every route but `/healthz` works on.
    pub backend: Arc<dyn Backend>,
    /// The server's options.
    pub options: ServerOptions,
    /// The bearer token check.
    pub auth: Auth,
    /// The request metrics.
    pub metrics: Metrics,
    /// When the server started.
    pub started: Instant,
}

impl State {
    /// The state of a server of `backend`.
    pub fn new(backend: Arc<dyn Backend>, options: ServerOptions) -> Self {
        Self {
            auth: Auth::new(options.auth_token.as_deref()),
            metrics: Metrics::default(),
            backend,
            options,
            started: Instant::now(),
        }
    }
}
