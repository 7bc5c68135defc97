//! Which requests are another node's, and what this node answers for them; and `GET /cluster`.
//!
//! `/kv/{key}` goes by its key's partition, `/keys` and `/export` by their `partition=`; a
//! request this node cannot place (a malformed key, no partition given) is served here, where
//! it gets its usual 400. The rest (`/batch` aside, split in `super::batch`) acts on this node:
//! `/stats`, `/metrics` and the `/admin/*` routes report on or change this node's own data
//! directory, which holds data only for the partitions it owns.

use hyper::{body::Incoming, Method, Request, StatusCode};
use serde::Serialize;

use super::{Cluster, Owner, FORWARDED_BY};
use crate::{
    body::{self, Limit},
    error::ApiError,
    key::parse_key,
    response::{self, Response},
    routes::{kv_key, Route},
    state::State,
};

/// Where the request `req` for one partition goes: `Ok(Some(owner))` to another node, `Ok(None)`
/// here (or it is no request for one partition); refused while this node does not hold its
/// lease (`super::lease`).
pub fn owner_elsewhere(cluster: &Cluster, route: Route, req: &Request<Incoming>) -> Result<Option<Owner>, ApiError> {
    let partition = match route {
        Route::Kv => match parse_key(kv_key(req.uri().path())) {
            Ok(key) => cluster.view().map.hasher().locate(&key).partition,
            Err(_) => return Ok(None),
        },
        Route::Keys | Route::Export => match req.uri().query().and_then(partition_param) {
            Some(partition) => partition,
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    match cluster.elsewhere(partition) {
        Some(owner) => Ok(Some(owner)),
        None => cluster.ensure_leased(partition).map(|()| None),
    }
}

/// Waits while a move holds frozen the partition a write (`PUT` or `DELETE` of `/kv/{key}`)
/// goes to, and holds it while the write runs: the guard to keep until it is answered.
pub async fn hold_write(
    cluster: &Cluster,
    route: Route,
    req: &Request<Incoming>,
) -> Vec<tokio::sync::OwnedRwLockReadGuard<()>> {
    if route != Route::Kv || matches!(*req.method(), Method::GET | Method::HEAD) {
        return Vec::new();
    }
    let Ok(key) = parse_key(kv_key(req.uri().path())) else { return Vec::new() };
    let partition = cluster.view().map.hasher().locate(&key).partition;
    cluster.hold([partition]).await
}

/// Waits `--test-read-pause-ms` before a read served here (tests only; nothing by default).
pub async fn pause_read(state: &State, route: Route, req: &Request<Incoming>) {
    let pause = state.options.test_read_pause;
    let read = matches!(route, Route::Keys | Route::Export)
        || (route == Route::Kv && matches!(*req.method(), Method::GET | Method::HEAD));
    if read && !pause.is_zero() {
        tokio::time::sleep(pause).await;
    }
}

/// The `partition=` of a query, if it is a number.
fn partition_param(query: &str) -> Option<u32> {
    query.split('&').find_map(|pair| pair.strip_prefix("partition=")).and_then(|p| p.parse().ok())
}

/// Answers a request for `owner`'s partition: forwarded to it, or 421 when this node redirects
/// or the request was forwarded already (the forwarder's map and this node's disagree: the
/// client, or the forwarder's next map, must resolve it, not another hop).
pub async fn answer(
    state: &State,
    cluster: &Cluster,
    owner: Owner,
    req: Request<Incoming>,
) -> Result<Response, ApiError> {
    if cluster.redirect || req.headers().contains_key(FORWARDED_BY) {
        return Err(ApiError::misdirected(owner, &cluster.node));
    }
    let (head, body) = req.into_parts();
    let max = state.options.batch_max_bytes.max(state.backend.max_value());
    let body =
        body::read(body, Limit { max, code: "value_too_large", what: "the body" }, state.options.body_timeout).await?;
    cluster.forwarder.forward(&owner, &cluster.node, &head, body.into()).await
}

/// `GET /cluster`: the map this node follows, each node's address, whether its lease is
/// alive and the partitions it owns.
pub fn map(state: &State) -> Result<Response, ApiError> {
    #[derive(Serialize)]
    struct Node<'a> {
        id: &'a str,
        address: &'a str,
        alive: bool,
        partitions: Vec<u32>,
    }
    #[derive(Serialize)]
    struct Map<'a> {
        node: &'a str,
        version: u64,
        partitions: u32,
        hash_seed: u64,
        owners: &'a [String],
        nodes: Vec<Node<'a>>,
    }
    let Some(cluster) = &state.cluster else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no cluster map: this server is not a node of a cluster (shardlite serve --cluster)",
        ));
    };
    let view = cluster.view();
    let nodes = view
        .addresses
        .iter()
        .map(|(id, address)| Node { id, address, alive: view.alive.contains(id), partitions: view.map.owned_by(id) })
        .collect();
    let map = Map {
        node: &cluster.node,
        version: view.map.version,
        partitions: view.map.partitions,
        hash_seed: view.map.hash_seed,
        owners: &view.map.owners,
        nodes,
    };
    let body = serde_json::to_vec(&map)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(response::json(StatusCode::OK, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_parameter_is_found_anywhere_in_the_query() {
        assert_eq!(partition_param("partition=3"), Some(3));
        assert_eq!(partition_param("limit=5&partition=12&after=9"), Some(12));
        assert_eq!(partition_param("partition=x"), None);
        assert_eq!(partition_param("limit=5"), None);
    }
}
