//! The serving node's side of a cluster (`serve --cluster`): read the map before the data
//! directory opens (the directory must have the map's partition count and hash seed), hand the
//! server its [`Cluster`], then, once it serves, hold a lease whose key says the node is alive
//! and follow every new version of the map until shutdown, when the lease is revoked.
//!
//! ```text
//!  join ── read map + addresses (etcd) ─> Cluster ─> data directory opened with the map's P and seed
//!  register ── lease (--lease-ttl) + alive/ID, replicas/ID; read the map again; then serve
//!            ├ task: renew every TTL/3, each renewal tells the Cluster's Lease until when it
//!            │       holds (fencing); lapsed: register again, read the map again, serve again
//!            ├ task: watch PREFIX ─> on any change: read the view, Cluster::apply (newer only)
//!            └ task (--auto-failover): fail over the nodes that lose their lease
//!  leave ── stop the tasks, mark stopped/ID, revoke the lease (alive/ID goes at once)
//! ```
//!
//! The map is read again after each registration, before the lease counts as held: a node
//! coming back after a failover gave its partitions away forwards them from its first request,
//! and a failover that read the node dead cannot change the map once the node is alive again
//! (its transaction requires that `alive/ID` does not exist).

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use shardlite_engine::CreateOptions;
use shardlite_server::{
    backend::BoxFuture,
    cluster::{Cluster, MapWriter, View},
};

use super::{
    auto_failover,
    etcd::{Etcd, EtcdOptions, Expired},
    replica::ReplicaRestorer,
};

/// How long to wait before asking etcd again after it failed.
const RETRY: Duration = Duration::from_secs(1);

/// What `serve --cluster` was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSettings {
    /// Where the map is.
    pub etcd: EtcdOptions,
    /// This node's id in the map.
    pub node_id: String,
    /// Answer 421 for other nodes' partitions instead of forwarding.
    pub redirect: bool,
    /// The lease's time to live: how long after the node stops renewing it (killed, frozen,
    /// cut off) it stops serving and etcd stops calling it alive.
    pub lease_ttl: Duration,
    /// Fail over the nodes that lose their lease.
    pub auto_failover: bool,
    /// This node's Litestream replica URL, recorded in etcd for failovers.
    pub litestream_replica: Option<String>,
    /// The `litestream` binary this node restores other nodes' partitions with.
    pub litestream_bin: PathBuf,
    /// The token this node presents to the other nodes (its token file's `node` token, read at
    /// start), for the failovers it runs.
    pub node_token: Option<String>,
    /// The CAs this node trusts for the other nodes' certificates (`--node-ca`).
    pub node_ca: Option<PathBuf>,
    /// Where restored partitions wait while they are taken in (in the data directory).
    pub scratch: PathBuf,
    /// How long a write waits for enough copies to hold it, and what then (with replicas).
    pub replication: shardlite_server::ReplicationPolicy,
}

/// A node that read the map and may open its data directory.
pub struct Joined {
    etcd: Etcd,
    settings: NodeSettings,
    /// The node's view of the cluster, which the server routes by.
    pub cluster: Arc<Cluster>,
}

/// Reads the map and makes this node's [`Cluster`]: fails if etcd cannot be reached, there is
/// no map, or the map does not name this node.
pub async fn join(settings: &NodeSettings) -> anyhow::Result<Joined> {
    let mut etcd = Etcd::connect(&settings.etcd).await?;
    let view = etcd.existing_view().await?;
    let cluster = Cluster::new(settings.node_id.clone(), settings.redirect, view).map_err(anyhow::Error::msg)?;
    cluster.set_map_writer(Arc::new(EtcdMap(etcd.clone())));
    let restorer = ReplicaRestorer {
        etcd: etcd.clone(),
        litestream: settings.litestream_bin.clone(),
        scratch: settings.scratch.clone(),
    };
    cluster.set_restorer(Arc::new(restorer));
    Ok(Joined { etcd, settings: settings.clone(), cluster })
}

impl Joined {
    /// How long a write waits for enough copies to hold it, and what then (with replicas).
    pub fn replication(&self) -> shardlite_server::ReplicationPolicy {
        self.settings.replication
    }

    /// What the data directory must be created with, or have: the map's partition count and
    /// hash seed. Settings given that differ are refused.
    pub fn create_options(&self, given: &CreateOptions) -> anyhow::Result<CreateOptions> {
        let map = self.cluster.view().map.clone();
        let differs = |name: &str, given: Option<u64>, map: u64| match given {
            Some(given) if given != map => Err(anyhow::anyhow!(
                "{name} = {given} was given, but the cluster map (version {}) says {name} = {map}: \
                 every node of a cluster has the map's",
                self.cluster.view().map.version
            )),
            _ => Ok(()),
        };
        differs("partitions", given.partitions.map(u64::from), u64::from(map.partitions))?;
        differs("hash_seed", given.hash_seed, map.hash_seed)?;
        Ok(CreateOptions { partitions: Some(map.partitions), hash_seed: Some(map.hash_seed), ..*given })
    }

    /// Says the node is alive (serving at `url`: `http://` or `https://` and the address it
    /// listens on) and starts following the map.
    pub async fn register(self, url: String) -> anyhow::Result<Membership> {
        let Joined { mut etcd, settings, cluster } = self;
        let node = cluster.node().to_owned();
        if let Some(replica) = &settings.litestream_replica {
            etcd.record_replica(&node, replica).await?;
        }
        etcd.mark_stopped(&node, false).await?;
        let alive = Alive { node: node.clone(), address: url, ttl: settings.lease_ttl };
        let lease = Arc::new(AtomicI64::new(alive.register(&mut etcd, &cluster).await?));
        tracing::info!(node, address = %alive.address, map_version = cluster.view().map.version, "joined the cluster");
        let mut tasks = vec![
            tokio::spawn(stay_alive(etcd.clone(), alive, Arc::clone(&cluster), Arc::clone(&lease))),
            tokio::spawn(follow(etcd.clone(), Arc::clone(&cluster))),
        ];
        if settings.auto_failover {
            let watch =
                auto_failover::watch(etcd.clone(), cluster, Arc::clone(&lease), settings.node_token, settings.node_ca);
            tasks.push(tokio::spawn(watch));
        }
        Ok(Membership { etcd, node, lease, tasks })
    }
}

/// What this node registers as alive.
struct Alive {
    node: String,
    address: String,
    ttl: Duration,
}

impl Alive {
    /// Grants a lease with `alive/ID` on it, reads the map, then tells `cluster` the lease is
    /// held: the map read after the lease exists is one a failover of this node can no longer
    /// change. The lease's id.
    async fn register(&self, etcd: &mut Etcd, cluster: &Cluster) -> anyhow::Result<i64> {
        let granted = Instant::now();
        let lease = etcd.register(&self.node, &self.address, self.ttl).await?;
        apply(cluster, etcd.existing_view().await?);
        cluster.lease().hold_until(granted + self.ttl);
        Ok(lease)
    }
}

/// A registered node: its lease is renewed and the map followed until [`Membership::leave`].
pub struct Membership {
    etcd: Etcd,
    node: String,
    lease: Arc<AtomicI64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Membership {
    /// Stops following the map, marks the node stopped in order (automatic failover leaves it
    /// alone) and revokes the lease, so the node is no longer called alive.
    pub async fn leave(mut self) {
        for task in &self.tasks {
            task.abort();
        }
        if let Err(err) = self.etcd.mark_stopped(&self.node, true).await {
            tracing::warn!(err = format!("{err:#}"), "leaving the cluster: not marked stopped");
        }
        if let Err(err) = self.etcd.revoke(self.lease.load(Ordering::Relaxed)).await {
            tracing::warn!(%err, "leaving the cluster: the lease will expire by itself");
        }
    }
}

/// The map in etcd, changed by the moves this node runs.
#[derive(Clone)]
struct EtcdMap(Etcd);

impl std::fmt::Debug for EtcdMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EtcdMap")
    }
}

impl MapWriter for EtcdMap {
    fn reassign<'a>(
        &'a self,
        partition: u32,
        from: &'a str,
        to: &'a str,
        stale: &'a [String],
    ) -> BoxFuture<'a, Result<View, String>> {
        let mut etcd = self.0.clone();
        Box::pin(async move { etcd.reassign(partition, from, to, stale).await.map_err(|e| format!("{e:#}")) })
    }

    fn refresh<'a>(&'a self, node: &'a str, partitions: &'a [u32]) -> BoxFuture<'a, Result<View, String>> {
        let mut etcd = self.0.clone();
        Box::pin(async move { etcd.refresh(node, partitions).await.map_err(|e| format!("{e:#}")) })
    }
}

/// Renews the lease, telling `cluster` until when it holds; when it lapses (etcd unreachable
/// for longer than the TTL) the node stops serving its partitions, and registers again.
async fn stay_alive(mut etcd: Etcd, alive: Alive, cluster: Arc<Cluster>, lease: Arc<AtomicI64>) {
    loop {
        let renewed = |until| cluster.lease().hold_until(until);
        let err = etcd.keep_alive(lease.load(Ordering::Relaxed), alive.ttl / 3, renewed).await;
        if err.is::<Expired>() {
            cluster.lease().lose();
        }
        tracing::warn!(err = format!("{err:#}"), "the node's lease lapsed; registering again");
        loop {
            tokio::time::sleep(RETRY).await;
            match alive.register(&mut etcd, &cluster).await {
                Ok(id) => break lease.store(id, Ordering::Relaxed),
                Err(err) => tracing::warn!(err = format!("{err:#}"), "registering with etcd failed; retrying"),
            }
        }
    }
}

/// Applies every new version of the map, watching etcd (and watching again after it failed).
async fn follow(mut etcd: Etcd, cluster: Arc<Cluster>) {
    loop {
        match etcd.watch().await {
            Ok(mut changes) => {
                // Read after the watch started, so that no change falls between the two.
                refresh(&mut etcd, &cluster).await;
                loop {
                    match changes.next().await {
                        Ok(Some(_)) => refresh(&mut etcd, &cluster).await,
                        Ok(None) => break,
                        Err(err) => break tracing::warn!(%err, "watching the cluster map failed; watching again"),
                    }
                }
            }
            Err(err) => tracing::warn!(err = format!("{err:#}"), "watching the cluster map failed; retrying"),
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Reads the view from etcd and applies it if it is newer.
async fn refresh(etcd: &mut Etcd, cluster: &Cluster) {
    match etcd.existing_view().await {
        Ok(view) => apply(cluster, view),
        Err(err) => tracing::warn!(err = format!("{err:#}"), "reading the cluster map failed"),
    }
}

/// Applies `view` if it is newer than the one in force.
fn apply(cluster: &Cluster, view: View) {
    let version = view.map.version;
    match cluster.apply(view) {
        Ok(true) => tracing::info!(version, "following a new cluster map"),
        Ok(false) => {}
        Err(why) => tracing::error!(why, version, "cannot follow the new cluster map; keeping the one in force"),
    }
}
