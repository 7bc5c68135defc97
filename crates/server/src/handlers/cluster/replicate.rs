//! `/admin/replicate?from=NODE` (role `node`; docs/cluster.md, "Replicas"): what the nodes of a
//! cluster with replicas ask each other.
//!
//! ```text
//!  POST                                   a frame of NODE's writes for the copies kept here:
//!                                         200 {"position": N} once durable here; 409 copy_behind
//!                                         (or a write of a partition NODE does not own here)
//!  at a failover of NODE (dead: no lease in this node's map):
//!  POST &part=seal                        take no more frames of NODE's: {"position": N | null,
//!                                         "awaiting": [partitions waiting for a snapshot]}
//!  GET  &part=tail&partition=P&after=N    NODE's transactions of P held here from N (a frame)
//!  POST &part=catch-up&partition=P        a more advanced copy's tail taken in, every
//!                                         transaction of P held applied: {"partition": P}
//!  NODE, alive, hands partition P over (its ownership moves to a copy; NODE writes P no more):
//!  POST &part=hand-over&partition=P&through=T[&epoch=E]   once NODE's log is held here through
//!                                T and committed that far: every transaction of P held
//!                                applied; with `epoch`, this node becomes P's owner, keeping
//!                                NODE's epoch E: {"partition": P, "records": N}
//!  a copy NODE is to take from a snapshot (its owner's link announced P in a new stream):
//!  POST &part=copy&partition=P   on the copy: pulls the next one from NODE, takes P in from it,
//!                                applies what it held of NODE's log since: {"partition", "records"}
//!  GET  &part=snapshot&partition=P   on the owner: P as a transfer stream, and in the header
//!                                `Shardlite-Log-Position` where in its log the snapshot is
//! ```
//!
//! The failover (`shardlite cluster failover`) seals every live copy, makes the most advanced one
//! owner (`POST /admin/takeover`), and brings the others up to it with its tail.

use http_body_util::BodyExt;
use hyper::{
    body::Incoming,
    header::{HeaderName, HeaderValue},
    Method, Request, StatusCode,
};
use serde::Serialize;
use serde_json::json;
use shardlite_engine::{
    commitlog::format::Raw,
    replication::{Frame, Receipt},
};

use super::{
    common::{bad_query, call, internal, json, node_of_cluster, param, partition_of},
    moving::relay,
};
use crate::{
    cluster::{Cluster, Owner},
    http::{
        body::{self, Limit},
        error::ApiError,
        forward,
        response::{self, Response, OCTET_STREAM},
        state::State,
    },
};

/// The largest frame taken in: an owner that could not reach this node for a while sends what
/// waited as one frame, up to its own bound (256 MiB) and a margin.
const MAX_FRAME: usize = 320 << 20;

/// What a copy answers a frame it holds.
#[derive(Debug, Serialize)]
struct Position {
    position: Option<u64>,
}

/// `/admin/replicate?from=NODE[&part=...]`.
pub async fn handle(state: &State, req: Request<Incoming>) -> Result<Response, ApiError> {
    let cluster = node_of_cluster(state)?;
    let query = req.uri().query().unwrap_or_default().to_owned();
    let from = param(&query, "from")?;
    let view = cluster.view();
    if !view.addresses.contains_key(&from) || from == cluster.node() {
        return Err(bad_query(format!(
            "`{from}` is not another node of the cluster map (version {})",
            view.map.version
        )));
    }
    let part = param(&query, "part").ok();
    match (req.method(), part.as_deref()) {
        (&Method::POST, None) => {
            let theirs = forward::map_version(req.headers());
            receive(state, cluster, &from, theirs, req.into_body()).await
        }
        (&Method::POST, Some("seal")) => {
            refuse_unless_dead(cluster, &from)?;
            let sealed = state.backend.seal(from).await?;
            json(&json!({ "position": sealed.position, "awaiting": sealed.awaiting }))
        }
        (&Method::GET, Some("tail")) => {
            let partition = partition_of(cluster, &query)?;
            let after = number(&query, "after")?;
            let tail = state.backend.tail(from, partition, after).await?;
            Ok(response::with_body(StatusCode::OK, OCTET_STREAM, tail))
        }
        (&Method::POST, Some("catch-up")) => {
            refuse_unless_dead(cluster, &from)?;
            let partition = partition_of(cluster, &query)?;
            let frame = read_frame(state, req.into_body()).await?;
            state.backend.catch_up(from, partition, frame.into()).await?;
            json(&json!({ "partition": partition }))
        }
        (&Method::POST, Some("hand-over")) => {
            let partition = partition_of(cluster, &query)?;
            refuse_unless_owner(cluster, &from, partition)?;
            let through = number(&query, "through")?;
            let epoch = param(&query, "epoch").ok().map(|_| number(&query, "epoch")).transpose()?;
            let records = state.backend.hand_over(from, partition, through, epoch).await?;
            json(&json!({ "partition": partition, "records": records }))
        }
        (&Method::GET, Some("snapshot")) => {
            let partition = partition_of(cluster, &query)?;
            snapshot(state, cluster, &from, partition).await
        }
        (&Method::POST, Some("copy")) => {
            let partition = partition_of(cluster, &query)?;
            take_copy(state, cluster, &from, partition).await
        }
        (method, part) => Err(bad_query(format!(
            "{method} /admin/replicate takes part = {}, not `{}`",
            if method == Method::GET {
                "tail or snapshot"
            } else {
                "seal, catch-up, hand-over or copy (or none: a frame)"
            },
            part.unwrap_or_default()
        ))),
    }
}

/// A frame of `from`'s writes, sent under map version `theirs`: 200 once durable here, or 409
/// `copy_behind`. Sent under a newer map than this node's, it has waited for that map as every
/// forwarded request does (`super::route::catch_up`); one holding a write of a partition `from`
/// does not own in this node's map is refused (an owner cut off by a failover, not yet aware of
/// it). An owner a failover sealed here (dead, then) is heard again once it is alive in this
/// node's view: it registered again. That is safe: the failover's etcd transaction fails if the
/// owner registered before it (it stays the owner, and the copies may hold its writes), and a
/// map the failover did change came before the registration, in the order this node's watch
/// delivers them, so the check above refuses the owner's writes of the partitions it lost.
async fn receive(
    state: &State,
    cluster: &Cluster,
    from: &str,
    theirs: Option<u64>,
    body: Incoming,
) -> Result<Response, ApiError> {
    let bytes = read_frame(state, body).await?;
    let frame = Frame::decode(&bytes).map_err(|e| bad_query(e.to_string()))?;
    let view = cluster.view();
    let foreign = frame.txs.iter().filter_map(|(lsn, body)| Raw { lsn: *lsn, body }.partition());
    if let Some(p) = foreign.into_iter().find(|&p| view.map.owners.get(p as usize).is_none_or(|o| o != from)) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "copy_behind",
            format!(
                "partition {p} is not node `{from}`'s in this node's map (version {}; the frame's {})",
                view.map.version,
                theirs.map_or("not said".to_owned(), |v| v.to_string())
            ),
        ));
    }
    if view.alive.contains(from) && state.backend.unseal(from.to_owned())? {
        tracing::info!(owner = from, map_version = view.map.version, "an owner sealed by a failover is heard again");
    }
    match state.backend.receive(from.to_owned(), frame).await? {
        Receipt::Held { position } => json(&Position { position: Some(position) }),
        Receipt::Behind { position } => {
            let held = position.map_or_else(|| "nothing since it started".to_owned(), |p| format!("up to {p}"));
            Err(ApiError::new(
                StatusCode::CONFLICT,
                "copy_behind",
                format!(
                    "this node holds node `{from}`'s log {held}: the frame does not follow it, or a failover sealed \
                     `{from}`"
                ),
            ))
        }
    }
}

/// The header of a snapshot's answer: where in the owner's log it is.
const LOG_POSITION: HeaderName = HeaderName::from_static("shardlite-log-position");

/// `partition` as a transfer stream for `copy`, a node keeping a copy of it, with the position
/// in this node's log the snapshot holds every transaction before.
async fn snapshot(state: &State, cluster: &Cluster, copy: &str, partition: u32) -> Result<Response, ApiError> {
    let view = cluster.view();
    if view.map.owners[partition as usize] != cluster.node()
        || !view.map.replicas_of(partition).iter().any(|n| n == copy)
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "copy_behind",
            format!(
                "node `{copy}` keeps no copy of partition {partition} owned here (map version {})",
                view.map.version
            ),
        ));
    }
    let (position, chunks) = state.backend.send_copy(partition).await?;
    let mut answer = response::streamed(OCTET_STREAM, None, chunks);
    answer.headers_mut().insert(LOG_POSITION, HeaderValue::from(position));
    Ok(answer)
}

/// Takes `partition` in from `owner`'s snapshot, pulled from it, in place of this node's copy.
async fn take_copy(state: &State, cluster: &Cluster, owner: &str, partition: u32) -> Result<Response, ApiError> {
    let view = cluster.view();
    let address = view.addresses.get(owner).cloned().unwrap_or_default();
    let source = Owner { partition, node: owner.to_owned(), address, map_version: view.map.version };
    let path = format!("/admin/replicate?from={}&part=snapshot&partition={partition}", cluster.node());
    tracing::debug!(owner, partition, "pulling a snapshot");
    let (status, headers, body) = call(state, cluster, &source, Method::GET, &path).await?;
    tracing::debug!(owner, partition, %status, "a snapshot's answer");
    let position = headers.get(LOG_POSITION).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let Some(position) = position.filter(|_| status == StatusCode::OK) else {
        let answer = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "copy_failed",
            format!(
                "node `{owner}` sent no snapshot of partition {partition}: {status} {}",
                String::from_utf8_lossy(&answer)
            ),
        ));
    };
    let (chunks, relay) = relay(body);
    let received = state.backend.take_copy(owner.to_owned(), partition, position, chunks).await?;
    relay.await.map_err(|e| internal(e.to_string()))?;
    json(&json!({ "partition": partition, "records": received.live }))
}

async fn read_frame(state: &State, body: Incoming) -> Result<Vec<u8>, ApiError> {
    let limit = Limit { max: MAX_FRAME, code: "frame_too_large", what: "the replication frame" };
    body::read(body, limit, state.options.body_timeout_ms).await
}

/// Refuses unless `node` holds no lease in this node's map: a live owner may still be writing.
fn refuse_unless_dead(cluster: &Cluster, node: &str) -> Result<(), ApiError> {
    match cluster.view().alive.contains(node) {
        false => Ok(()),
        true => Err(ApiError::new(
            StatusCode::CONFLICT,
            "failover_refused",
            format!("node `{node}` holds its lease: only a dead node's copies are sealed or brought up to date"),
        )),
    }
}

/// Refuses unless `node` owns `partition` in this node's map and this node keeps an up-to-date
/// copy of it: only its owner hands it over, to a copy that holds it.
fn refuse_unless_owner(cluster: &Cluster, node: &str, partition: u32) -> Result<(), ApiError> {
    let view = cluster.view();
    let refused = if view.map.owners[partition as usize] != node {
        format!("node `{node}` does not own partition {partition} in this node's map (version {})", view.map.version)
    } else if !view.map.live_replicas_of(partition).iter().any(|n| *n == cluster.node()) {
        format!(
            "node `{}` keeps no up-to-date copy of partition {partition} in its map (version {})",
            cluster.node(),
            view.map.version
        )
    } else {
        return Ok(());
    };
    Err(ApiError::new(StatusCode::CONFLICT, "move_refused", format!("{refused}: no handover")))
}

/// The query's `name=`, a number (a log position or an epoch).
fn number(query: &str, name: &str) -> Result<u64, ApiError> {
    let value = param(query, name)?;
    value.parse().map_err(|_| bad_query(format!("`{name}` must be a number, not `{value}`")))
}
