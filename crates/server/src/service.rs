//! One request, start to finish: route, authenticate, check the method and the token's role,
//! in a cluster send a request for another node's partition on to it (`crate::cluster`),
//! dispatch to the route's handler, turn any refusal into its JSON error, and record the request's metrics
//! (and, if asked for, its log line).

use std::{
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use hyper::{body::Incoming, header::HeaderValue, http::request::Parts, Request, StatusCode};

use crate::{
    admin, auth, batch, cluster,
    error::ApiError,
    export, keys, kv, openapi,
    response::{self, Response},
    routes::{method_label, Route},
    state::State,
    stats,
};

/// How long a `/metrics` scrape waits for the backend's figures before going without them
/// (PostgreSQL's may be out of reach).
const FIGURES_WAIT: Duration = Duration::from_secs(2);

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
    // Authentication comes before the method and route checks, so that without a token
    // nothing is revealed; the role after them, as it depends on the method.
    let roles = if route.is_public() { None } else { Some(state.auth.authenticate(req.headers())?) };
    route.allow(req.method(), req.uri().path())?;
    if let (Some(roles), Some(role)) = (roles, route.role(req.method())) {
        auth::require(roles, role)?;
    }
    // Held while the request runs: a move of its partition waits for it, or it for the move.
    let _held = match &state.cluster {
        Some(cluster) => cluster::route::hold_write(cluster, route, &req).await,
        None => Vec::new(),
    };
    if let Some(cluster) = &state.cluster {
        if let Some(partition) = cluster::route::read_of(cluster, route, &req) {
            let (head, _) = req.into_parts();
            return cluster::route::read(state, cluster, partition, &head, || read(state, route, &head)).await;
        }
        if let Some(owner) = cluster::route::owner_elsewhere(cluster, route, &req)? {
            return cluster::route::answer(state, cluster, owner, req).await;
        }
    }
    match route {
        Route::Healthz => Ok(response::with_body(StatusCode::OK, HeaderValue::from_static("text/plain"), "ok\n")),
        Route::Readyz => readiness(state),
        Route::Kv => kv::handle(state, req).await,
        Route::Batch => batch::handle(state, req).await,
        Route::Keys => keys::handle(state, req.uri().query()).await,
        Route::Export => export::handle(state, req.uri().query()).await,
        Route::AdminCheck => check(state).await,
        Route::Stats => stats::handle(state).await,
        Route::Metrics => metrics(state).await,
        Route::AdminBackup => {
            let (parts, body) = req.into_parts();
            admin::backup(state, &parts.method, body).await
        }
        Route::OpenApi => Ok(openapi::handle()),
        Route::AdminCompact => admin::compact(state).await,
        Route::Cluster => cluster::route::map(state),
        Route::AdminMove => cluster::moving::run(Arc::clone(state), req).await,
        Route::AdminMoveRecords => cluster::moving::records(state, req.uri().query()).await,
        Route::AdminAdopt => cluster::moving::adopt(state, req).await,
        Route::AdminTakeover => cluster::takeover::run(state, req).await,
        Route::Unknown => Err(ApiError::unknown_route(req.uri().path())),
    }
}

/// A read of one partition served here, on a cluster node (`cluster::route::read`).
async fn read(state: &State, route: Route, head: &Parts) -> Result<Response, ApiError> {
    match route {
        Route::Kv => kv::get(state, head).await,
        Route::Keys => keys::handle(state, head.uri.query()).await,
        _ => export::handle(state, head.uri.query()).await,
    }
}

/// `/readyz`: 200 once the storage is open and healthy; 503 `not_ready` with the reason while
/// it opens, while a partition is poisoned (or the commit log failed), while a cluster node
/// does not hold its lease (fenced), and during shutdown.
fn readiness(state: &State) -> Result<Response, ApiError> {
    let fenced = state.cluster.as_ref().is_some_and(|cluster| !cluster.lease().held());
    let reason = if state.closing.load(Ordering::Relaxed) {
        Some("the server is shutting down".to_owned())
    } else if fenced {
        Some("this cluster node does not hold its lease in etcd: its partitions are fenced".to_owned())
    } else {
        state.backend.unready()
    };
    match reason {
        Some(reason) => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", reason)),
        None => Ok(response::json(StatusCode::OK, br#"{"ready":true}"#.to_vec())),
    }
}

/// `/admin/check`: every partition's check, `{"reports": [...]}` (what `shardlite check --url`
/// reads and judges).
async fn check(state: &State) -> Result<Response, ApiError> {
    #[derive(serde::Serialize)]
    struct Reports {
        reports: Vec<shardlite_engine::PartitionCheck>,
    }
    let reports = state.backend.check().await?;
    let body = serde_json::to_vec(&Reports { reports })
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("check report: {e}")))?;
    Ok(response::json(StatusCode::OK, body))
}

/// `/metrics`: the backend's figures (if they come within [`FIGURES_WAIT`]), rendered with the
/// server's own on a blocking thread (it reads `/proc`).
async fn metrics(state: &Arc<State>) -> Result<Response, ApiError> {
    let figures = match tokio::time::timeout(FIGURES_WAIT, state.backend.figures()).await {
        Ok(Ok(figures)) => Some(figures),
        Ok(Err(err)) => {
            // The scrape still carries the HTTP layer's and the process's metrics.
            tracing::warn!(%err, "reading the backend's figures for /metrics failed");
            None
        }
        Err(_) => {
            tracing::warn!(wait = ?FIGURES_WAIT, "the backend's figures for /metrics did not come in time");
            None
        }
    };
    let state = Arc::clone(state);
    let internal = |message: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message);
    let text = tokio::task::spawn_blocking(move || state.metrics.render(figures))
        .await
        .map_err(|e| internal(format!("metrics failed: {e}")))?
        .map_err(|e| internal(format!("metrics failed: {e}")))?;
    Ok(response::with_body(
        StatusCode::OK,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        text,
    ))
}
