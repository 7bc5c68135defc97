//! `GET /cluster`: the map this node follows, each node's address, whether its lease is alive
//! and the partitions it owns; with replicas, the nodes keeping copies of each partition and how
//! many copies hold a write before it is answered, and the copies that lag (stale).

use hyper::StatusCode;
use serde::Serialize;

use crate::http::{
    error::ApiError,
    response::{self, Response},
    state::State,
};

/// Answers `GET /cluster` (404 `not_found` on a server that is no node of a cluster).
pub fn handle(state: &State) -> Result<Response, ApiError> {
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
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        replicas: &'a [Vec<String>],
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        stale: &'a [Vec<String>],
        acks: u32,
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
        node: cluster.node(),
        version: view.map.version,
        partitions: view.map.partitions,
        hash_seed: view.map.hash_seed,
        owners: &view.map.owners,
        replicas: &view.map.replicas,
        stale: &view.map.stale,
        acks: view.map.acks,
        nodes,
    };
    let body = serde_json::to_vec(&map)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(response::json(StatusCode::OK, body))
}
