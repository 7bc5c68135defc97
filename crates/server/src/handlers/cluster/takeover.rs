//! `POST /admin/takeover?partition=P&from=NODE`: this node's step of a failover
//! (docs/cluster.md, "Failover"). Node `NODE` is dead (no lease) and owned partition `P`. With
//! replicas, this node keeps a copy of `P` (the failover sealed it and found it the most
//! advanced): it applies every transaction of `NODE`'s it holds for `P` and keeps `NODE`'s epoch
//! ([`promote`](crate::backend::Backend::promote)). Otherwise it restores `P` from `NODE`'s
//! Litestream replica (the binary's `Restorer`) and takes it in through the adopt path of a
//! move, records, ids, counters and `next_id` as the replica holds them. The map is not changed
//! here: whoever runs the failover changes the owners of all of `NODE`'s partitions in one etcd
//! transaction once every survivor has taken its share in.
//!
//! ```text
//!  checks: P exists, NODE owns P in this node's map, NODE's lease is gone, P is not this node's
//!  a copy of P here: backend.promote(NODE, P) ─> answer {partition, from, records, copy: true, seconds}
//!  else Restorer: NODE's replica of P ─> a database file ─> a transfer stream
//!    backend.adopt(P, stream): P emptied here, the records inserted, next_id noted, index rebuilt
//!    answer: {partition, from, records, copy: false, replica_txid, restore_seconds, seconds}
//! ```

use std::time::Instant;

use hyper::{body::Incoming, Request, StatusCode};
use serde::Serialize;
use shardlite_engine::MovePart;

use super::common::{bad_query, internal, json, node_of_cluster, param, partition_of};
use crate::{
    cluster::Cluster,
    http::{error::ApiError, response::Response, state::State},
};

/// What `POST /admin/takeover` answers.
#[derive(Debug, Serialize)]
struct TakenOver {
    partition: u32,
    from: String,
    /// Records taken in.
    records: u64,
    /// This node's copy was made the partition (with replicas), not a Litestream replica.
    copy: bool,
    /// The Litestream replica's last transaction restored: writes the dead node committed
    /// after it are not in the partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    replica_txid: Option<String>,
    /// Restoring the Litestream replica, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    restore_seconds: Option<f64>,
    /// The whole step (restore and taking in), seconds.
    seconds: f64,
}

/// `POST /admin/takeover?partition=P&from=NODE`.
pub async fn run(state: &State, req: Request<Incoming>) -> Result<Response, ApiError> {
    let cluster = node_of_cluster(state)?;
    let query = req.uri().query().unwrap_or_default();
    let partition = partition_of(cluster, query)?;
    let from = param(query, "from")?;
    refuse_unless_dead_owner(cluster, partition, &from)?;
    let started = Instant::now();
    if cluster.view().map.live_replicas_of(partition).iter().any(|n| *n == cluster.node()) {
        let records = state.backend.promote(from.clone(), partition).await?;
        tracing::info!(partition, from = %from, records, "partition taken over from this node's copy");
        let seconds = started.elapsed().as_secs_f64();
        return json(&TakenOver {
            partition,
            from,
            records,
            copy: true,
            replica_txid: None,
            restore_seconds: None,
            seconds,
        });
    }
    let Some(restorer) = cluster.restorer() else {
        return Err(internal("this node cannot restore replicas".into()));
    };
    let restored = restorer.restore(partition, &from).await.map_err(|why| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "failover_failed",
            format!("restoring partition {partition} of node `{from}` from its replica failed: {why}"),
        )
    })?;
    let records = state.backend.adopt(partition, MovePart::Copy, restored.chunks).await?.live;
    tracing::info!(partition, from = %from, records, txid = %restored.replica_txid, "partition taken over");
    json(&TakenOver {
        partition,
        from,
        records,
        copy: false,
        replica_txid: Some(restored.replica_txid),
        restore_seconds: Some(restored.restore_seconds),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Refuses unless `from` owns `partition` in this node's map and holds no lease, and this node
/// is another node: a live owner may still be writing the partition.
fn refuse_unless_dead_owner(cluster: &Cluster, partition: u32, from: &str) -> Result<(), ApiError> {
    let view = cluster.view();
    if !view.addresses.contains_key(from) {
        return Err(bad_query(format!("no node `{from}` in the cluster map")));
    }
    let owner = &view.map.owners[partition as usize];
    let refused = if owner != from {
        format!(
            "node `{from}` does not own partition {partition} (node `{owner}` does, map version {})",
            view.map.version
        )
    } else if view.alive.contains(from) {
        format!("node `{from}` holds its lease: a failover takes over only the partitions of a dead node")
    } else if from == cluster.node() {
        format!("node `{from}` cannot take its own partition over")
    } else {
        return Ok(());
    };
    Err(ApiError::new(StatusCode::CONFLICT, "failover_refused", refused))
}
