//! What the cluster's admin routes share: the query's parameters, JSON answers and the errors
//! of these routes, and calls to another node as a node of the cluster (with this node's token).

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{
    body::Incoming,
    header::{HeaderValue, AUTHORIZATION},
    http::request::Parts,
    Method, Request, StatusCode,
};
use serde::Serialize;

use crate::{
    cluster::{Cluster, Owner},
    http::{
        error::ApiError,
        response::{self, Response},
        state::State,
    },
};

/// `POST path` to `target`, a step of a move it takes: its JSON answer, or 502 `move_failed`
/// saying why not.
pub(super) async fn post_step<T: serde::de::DeserializeOwned>(
    state: &State,
    cluster: &Cluster,
    target: &Owner,
    path: &str,
) -> Result<T, ApiError> {
    let to = &target.node;
    let (status, _, body) = call(state, cluster, target, Method::POST, path).await?;
    let answer = body.collect().await.map_err(|e| failed(to, &e.to_string()))?.to_bytes();
    if status != StatusCode::OK {
        return Err(failed(to, &format!("{status} {}", String::from_utf8_lossy(&answer))));
    }
    serde_json::from_slice(&answer).map_err(|e| failed(to, &e.to_string()))
}

/// Asks node `to` for `path` as a node of the cluster: with this node's own token (the `node`
/// role the move's routes need), never the token of the client that asked for the move.
pub(super) async fn call(
    state: &State,
    cluster: &Cluster,
    to: &Owner,
    method: Method,
    path: &str,
) -> Result<(StatusCode, hyper::HeaderMap, Incoming), ApiError> {
    let mut head = Request::new(());
    *head.method_mut() = method;
    *head.uri_mut() = path.parse().map_err(|e: hyper::http::uri::InvalidUri| internal(e.to_string()))?;
    if let Some(token) = state.auth.node_token() {
        let bearer = HeaderValue::try_from(format!("Bearer {token}")).map_err(|e| internal(e.to_string()))?;
        head.headers_mut().insert(AUTHORIZATION, bearer);
    }
    let (head, ()): (Parts, ()) = head.into_parts();
    let answer = state.forwarder.send(to, cluster.node(), &head, Bytes::new()).await?;
    let (parts, body) = answer.into_parts();
    Ok((parts.status, parts.headers, body))
}

pub(super) fn node_of_cluster(state: &State) -> Result<&Cluster, ApiError> {
    state.cluster.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no cluster map: this server is not a node of a cluster (shardlite serve --cluster)",
        )
    })
}

/// The query's `partition=`, checked against the map.
pub(super) fn partition_of(cluster: &Cluster, query: &str) -> Result<u32, ApiError> {
    let value = param(query, "partition")?;
    let partition = value
        .parse::<u32>()
        .map_err(|_| bad_query(format!("`partition` must be a partition number, not `{value}`")))?;
    let partitions = cluster.view().map.partitions;
    match partition < partitions {
        true => Ok(partition),
        false => Err(bad_query(format!("partition {partition} does not exist: the partitions are 0..{partitions}"))),
    }
}

/// The value of `name=` in `query`.
pub(super) fn param(query: &str, name: &str) -> Result<String, ApiError> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
        .filter(|value| !value.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| bad_query(format!("the query needs `{name}=`")))
}

pub(super) fn json(value: &impl Serialize) -> Result<Response, ApiError> {
    let body = serde_json::to_vec(value).map_err(|e| internal(e.to_string()))?;
    Ok(response::json(StatusCode::OK, body))
}

/// 502 `move_failed`: the other node of the move failed its step.
pub(super) fn failed(node: &str, why: &str) -> ApiError {
    ApiError::new(StatusCode::BAD_GATEWAY, "move_failed", format!("node `{node}` failed its step of the move: {why}"))
}

pub(super) fn conflict(message: String) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "move_refused", message)
}

pub(super) fn bad_query(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_query", message)
}

pub(super) fn internal(message: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
}
