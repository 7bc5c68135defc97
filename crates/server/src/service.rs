//! One request, start to finish: route, authenticate, check the method, dispatch to the
//! route's handler, turn any refusal into its JSON error, and record the request's metrics
//! (and, if asked for, its log line).

use std::{sync::Arc, time::Instant};

use crate::{
    auth::Auth,
    backend::Backend,
    batch,
    error::ApiError,
    kv,
    metrics::Metrics,
    options::ServerOptions,
    response::{self, Response},
    routes::{method_label, Route},
    stats,
};
use hyper::{body::Incoming, header::HeaderValue, Request, StatusCode};

/// What every request handler shares.
#[derive(Debug)]
pub struct State {
    /// The storage every route but `/healthz` works on.
    pub backend: Arc<dyn Backend>,
    /// The server's options.
    pub options: ServerOptions,
    /// The bearer token check.
    pub auth: Auth,
    /// Request and store metrics.
    pub metrics: Metrics,
    /// When the server started.
    pub started: Instant,
}

impl State {
    /// The state of a server of `backend`.
    pub fn new(backend: Arc<dyn Backend>, options: ServerOptions) -> Self {
        Self {
            auth: Auth::new(options.auth_token.as_deref()),
            metrics: Metrics::new(Arc::clone(&backend)),
            backend,
            options,
            started: Instant::now(),
        }
    }
}

/// Serves one request. Never fails: every error is an HTTP answer.
pub async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response {
    let started = Instant::now();
    let route = Route::of(req.uri().path());
    let method = method_label(req.method());
    let logged = state.options.request_log.then(|| req.uri().path().to_owned());
    let resp = match dispatch(&state, route, req).await {
        Ok(resp) => resp,
        Err(err) => {
            // 503s (a full queue, a closing store) are expected under load: /metrics counts them.
            if err.status.is_server_error() && err.status != StatusCode::SERVICE_UNAVAILABLE {
                let (route, status, code, message) = (route.as_str(), err.status.as_u16(), err.code, &err.message);
                tracing::error!(route, status, code, %message, "request failed");
            }
            err.into_response()
        }
    };
    let elapsed = started.elapsed();
    state.metrics.observe(route.as_str(), method, resp.status().as_u16(), elapsed);
    if let Some(path) = logged {
        let (status, micros) = (resp.status().as_u16(), elapsed.as_micros() as u64);
        tracing::info!(target: "shardlite_server::request", method, path, status, micros, "request");
    }
    resp
}

async fn dispatch(state: &Arc<State>, route: Route, req: Request<Incoming>) -> Result<Response, ApiError> {
    if route != Route::Healthz {
        // Before the method and route checks, so that without a token nothing is revealed.
        state.auth.check(req.headers())?;
    }
    route.allow(req.method(), req.uri().path())?;
    match route {
        Route::Healthz => Ok(response::with_body(StatusCode::OK, HeaderValue::from_static("text/plain"), "ok\n")),
        Route::Kv => kv::handle(state, req).await,
        Route::Batch => batch::handle(state, req.into_body()).await,
        Route::Stats => stats::handle(state).await,
        Route::Metrics => metrics(state).await,
        Route::Unknown => Err(ApiError::unknown_route(req.uri().path())),
    }
}

/// `/metrics`, rendered on a blocking thread because it may read the store's file sizes.
async fn metrics(state: &Arc<State>) -> Result<Response, ApiError> {
    let state = Arc::clone(state);
    let internal = |message: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message);
    let text = tokio::task::spawn_blocking(move || state.metrics.render())
        .await
        .map_err(|e| internal(format!("metrics failed: {e}")))?
        .map_err(|e| internal(format!("metrics failed: {e}")))?;
    Ok(response::with_body(
        StatusCode::OK,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        text,
    ))
}
