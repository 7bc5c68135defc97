//! `/kv/{key}`: GET, HEAD, PUT, DELETE, through the [`crate::backend::Backend`]. With SQLite,
//! reads go to the engine's lookup threads and writes to its writer queues, and the handlers
//! await their answers; only while the data is in memory does the engine run a read or a single
//! write on the calling thread (`shardlite_engine::Store::submit_get`, inline writes). A full
//! queue fails at once (503, `Retry-After`) instead of waiting.

use hyper::{body::Incoming, header::ETAG, http::request::Parts, Method, Request, StatusCode};
use shardlite_engine::{Op, Outcome};

use crate::http::{
    body::{self, Limit},
    conditional,
    error::ApiError,
    key::parse_key,
    read_from,
    response::{self, etag, Response},
    routes::kv_key,
    state::State,
};

/// Serves one `/kv/{key}` request (the method is already known to be allowed).
pub async fn handle(state: &State, req: Request<Incoming>) -> Result<Response, ApiError> {
    let (head, body) = req.into_parts();
    let key = parse_key(kv_key(head.uri.path()))?;
    match head.method {
        Method::PUT => put(state, key, &head, body).await,
        Method::DELETE => delete(state, key, &head).await,
        _ => read(state, key, &head).await,
    }
}

/// Serves a GET or HEAD of `/kv/{key}` from its head alone (a cluster node's read, which may
/// run again: `super::cluster::route::read`).
pub async fn get(state: &State, head: &Parts) -> Result<Response, ApiError> {
    read(state, parse_key(kv_key(head.uri.path()))?, head).await
}

/// GET and HEAD.
async fn read(state: &State, key: Vec<u8>, head: &Parts) -> Result<Response, ApiError> {
    read_from::parse(&head.headers)?;
    let record = state.backend.get(key).await?;
    let current = record.as_ref().map(|r| r.version);
    if let Some(status) = conditional::for_read(&head.headers, current)? {
        if status == StatusCode::PRECONDITION_FAILED {
            // An error like any other: the JSON body, and the current tag as the ETag.
            return Err(ApiError::precondition_failed(current));
        }
        let mut resp = response::empty(status);
        if let Some(version) = current {
            resp.headers_mut().insert(ETAG, etag(version));
        }
        return Ok(resp);
    }
    match record {
        Some(r) => Ok(response::value(r.version, r.value, head.method == Method::HEAD)),
        None => Err(ApiError::not_found()),
    }
}

async fn put(state: &State, key: Vec<u8>, head: &Parts, body: Incoming) -> Result<Response, ApiError> {
    let condition = conditional::for_put(&head.headers)?;
    if body::declared_len(&body).is_none() {
        return Err(ApiError::new(
            StatusCode::LENGTH_REQUIRED,
            "length_required",
            "PUT needs a Content-Length (chunked values are not accepted)",
        ));
    }
    let limit = Limit { max: state.backend.max_value(), code: "value_too_large", what: "the value" };
    let value = body::read(body, limit, state.options.body_timeout_ms).await?;
    match state.backend.write(Op::Put { key, value, condition }).await? {
        Outcome::Written(w) => {
            let mut resp = response::empty(if w.created { StatusCode::CREATED } else { StatusCode::OK });
            resp.headers_mut().insert(ETAG, etag(w.version));
            Ok(resp)
        }
        other => Err(unexpected(&other)),
    }
}

async fn delete(state: &State, key: Vec<u8>, head: &Parts) -> Result<Response, ApiError> {
    let condition = conditional::for_delete(&head.headers)?;
    match state.backend.write(Op::Delete { key, condition }).await? {
        Outcome::Deleted { .. } => Ok(response::empty(StatusCode::NO_CONTENT)),
        other => Err(unexpected(&other)),
    }
}

/// The backend answered an operation with another operation's outcome: its bug, not the
/// client's, so 500 rather than a panic.
fn unexpected(outcome: &Outcome) -> ApiError {
    tracing::error!(?outcome, "the backend answered with an outcome of another operation");
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the backend gave an unexpected answer")
}
