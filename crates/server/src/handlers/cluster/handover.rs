//! Moving the ownership of a partition with copies to one of its copies (docs/cluster.md,
//! "Moving a partition with copies"): `POST /admin/move?partition=P&to=NODE` on P's owner, NODE
//! keeping an up-to-date copy of P. No record travels: the copy holds them, with the owner's
//! ids, counters and epoch. The owner keeps NODE's place among P's copies, up to date.
//!
//! ```text
//!  freeze P's writes here (those under way finish first), all of what follows within
//!  --move-freeze-timeout-ms:
//!    T = where this node's log ends: every write of P is before it, resolved
//!    each up-to-date copy of P: its link holds the log through T and was told it is committed
//!        that far (NODE must; another one that does not is named stale)
//!    each other copy: POST /admin/replicate?from=ME&part=hand-over&partition=P&through=T
//!        (it applies every transaction of P it holds; failed: named stale); meanwhile
//!    NODE:            POST ...&part=hand-over&partition=P&through=T&epoch=E
//!        (the same, and it keeps this node's epoch E of P: every tag given stays valid)
//!    one etcd transaction: NODE owns P, this node's copy in NODE's place, the stale ones named
//!  follow the new map, unfreeze: the writes held are forwarded to NODE
//! ```
//!
//! The other copies apply what they hold of P before NODE's first transaction of it can reach
//! them: NODE's frames come under the new map, which the copies wait for, and the handover
//! applied this node's transactions of P on them before the map changed. A handover that
//! fails at any step leaves the map as it was and unfreezes the partition: the copies that
//! applied what they held of it are as they would be a moment later anyway.

use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde::Serialize;

use super::common::{conflict, internal, json, post_step};
use crate::{
    cluster::{Cluster, MapWriter, Owner},
    http::{error::ApiError, response::Response, state::State},
};

/// How often the copies' links are looked at while waiting for them to hold the log.
const POLL: Duration = Duration::from_millis(2);

/// What `POST /admin/move` answers once a copy owns the partition.
#[derive(Debug, Serialize)]
struct HandedOver {
    partition: u32,
    from: String,
    to: String,
    /// The partition's live records on its new owner.
    records: u64,
    /// The new owner held a copy already: no record travelled.
    handed_over: bool,
    /// The copies named stale (they did not hold the partition's last writes in time).
    stale: Vec<String>,
    /// The handover, from its start to the map naming the new owner, seconds.
    seconds: f64,
    /// How long writes to the partition were held, milliseconds.
    write_pause_ms: f64,
    /// The map version that names the new owner.
    map_version: u64,
}

/// Makes `to`, which keeps an up-to-date copy of `partition` (owned here), its owner.
pub(super) async fn run(
    state: &State,
    cluster: &Cluster,
    writer: &dyn MapWriter,
    partition: u32,
    to: &str,
) -> Result<Response, ApiError> {
    let view = cluster.view();
    let copies: Vec<String> = view.map.live_replicas_of(partition).into_iter().cloned().collect();
    if !copies.iter().any(|n| n == to) {
        return Err(conflict(format!(
            "node `{to}` keeps no up-to-date copy of partition {partition} (its up-to-date copies: {}): move one \
             there first (`shardlite cluster move {partition} {to} --copy-from NODE`), then the owner",
            if copies.is_empty() { "none".to_owned() } else { copies.join(", ") }
        )));
    }
    let started = Instant::now();
    let frozen = cluster.moves().freeze(partition).await;
    let paused = Instant::now();
    let timeout = state.options.move_freeze_timeout_ms;
    let handed = async {
        let settling = settle_copies(state, cluster, (partition, to), &copies, timeout);
        let (records, stale) =
            tokio::time::timeout(timeout, settling).await.unwrap_or_else(|_| Err(too_long(partition, to, timeout)))?;
        let map_version = flip(cluster, writer, partition, to, &stale).await?;
        Ok::<_, ApiError>((records, stale, map_version))
    };
    let handed = handed.await;
    let write_pause = paused.elapsed();
    drop(frozen);
    let (records, stale, map_version) = handed?;
    tracing::info!(partition, to, records, ?stale, pause_ms = write_pause.as_millis() as u64, "partition handed over");
    json(&HandedOver {
        partition,
        from: cluster.node().to_owned(),
        to: to.to_owned(),
        records,
        handed_over: true,
        stale,
        seconds: started.elapsed().as_secs_f64(),
        write_pause_ms: write_pause.as_secs_f64() * 1e3,
        map_version,
    })
}

/// Under the freeze: waits until the copies hold every write of `partition` (`to` must; the
/// others are waited for half the freeze's `timeout`, and named stale if they do not), has them
/// apply it, `to` becoming its owner, side by side. `to`'s live records, and the stale copies.
async fn settle_copies(
    state: &State,
    cluster: &Cluster,
    (partition, to): (u32, &str),
    copies: &[String],
    timeout: Duration,
) -> Result<(u64, Vec<String>), ApiError> {
    let through = state.backend.log_end().ok_or_else(|| internal("this node has no commit log".into()))?;
    let replication = cluster.replication();
    let patience = Instant::now() + timeout / 2;
    while !copies.iter().all(|n| replication.holds(n, through)) {
        if replication.holds(to, through) && Instant::now() >= patience {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let others = async {
        let mut stale = Vec::new();
        for node in copies.iter().filter(|n| *n != to) {
            let settled = match replication.holds(node, through) {
                true => ask_hand_over(state, cluster, (partition, node), through, None).await.map(drop),
                false => Err(internal(format!("it did not hold this node's log through {through} in time"))),
            };
            if let Err(err) = settled {
                tracing::warn!(partition, node, err = %err.message, "a copy did not take the handover, and is stale");
                stale.push(node.clone());
            }
        }
        stale
    };
    let epoch = state.backend.partition_epoch(partition).unwrap_or(0);
    let (stale, records) = tokio::join!(others, ask_hand_over(state, cluster, (partition, to), through, Some(epoch)));
    Ok((records?, stale))
}

/// `POST /admin/replicate?from=ME&part=hand-over&partition=P&through=T[&epoch=E]` to `node`:
/// its live records of the partition.
async fn ask_hand_over(
    state: &State,
    cluster: &Cluster,
    (partition, node): (u32, &str),
    through: u64,
    epoch: Option<u64>,
) -> Result<u64, ApiError> {
    #[derive(serde::Deserialize)]
    struct Taken {
        records: u64,
    }
    let view = cluster.view();
    let address = view.addresses.get(node).ok_or_else(|| internal(format!("node `{node}` has no address")))?;
    let target = Owner { partition, node: node.to_owned(), address: address.clone(), map_version: view.map.version };
    let epoch = epoch.map(|e| format!("&epoch={e}")).unwrap_or_default();
    let path = format!(
        "/admin/replicate?from={}&part=hand-over&partition={partition}&through={through}{epoch}",
        cluster.node()
    );
    Ok(post_step::<Taken>(state, cluster, &target, &path).await?.records)
}

/// Names `to` the owner of `partition` in etcd (this node keeps its copy's place; the `stale`
/// copies named stale) and follows the new map here, before the writes held go: its version.
async fn flip(
    cluster: &Cluster,
    writer: &dyn MapWriter,
    partition: u32,
    to: &str,
    stale: &[String],
) -> Result<u64, ApiError> {
    let view = writer.reassign(partition, cluster.node(), to, stale).await.map_err(|why| {
        ApiError::new(StatusCode::CONFLICT, "move_failed", format!("the cluster map was not changed: {why}"))
    })?;
    let version = view.map.version;
    if let Err(why) = cluster.apply(view) {
        tracing::error!(why, "cannot follow the map this node just wrote");
    }
    Ok(version)
}

/// 503 `move_failed`: the copies did not hold the partition's writes within the freeze.
fn too_long(partition: u32, to: &str, timeout: Duration) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "move_failed",
        format!(
            "node `{to}` did not take partition {partition} over within the freeze's {} ms \
             (--move-freeze-timeout-ms): the cluster map was not changed",
            timeout.as_millis()
        ),
    )
}
