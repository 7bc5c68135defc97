//! Which requests are another node's, and what this node answers for them; and `GET /cluster`.
//!
//! `/kv/{key}` goes by its key's partition, `/keys` and `/export` by their `partition=`; a
//! request this node cannot place (a malformed key, no partition given) is served here, where
//! it gets its usual 400. The rest (`/batch` aside, split in `super::batch`) acts on this node:
//! `/stats`, `/metrics` and the `/admin/*` routes report on or change this node's own data
//! directory, which holds data only for the partitions it owns.
//!
//! A read of a partition served here (`read`) keeps its answer only if no move gave the
//! partition away while it ran: the move empties this node's copy right after following the
//! map that names the new owner, so the answer could be of the emptied copy; the read then goes
//! to the new owner (docs/cluster.md, "Reads racing the flip").

use std::future::Future;

use bytes::Bytes;
use hyper::{body::Incoming, http::request::Parts, HeaderMap, Method, Request, StatusCode};
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
    match partition_of(cluster, route, req) {
        Some(partition) => place(cluster, partition),
        None => Ok(None),
    }
}

/// The partition the request `req` reads (`GET` or `HEAD` of `/kv/{key}`, `/keys`,
/// `/export`), if it is such a read; `None` for any other request.
pub fn read_of(cluster: &Cluster, route: Route, req: &Request<Incoming>) -> Option<u32> {
    let reads = match route {
        Route::Kv => matches!(*req.method(), Method::GET | Method::HEAD),
        Route::Keys | Route::Export => true,
        _ => false,
    };
    reads.then(|| partition_of(cluster, route, req)).flatten()
}

/// Answers the read `head` of partition `partition`: made here by `serve` while this node owns
/// the partition, else asked of its owner (or 421, as in [`answer`]). An answer made here is
/// kept only if no move gave the partition away meanwhile (the count is read before the map,
/// and the move counts after following the new map, before emptying the copy here): else the
/// read is placed again, and goes to the new owner.
pub async fn read<F>(
    state: &State,
    cluster: &Cluster,
    partition: u32,
    head: &Parts,
    serve: impl Fn() -> F,
) -> Result<Response, ApiError>
where
    F: Future<Output = Result<Response, ApiError>>,
{
    loop {
        let departures = cluster.departures(partition);
        if let Some(owner) = place(cluster, partition)? {
            if !forwards(cluster, &head.headers) {
                return Err(ApiError::misdirected(owner, &cluster.node));
            }
            return cluster.forwarder.forward(&owner, &cluster.node, head, Bytes::new()).await;
        }
        pause_read(state).await;
        let answer = serve().await;
        if cluster.departures(partition) == departures {
            return answer;
        }
    }
}

/// The partition of a request for one partition: `/kv/{key}` by its key, `/keys` and
/// `/export` by their `partition=`; `None` for others, and for those this node cannot place.
fn partition_of(cluster: &Cluster, route: Route, req: &Request<Incoming>) -> Option<u32> {
    match route {
        Route::Kv => {
            parse_key(kv_key(req.uri().path())).ok().map(|key| cluster.view().map.hasher().locate(&key).partition)
        }
        Route::Keys | Route::Export => req.uri().query().and_then(partition_param),
        _ => None,
    }
}

/// Where `partition` is served: `Ok(None)` here (refused while this node does not hold its
/// lease), else its owner.
fn place(cluster: &Cluster, partition: u32) -> Result<Option<Owner>, ApiError> {
    match cluster.elsewhere(partition) {
        Some(owner) => Ok(Some(owner)),
        None => cluster.ensure_leased(partition).map(|()| None),
    }
}

/// Whether this node forwards a request with `headers` for another node's partition: not when
/// it redirects, nor a request forwarded already.
fn forwards(cluster: &Cluster, headers: &HeaderMap) -> bool {
    !cluster.redirect && !headers.contains_key(FORWARDED_BY)
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
async fn pause_read(state: &State) {
    let pause = state.options.test_read_pause;
    if !pause.is_zero() {
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
    if !forwards(cluster, req.headers()) {
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
