//! The serving node's side of a cluster (`serve --cluster`): read the map before the data
//! directory opens (the directory must have the map's partition count and hash seed), hand the
//! server its [`Cluster`], then, once it serves, hold a lease whose key says the node is alive
//! and follow every new version of the map until shutdown, when the lease is revoked.
//!
//! ```text
//!  join ── read map + addresses (etcd) ─> Cluster ─> data directory opened with the map's P and seed
//!  register ── lease (TTL 5 s) + alive/ID ─> task: renew every TTL/3; lapsed: register again
//!            └ task: watch PREFIX ─> on any change: read the view, Cluster::apply (newer only)
//!  leave ── stop both tasks, revoke the lease (alive/ID goes at once)
//! ```

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::Duration,
};

use shardlite_engine::CreateOptions;
use shardlite_server::{
    backend::BoxFuture,
    cluster::{Cluster, MapWriter, View},
};

use super::etcd::{Etcd, EtcdOptions};

/// The lease's time to live: how long after a node stops renewing (killed, frozen, cut off)
/// etcd and `cluster status` stop calling it alive.
const LEASE_TTL: Duration = Duration::from_secs(5);
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
}

/// A node that read the map and may open its data directory.
pub struct Joined {
    etcd: Etcd,
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
    Ok(Joined { etcd, cluster })
}

impl Joined {
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

    /// Says the node is alive (serving at `listen`) and starts following the map.
    pub async fn register(self, listen: SocketAddr) -> anyhow::Result<Membership> {
        let Joined { mut etcd, cluster } = self;
        let node = cluster.node().to_owned();
        let address = format!("http://{listen}");
        let lease = Arc::new(AtomicI64::new(etcd.register(&node, &address, LEASE_TTL).await?));
        tracing::info!(node, %address, map_version = cluster.view().map.version, "joined the cluster");
        let tasks = vec![
            tokio::spawn(stay_alive(etcd.clone(), node, address, Arc::clone(&lease))),
            tokio::spawn(follow(etcd.clone(), cluster)),
        ];
        Ok(Membership { etcd, lease, tasks })
    }
}

/// A registered node: its lease is renewed and the map followed until [`Membership::leave`].
pub struct Membership {
    etcd: Etcd,
    lease: Arc<AtomicI64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Membership {
    /// Stops following the map and revokes the lease, so the node is no longer called alive.
    pub async fn leave(mut self) {
        for task in &self.tasks {
            task.abort();
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
    fn reassign<'a>(&'a self, partition: u32, from: &'a str, to: &'a str) -> BoxFuture<'a, Result<View, String>> {
        let mut etcd = self.0.clone();
        Box::pin(async move { etcd.reassign(partition, from, to).await.map_err(|e| format!("{e:#}")) })
    }
}

/// Renews the lease; when it lapses (etcd unreachable for longer than the TTL), registers again.
async fn stay_alive(mut etcd: Etcd, node: String, address: String, lease: Arc<AtomicI64>) {
    loop {
        let err = etcd.keep_alive(lease.load(Ordering::Relaxed), LEASE_TTL / 3).await;
        tracing::warn!(err = format!("{err:#}"), "the node's lease lapsed; registering again");
        loop {
            tokio::time::sleep(RETRY).await;
            match etcd.register(&node, &address, LEASE_TTL).await {
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
                    match changes.message().await {
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
    let view = match etcd.existing_view().await {
        Ok(view) => view,
        Err(err) => return tracing::warn!(err = format!("{err:#}"), "reading the cluster map failed"),
    };
    let version = view.map.version;
    match cluster.apply(view) {
        Ok(true) => tracing::info!(version, "following a new cluster map"),
        Ok(false) => {}
        Err(why) => tracing::error!(why, version, "cannot follow the new cluster map; keeping the one in force"),
    }
}
