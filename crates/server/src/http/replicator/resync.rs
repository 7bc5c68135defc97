//! Bringing a copy up to date from snapshots: for each partition a link announced (`super::link`),
//! the copy node is asked to take the partition in from this node's snapshot (`POST
//! /admin/replicate?part=copy`, which pulls `GET /admin/replicate?part=snapshot` from here); once
//! it has, the node counts for the partition's writes again, and a copy the map named stale is
//! stale no more (an etcd transaction).

use std::{
    collections::BTreeSet,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use bytes::Bytes;
use hyper::{Method, StatusCode};

use super::Shared;

/// How long after a failed copy it is asked for again.
const RETRY: Duration = Duration::from_secs(1);
/// Transactions tried to name copies up to date in the map.
const REFRESH_TRIES: u32 = 20;

/// Has `node` take each of `partitions` in from this node's snapshot, one after another, while
/// the link's stream is the one that announced them (`generation` still at its value).
pub(super) async fn copies(
    shared: Arc<Shared>,
    node: String,
    partitions: BTreeSet<u32>,
    (generation, at): (Arc<AtomicU64>, u64),
) {
    let mut done = Vec::new();
    tracing::debug!(node, ?partitions, "sending snapshots");
    for p in partitions {
        loop {
            if generation.load(Ordering::Relaxed) != at {
                return;
            }
            if !keeps_copy(&shared, &node, p) {
                // The map changed meanwhile (a failover gave the partition away).
                shared.state.resynced(&node, p);
                break;
            }
            match super::ask(&shared, &node, Method::POST, &format!("&part=copy&partition={p}"), Bytes::new()).await {
                Ok((StatusCode::OK, _)) => break,
                Ok((status, body)) => {
                    tracing::warn!(node, partition = p, %status, body = %String::from_utf8_lossy(&body), "a copy's snapshot failed")
                }
                Err(why) => tracing::debug!(node, partition = p, %why, "a copy's snapshot could not be sent"),
            }
            tokio::time::sleep(RETRY).await;
        }
        if keeps_copy(&shared, &node, p) {
            shared.state.resynced(&node, p);
            done.push(p);
            tracing::info!(node, partition = p, "a copy is up to date again");
        }
    }
    let view = shared.cluster.view();
    let stale: Vec<u32> = done.into_iter().filter(|&p| view.map.is_stale(p, &node)).collect();
    let Some(writer) = shared.cluster.map_writer().filter(|_| !stale.is_empty()) else { return };
    // Another change of the map may win the transaction (another owner naming its copies up to
    // date): read it again and try once more.
    for attempt in 1..=REFRESH_TRIES {
        match writer.refresh(&node, &stale).await {
            Ok(_) => return,
            Err(why) if attempt == REFRESH_TRIES => {
                tracing::warn!(node, ?stale, %why, "the copies are up to date, but the map could not say so")
            }
            Err(_) => tokio::time::sleep(RETRY / 5).await,
        }
    }
}

/// Whether this node owns `partition` and `node` keeps a copy of it, in the map in force.
fn keeps_copy(shared: &Shared, node: &str, partition: u32) -> bool {
    let view = shared.cluster.view();
    view.map.owners.get(partition as usize).is_some_and(|o| o == shared.cluster.node())
        && view.map.replicas_of(partition).iter().any(|n| n == node)
}
