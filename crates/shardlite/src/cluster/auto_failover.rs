//! `serve --auto-failover`: every live node with the setting watches the other nodes' leases
//! in the view it follows; when a node it saw alive loses its lease (and did not stop in order:
//! `stopped/ID`), the watching nodes race for the claim on its failover (`failover/ID` in etcd,
//! created only if absent, on the claimer's own lease), and the one that gets it runs the
//! failover (`super::failover`) and gives the claim up. The version-guarded transaction at the
//! end would let only one failover win anyway; the claim keeps the others from restoring
//! partitions for nothing.
//!
//! A node not seen alive by this process (the cluster starting, a node that died while every
//! other was down) is left to `cluster failover NODE`: a node still starting is not dead.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use shardlite_server::cluster::Cluster;

use super::{etcd::Etcd, failover};

/// How often the view in force is looked at (it changes through the watch: this only reads it).
const LOOK_EVERY: Duration = Duration::from_millis(200);
/// How long after a failed failover of a node it is tried again.
const RETRY_FAILED: Duration = Duration::from_secs(5);

/// Watches the other nodes' leases and fails over those that lose theirs, until aborted.
pub async fn watch(
    mut etcd: Etcd,
    cluster: Arc<Cluster>,
    lease: Arc<AtomicI64>,
    token: Option<String>,
    node_ca: Option<std::path::PathBuf>,
) {
    let client = match crate::remote::client(node_ca.as_deref()) {
        Ok(client) => client,
        Err(err) => return tracing::error!(err = format!("{err:#}"), "no HTTP client: automatic failover is off"),
    };
    let (mut seen, mut next_try) = (BTreeSet::new(), BTreeMap::<String, Instant>::new());
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        let view = cluster.view();
        seen.extend(view.alive.iter().cloned());
        if !cluster.lease().held() {
            continue;
        }
        let dead: Vec<String> = seen
            .iter()
            .filter(|id| !view.alive.contains(*id) && *id != cluster.node() && !view.map.owned_by(id).is_empty())
            .filter(|id| next_try.get(*id).is_none_or(|at| Instant::now() >= *at))
            .cloned()
            .collect();
        for node in dead {
            match etcd.stopped(&node).await {
                Ok(true) => {
                    tracing::info!(node, "node stopped in order: not failed over automatically");
                    seen.remove(&node);
                    continue;
                }
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(node, err = format!("{err:#}"), "reading etcd failed");
                    continue;
                }
            }
            if run_claimed(&mut etcd, &client, cluster.node(), &node, lease.load(Ordering::Relaxed), token.as_deref())
                .await
            {
                next_try.remove(&node);
            } else {
                next_try.insert(node, Instant::now() + RETRY_FAILED);
            }
        }
    }
}

/// Fails `dead` over if this node gets the claim; false if the failover failed (to try again
/// later), true if it was done or another node holds the claim.
async fn run_claimed(
    etcd: &mut Etcd,
    client: &reqwest::Client,
    me: &str,
    dead: &str,
    lease: i64,
    token: Option<&str>,
) -> bool {
    match etcd.claim_failover(dead, me, lease).await {
        Ok(true) => {}
        Ok(false) => return true,
        Err(err) => {
            tracing::warn!(dead, err = format!("{err:#}"), "claiming the failover failed");
            return false;
        }
    }
    tracing::warn!(dead, "node lost its lease: failing its partitions over");
    let done = match failover::fail_over(etcd, client, dead, token).await {
        Ok(report) => {
            for p in &report.partitions {
                let (partition, to, txid) = (p.partition, &p.to, p.replica_txid.as_deref().unwrap_or("-"));
                tracing::info!(dead, partition, %to, records = p.records, copy = p.copy, replica_txid = txid,
                    restore_seconds = p.restore_seconds, seconds = p.seconds, "partition taken over");
            }
            let records: u64 = report.partitions.iter().map(|p| p.records).sum();
            let (partitions, version) = (report.partitions.len(), report.map_version);
            tracing::warn!(dead, partitions, records, seconds = report.seconds, map_version = version, "failed over");
            true
        }
        Err(err) => {
            tracing::error!(dead, err = format!("{err:#}"), "failover failed; the map is unchanged");
            false
        }
    };
    if let Err(err) = etcd.release_failover(dead).await {
        tracing::warn!(dead, err = format!("{err:#}"), "giving the failover claim up failed (it ends with the lease)");
    }
    done
}
