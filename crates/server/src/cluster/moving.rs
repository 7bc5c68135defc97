//! Moving a partition to another node (docs/cluster.md, "Moving a partition"): three admin
//! routes, all answered by the nodes involved themselves (never forwarded).
//!
//! ```text
//!  POST /admin/move?partition=P&to=NODE    on P's owner (the source): freeze P's writes here,
//!       │                                  ask NODE to take P in, flip the map in etcd, follow
//!       │                                  it, unfreeze (the held writes are then forwarded)
//!       └─> POST /admin/adopt?partition=P&from=SOURCE   on NODE: pull P, take it in
//!                 └─> GET /admin/move/records?partition=P   on the source: P as a transfer stream
//! ```
//!
//! A move that fails at any step leaves the map as it was and unfreezes the partition; the
//! target empties what it took in when its own step fails.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{body::Incoming, header::AUTHORIZATION, http::request::Parts, Method, Request, StatusCode};
use serde::{Deserialize, Serialize};

use super::{Cluster, Owner};
use crate::{
    error::ApiError,
    response::{self, Response, OCTET_STREAM},
    state::State,
};

/// What `POST /admin/move` answers once the partition has its new owner.
#[derive(Debug, Serialize)]
struct Moved {
    partition: u32,
    from: String,
    to: String,
    /// Records taken in by the new owner.
    records: u64,
    /// Bytes of the transfer stream.
    bytes: u64,
    /// The whole move, seconds.
    seconds: f64,
    /// How long writes to the partition were held, milliseconds.
    write_pause_ms: f64,
    /// The map version that names the new owner.
    map_version: u64,
}

/// What `POST /admin/adopt` answers.
#[derive(Debug, Serialize, Deserialize)]
struct Adopted {
    records: u64,
    bytes: u64,
}

/// `POST /admin/move?partition=P&to=NODE`: moves partition `P`, owned by this node, to `NODE`.
pub async fn run(state: &State, req: Request<Incoming>) -> Result<Response, ApiError> {
    let cluster = node_of_cluster(state)?;
    let query = req.uri().query().unwrap_or_default();
    let partition = partition_of(cluster, query)?;
    let to = param(query, "to")?;
    let view = cluster.view();
    if view.map.owners[partition as usize] != cluster.node {
        return Err(conflict(format!(
            "node `{}` does not own partition {partition} (node `{}` does, map version {}): ask its owner",
            cluster.node, view.map.owners[partition as usize], view.map.version
        )));
    }
    if to == cluster.node {
        return Err(conflict(format!("partition {partition} is on node `{to}` already")));
    }
    let Some(address) = view.addresses.get(&to) else {
        return Err(bad_query(format!("no node `{to}` in the cluster map")));
    };
    let Some(writer) = cluster.map_writer.get() else {
        return Err(internal("this node cannot change the cluster map".into()));
    };
    let target = Owner { partition, node: to.clone(), address: address.clone(), map_version: view.map.version };
    let started = Instant::now();
    let frozen = cluster.freeze(partition).await;
    let paused = Instant::now();
    let moved = async {
        let path = format!("/admin/adopt?partition={partition}&from={}", cluster.node);
        let (status, body) = call(cluster, &target, Method::POST, &path, &req).await?;
        let answer = body.collect().await.map_err(|e| failed(&to, &e.to_string()))?.to_bytes();
        if status != StatusCode::OK {
            return Err(failed(&to, &format!("{status} {}", String::from_utf8_lossy(&answer))));
        }
        let adopted: Adopted = serde_json::from_slice(&answer).map_err(|e| failed(&to, &e.to_string()))?;
        let view = writer.reassign(partition, &cluster.node, &to).await.map_err(|why| {
            ApiError::new(StatusCode::CONFLICT, "move_failed", format!("the cluster map was not changed: {why}"))
        })?;
        let map_version = view.map.version;
        // Followed here before the held writes go: each of them then finds the new owner.
        if let Err(why) = cluster.apply(view) {
            tracing::error!(why, "cannot follow the map this node just wrote");
        }
        Ok::<_, ApiError>((adopted, map_version))
    }
    .await;
    let write_pause = paused.elapsed();
    drop(frozen);
    let (adopted, map_version) = moved?;
    tracing::info!(partition, to = %to, records = adopted.records, pause_ms = write_pause.as_millis() as u64, "partition moved");
    let moved = Moved {
        partition,
        from: cluster.node.clone(),
        to,
        records: adopted.records,
        bytes: adopted.bytes,
        seconds: started.elapsed().as_secs_f64(),
        write_pause_ms: write_pause.as_secs_f64() * 1e3,
        map_version,
    };
    json(&moved)
}

/// `POST /admin/adopt?partition=P&from=NODE`: takes partition `P` in from node `NODE`.
pub async fn adopt(state: &State, req: Request<Incoming>) -> Result<Response, ApiError> {
    let cluster = node_of_cluster(state)?;
    let query = req.uri().query().unwrap_or_default();
    let partition = partition_of(cluster, query)?;
    let from = param(query, "from")?;
    let view = cluster.view();
    if view.map.owners[partition as usize] == cluster.node {
        return Err(conflict(format!(
            "node `{}` owns partition {partition}: it takes in only partitions it does not serve",
            cluster.node
        )));
    }
    let Some(address) = view.addresses.get(&from) else {
        return Err(bad_query(format!("no node `{from}` in the cluster map")));
    };
    let source = Owner { partition, node: from.clone(), address: address.clone(), map_version: view.map.version };
    let path = format!("/admin/move/records?partition={partition}");
    let (status, mut body) = call(cluster, &source, Method::GET, &path, &req).await?;
    if status != StatusCode::OK {
        let answer = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        return Err(failed(&from, &format!("{status} {}", String::from_utf8_lossy(&answer))));
    }
    let (sender, chunks) = tokio::sync::mpsc::channel(16);
    let relay = tokio::spawn(async move {
        let mut bytes = 0u64;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                bytes += data.len() as u64;
                if sender.send(data).await.is_err() {
                    break;
                }
            }
        }
        bytes
    });
    let records = state.backend.adopt(partition, chunks).await?;
    let bytes = relay.await.map_err(|e| internal(e.to_string()))?;
    json(&Adopted { records, bytes })
}

/// `GET /admin/move/records?partition=P`: partition `P` as a transfer stream.
pub async fn records(state: &State, query: Option<&str>) -> Result<Response, ApiError> {
    let partition = partition_of(node_of_cluster(state)?, query.unwrap_or_default())?;
    let stream = state.backend.send_partition(partition).await?;
    Ok(response::streamed(OCTET_STREAM, stream.chunks))
}

/// Asks node `to` for `path` on behalf of the request `req` (whose token it carries).
async fn call(
    cluster: &Cluster,
    to: &Owner,
    method: Method,
    path: &str,
    req: &Request<Incoming>,
) -> Result<(StatusCode, Incoming), ApiError> {
    let mut head = Request::new(());
    *head.method_mut() = method;
    *head.uri_mut() = path.parse().map_err(|e: hyper::http::uri::InvalidUri| internal(e.to_string()))?;
    if let Some(token) = req.headers().get(AUTHORIZATION) {
        head.headers_mut().insert(AUTHORIZATION, token.clone());
    }
    let (head, ()): (Parts, ()) = head.into_parts();
    let answer = cluster.forwarder.send(to, &cluster.node, &head, Bytes::new()).await?;
    let (parts, body) = answer.into_parts();
    Ok((parts.status, body))
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
fn failed(node: &str, why: &str) -> ApiError {
    ApiError::new(StatusCode::BAD_GATEWAY, "move_failed", format!("node `{node}` failed its step of the move: {why}"))
}

fn conflict(message: String) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "move_refused", message)
}

pub(super) fn bad_query(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_query", message)
}

pub(super) fn internal(message: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_found_by_their_whole_name() {
        assert_eq!(param("partition=3&to=n2", "to").unwrap(), "n2");
        assert_eq!(param("top=1&to=n2", "to").unwrap(), "n2");
        assert!(param("partition=3", "to").unwrap_err().message.contains("`to=`"));
        assert!(param("to=", "to").is_err());
    }
}
