//! One request, start to finish: route, authenticate, check the method and the token's role,
//! on a cluster node send a request for another node's partition on to it
//! (`crate::handlers::cluster::route`), dispatch to the route's handler, turn any refusal into
//! its JSON error, and record the request's metrics (and, if asked for, its log line).

use std::{sync::Arc, time::Instant};

use hyper::{body::Incoming, http::request::Parts, Request, StatusCode};

use crate::{
    handlers::{admin, batch, cluster, export, keys, kv, metrics, openapi, probes, stats},
    http::{
        auth,
        error::ApiError,
        response::Response,
        routes::{method_label, Route},
        state::State,
    },
};

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
    if let Some(cluster) = &state.cluster {
        cluster::route::catch_up(cluster, req.headers()).await;
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
        Route::Healthz => Ok(probes::healthz()),
        Route::Readyz => probes::readyz(state),
        Route::Kv => kv::handle(state, req).await,
        Route::Batch => match &state.cluster {
            None => batch::handle(state, req).await,
            Some(cluster) => cluster::batch::handle(state, cluster, req).await,
        },
        Route::Keys => keys::handle(state, req.uri().query()).await,
        Route::Export => export::handle(state, req.uri().query()).await,
        Route::AdminCheck => admin::check(state).await,
        Route::Stats => stats::handle(state).await,
        Route::Metrics => metrics::handle(state).await,
        Route::AdminBackup => {
            let (parts, body) = req.into_parts();
            admin::backup(state, &parts.method, body).await
        }
        Route::OpenApi => Ok(openapi::handle()),
        Route::AdminCompact => admin::compact(state).await,
        Route::Cluster => cluster::map::handle(state),
        Route::AdminMove => cluster::moving::run(Arc::clone(state), req).await,
        Route::AdminMoveRecords => cluster::moving::records(state, req.uri().query()).await,
        Route::AdminAdopt => cluster::moving::adopt(state, req).await,
        Route::AdminTakeover => cluster::takeover::run(state, req).await,
        Route::AdminReplicate => cluster::replicate::handle(state, req).await,
        Route::Unknown => Err(ApiError::unknown_route(req.uri().path())),
    }
}

/// A read of one partition served here, on a cluster node (`cluster::route::read` runs it).
async fn read(state: &State, route: Route, head: &Parts) -> Result<Response, ApiError> {
    match route {
        Route::Kv => kv::get(state, head).await,
        Route::Keys => keys::handle(state, head.uri.query()).await,
        _ => export::handle(state, head.uri.query()).await,
    }
}
