//! Moving a partition to another node (docs/cluster.md, "Moving a partition"): `/admin/move`
//! (role `admin`), and the node-to-node routes it drives, `/admin/adopt` and
//! `/admin/move/records` (role `node`: the nodes send their own token, never the client's), all
//! answered by the nodes involved themselves (never forwarded).
//!
//! ```text
//!  POST /admin/move?partition=P&to=NODE    on P's owner (the source), writes to P going on:
//!    │ └─> POST /admin/adopt?partition=P&from=SOURCE            on NODE: the copy, then rounds
//!    │       └─> GET /admin/move/records?partition=P                of changes until few are
//!    │       └─> GET /admin/move/records?partition=P&part=changes   left (a round each)
//!    │     freeze P's writes here (at most --move-freeze-timeout-ms):
//!    │ └─> POST /admin/adopt?partition=P&from=SOURCE&part=last  on NODE: the last changes
//!    │       └─> GET /admin/move/records?partition=P&part=changes
//!    │     flip the map in etcd, follow it, unfreeze (the held writes are then forwarded),
//!    │     empty the stale copy here
//! ```
//!
//! A move that fails at any step leaves the map as it was and unfreezes the partition; the
//! target empties what it took in when its own step fails.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use http_body_util::BodyExt;
use hyper::{body::Incoming, Method, Request, StatusCode};
use serde::{Deserialize, Serialize};
use shardlite_engine::MovePart;

use super::common::{
    bad_query, call, conflict, failed, internal, json, node_of_cluster, param, partition_of, post_step,
};
use crate::{
    backend::{Chunks, Departure},
    cluster::{Cluster, MapWriter, Owner},
    http::{
        error::ApiError,
        response::{self, Response, OCTET_STREAM},
        state::State,
    },
};

/// A round of catching up that carried at most this many changes leaves few enough for the
/// last round, under the freeze.
const CAUGHT_UP: u64 = 1000;
/// Rounds of catching up before the freeze whatever is left (writes faster than a round
/// applies them never leave fewer): the freeze's timeout bounds the last round then.
const MAX_ROUNDS: u32 = 10;

/// What `POST /admin/move` answers once the partition has its new owner.
#[derive(Debug, Serialize)]
struct Moved {
    partition: u32,
    from: String,
    to: String,
    /// Records the new owner holds at the flip.
    records: u64,
    /// Bytes of the transfer streams (the copy and every round of changes).
    bytes: u64,
    /// Rounds of changes sent while writes went on (the last one, under the freeze, aside).
    rounds: u32,
    /// Changes sent in the last round, under the freeze.
    last_changes: u64,
    /// The move, from its start to the map naming the new owner, seconds.
    seconds: f64,
    /// How long writes to the partition were held, milliseconds.
    write_pause_ms: f64,
    /// The map version that names the new owner.
    map_version: u64,
    /// Records of the stale copy emptied here after the flip.
    dropped: u64,
}

/// What `POST /admin/adopt` answers.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Adopted {
    /// The partition's records as of the last stream taken in.
    records: u64,
    /// Bytes of the streams taken in.
    bytes: u64,
    /// Rounds of changes taken in.
    rounds: u32,
    /// Changes in the last of them.
    changes: u64,
}

/// `POST /admin/move?partition=P&to=NODE`: moves partition `P`, owned by this node, to `NODE`.
/// The move runs to its end in a task of its own even if the client goes away, so that the
/// partition never stays frozen, or claimed by a move no one finishes.
pub async fn run(state: Arc<State>, req: Request<Incoming>) -> Result<Response, ApiError> {
    tokio::spawn(async move { move_partition(&state, req).await })
        .await
        .map_err(|e| internal(format!("the move failed: {e}")))?
}

async fn move_partition(state: &State, req: Request<Incoming>) -> Result<Response, ApiError> {
    let cluster = node_of_cluster(state)?;
    let query = req.uri().query().unwrap_or_default();
    let partition = partition_of(cluster, query)?;
    let to = param(query, "to")?;
    let view = cluster.view();
    if view.map.owners[partition as usize] != cluster.node() {
        return Err(conflict(format!(
            "node `{}` does not own partition {partition} (node `{}` does, map version {}): ask its owner",
            cluster.node(),
            view.map.owners[partition as usize],
            view.map.version
        )));
    }
    if to == cluster.node() {
        return Err(conflict(format!("partition {partition} is on node `{to}` already")));
    }
    let Some(address) = view.addresses.get(&to) else {
        return Err(bad_query(format!("no node `{to}` in the cluster map")));
    };
    let Some(writer) = cluster.map_writer() else {
        return Err(internal("this node cannot change the cluster map".into()));
    };
    if !view.map.replicas_of(partition).is_empty() {
        return super::handover::run(state, cluster, writer.as_ref(), partition, &to).await;
    }
    let target = Owner { partition, node: to.clone(), address: address.clone(), map_version: view.map.version };
    let started = Instant::now();
    state.backend.depart(partition, Departure::Starting).await.map_err(|err| conflict(err.to_string()))?;
    let copied = ask_adopt(state, cluster, &target, "").await;
    let copied = match copied {
        Ok(copied) => copied,
        Err(err) => return Err(kept(state, partition, err).await),
    };
    let frozen = cluster.moves().freeze(partition).await;
    let paused = Instant::now();
    let timeout = state.options.move_freeze_timeout_ms;
    let flipped = flip(state, cluster, writer.as_ref(), &target, timeout).await;
    let write_pause = paused.elapsed();
    drop(frozen);
    let (last, map_version) = match flipped {
        Ok(flipped) => flipped,
        Err(err) => return Err(kept(state, partition, err).await),
    };
    let seconds = started.elapsed().as_secs_f64();
    let dropped = state.backend.depart(partition, Departure::Gone).await.unwrap_or_else(|err| {
        tracing::error!(partition, %err, "emptying the stale copy of a moved partition failed");
        0
    });
    let pause_ms = write_pause.as_millis() as u64;
    tracing::info!(partition, to = %to, records = last.records, pause_ms, "partition moved");
    let moved = Moved {
        partition,
        from: cluster.node().to_owned(),
        to,
        records: last.records,
        bytes: copied.bytes + last.bytes,
        rounds: copied.rounds,
        last_changes: last.changes,
        seconds,
        write_pause_ms: write_pause.as_secs_f64() * 1e3,
        map_version,
        dropped,
    };
    json(&moved)
}

/// Under the freeze: the target takes the last changes in, then the map names it. The first
/// step must end within `timeout`; the map's transaction starts only within it and, once sent,
/// is waited for (abandoning it could leave the map changed while this node serves on).
async fn flip(
    state: &State,
    cluster: &Cluster,
    writer: &dyn MapWriter,
    target: &Owner,
    timeout: Duration,
) -> Result<(Adopted, u64), ApiError> {
    let (partition, to) = (target.partition, &target.node);
    let deadline = Instant::now() + timeout;
    let too_long = || {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "move_failed",
            format!(
                "the last changes did not reach node `{to}` within the freeze's {} ms (--move-freeze-timeout-ms): \
                 the cluster map was not changed",
                timeout.as_millis()
            ),
        )
    };
    let last = tokio::time::timeout(timeout, ask_adopt(state, cluster, target, "&part=last"))
        .await
        .map_err(|_| too_long())??;
    if Instant::now() >= deadline {
        return Err(too_long());
    }
    state.backend.depart(partition, Departure::Leaving).await?;
    let view = writer.reassign(partition, cluster.node(), to, &[]).await.map_err(|why| {
        ApiError::new(StatusCode::CONFLICT, "move_failed", format!("the cluster map was not changed: {why}"))
    })?;
    let map_version = view.map.version;
    // Followed here before the held writes go: each of them then finds the new owner.
    if let Err(why) = cluster.apply(view) {
        tracing::error!(why, "cannot follow the map this node just wrote");
    }
    // Before the stale copy is emptied: a read of the partition under way here learns that
    // its answer may be of the emptied copy.
    cluster.moves().gave_away(partition);
    Ok((last, map_version))
}

/// The move failed with `err`: the partition stays here as it is. Returns `err`.
async fn kept(state: &State, partition: u32, err: ApiError) -> ApiError {
    if let Err(why) = state.backend.depart(partition, Departure::Kept).await {
        tracing::error!(partition, err = %why, "ending a failed move");
    }
    err
}

/// Asks the target to take the partition in (`POST /admin/adopt`, with `extra` query).
async fn ask_adopt(state: &State, cluster: &Cluster, target: &Owner, extra: &str) -> Result<Adopted, ApiError> {
    let path = format!("/admin/adopt?partition={}&from={}{extra}", target.partition, cluster.node());
    post_step(state, cluster, target, &path).await
}

/// `POST /admin/adopt?partition=P&from=NODE[&part=last]`: takes partition `P` in from node
/// `NODE`: its copy, then rounds of changes until few are left; with `part=last`, one round.
pub async fn adopt(state: &State, req: Request<Incoming>) -> Result<Response, ApiError> {
    let cluster = node_of_cluster(state)?;
    let query = req.uri().query().unwrap_or_default();
    let partition = partition_of(cluster, query)?;
    let from = param(query, "from")?;
    let last = match param(query, "part") {
        Ok(part) if part == "last" => true,
        Ok(part) => return Err(bad_query(format!("`part` may only be `last`, not `{part}`"))),
        Err(_) => false,
    };
    let view = cluster.view();
    if view.map.owners[partition as usize] == cluster.node() {
        return Err(conflict(format!(
            "node `{}` owns partition {partition}: it takes in only partitions it does not serve",
            cluster.node()
        )));
    }
    let Some(address) = view.addresses.get(&from) else {
        return Err(bad_query(format!("no node `{from}` in the cluster map")));
    };
    let source = Owner { partition, node: from.clone(), address: address.clone(), map_version: view.map.version };
    let mut adopted = Adopted::default();
    if !last {
        pull(state, cluster, &source, MovePart::Copy, &mut adopted).await?;
        while adopted.rounds < MAX_ROUNDS {
            pull(state, cluster, &source, MovePart::Changes, &mut adopted).await?;
            if adopted.changes <= CAUGHT_UP {
                break;
            }
        }
    } else {
        pull(state, cluster, &source, MovePart::Changes, &mut adopted).await?;
    }
    json(&adopted)
}

/// Pulls `part` of the partition from `source` and takes it in, adding to `adopted`.
async fn pull(
    state: &State,
    cluster: &Cluster,
    source: &Owner,
    part: MovePart,
    adopted: &mut Adopted,
) -> Result<(), ApiError> {
    let (partition, from) = (source.partition, &source.node);
    let path = match part {
        MovePart::Copy => format!("/admin/move/records?partition={partition}"),
        MovePart::Changes => format!("/admin/move/records?partition={partition}&part=changes"),
    };
    let (status, _, body) = call(state, cluster, source, Method::GET, &path).await?;
    if status != StatusCode::OK {
        let answer = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        return Err(failed(from, &format!("{status} {}", String::from_utf8_lossy(&answer))));
    }
    let (chunks, relay) = relay(body);
    let received = state.backend.adopt(partition, part, chunks).await?;
    adopted.bytes += relay.await.map_err(|e| internal(e.to_string()))?;
    adopted.records = received.live;
    if part == MovePart::Changes {
        adopted.rounds += 1;
        adopted.changes = received.entries;
    }
    Ok(())
}

/// The chunks of `body` as they arrive, on a channel, and the task relaying them, which ends
/// with the bytes relayed.
pub(super) fn relay(mut body: Incoming) -> (Chunks, tokio::task::JoinHandle<u64>) {
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
    (chunks, relay)
}

/// `GET /admin/move/records?partition=P[&part=changes]`: partition `P` as a transfer stream:
/// its copy, or the records changed since the last stream.
pub async fn records(state: &State, query: Option<&str>) -> Result<Response, ApiError> {
    let query = query.unwrap_or_default();
    let partition = partition_of(node_of_cluster(state)?, query)?;
    let part = match param(query, "part") {
        Ok(part) if part == "changes" => MovePart::Changes,
        Ok(part) => return Err(bad_query(format!("`part` may only be `changes`, not `{part}`"))),
        Err(_) => MovePart::Copy,
    };
    let stream = state.backend.send_partition(partition, part).await?;
    Ok(response::streamed(OCTET_STREAM, None, stream.chunks))
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
