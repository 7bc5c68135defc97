//! A node's cluster state (docs/cluster.md): [`Cluster`] holds this node's id, the newest view of
//! the cluster map it follows, its lease and what a move or a takeover needs. The `shardlite`
//! binary reads the map in etcd, watches it and hands each new version to [`Cluster::apply`],
//! and tells the node's [`Lease`] how long it holds its lease there. Which requests go to
//! another node, forwarding, 421s and the cluster's admin routes are the handlers' side
//! (`crate::handlers::cluster`); nothing here knows HTTP.
//!
//! - `map`: the map document ([`ClusterMap`]), a node's [`View`] of it, a partition's [`Owner`].
//! - `lease`: until when this node holds its lease, outside which it serves nothing (fencing).
//! - `moving`: the map's writer a move flips the owner with, and the per-partition gates.
//! - `takeover`: the [`Restorer`] a failover restores a dead node's partition with.
//! - `replication`: where this node's replication to its copies stands.

mod lease;
pub mod map;
mod moving;
pub mod replication;
mod takeover;

use std::sync::{Arc, OnceLock, RwLock};

pub use lease::Lease;
pub use map::{ClusterMap, Owner, View};
pub use moving::MapWriter;
pub use replication::{Replication, ReplicationReport};
pub use takeover::{Restored, Restorer};

use moving::Moves;

/// One node's place in the cluster: its id, how it treats other nodes' partitions, and the
/// newest view of the map it has. Cheap to share; the view is swapped whole.
#[derive(Debug)]
pub struct Cluster {
    /// This node's id in the map.
    node: String,
    /// Answer 421 for other nodes' partitions instead of forwarding.
    redirect: bool,
    /// The view in force. A lock held only to clone or swap the `Arc`: requests read one
    /// consistent view, and a new map never waits for requests.
    view: RwLock<Arc<View>>,
    /// The version of the map in force, for requests waiting for a newer one.
    version: tokio::sync::watch::Sender<u64>,
    /// The partitions' gates and departure counts, for moves.
    moves: Moves,
    /// How this node changes the map in etcd (set once the node has joined).
    map_writer: OnceLock<Arc<dyn MapWriter>>,
    /// Until when this node holds its lease in etcd: it serves its partitions only then.
    lease: Lease,
    /// How this node restores a dead node's partition from its replica (set once joined).
    restorer: OnceLock<Arc<dyn Restorer>>,
    /// Where this node's replication to its copies stands (set once it replicates).
    replication: OnceLock<Arc<Replication>>,
}

impl Cluster {
    /// Node `node` of the cluster `view` describes.
    pub fn new(node: String, redirect: bool, view: View) -> Result<Arc<Self>, String> {
        view.validate()?;
        if !view.addresses.contains_key(&node) {
            return Err(format!("node `{node}` is not in the cluster (its nodes: {})", node_list(&view)));
        }
        let moves = Moves::new(view.map.partitions);
        let version = tokio::sync::watch::Sender::new(view.map.version);
        Ok(Arc::new(Self {
            node,
            redirect,
            version,
            view: RwLock::new(Arc::new(view)),
            moves,
            map_writer: OnceLock::new(),
            lease: Lease::new(),
            restorer: OnceLock::new(),
            replication: OnceLock::new(),
        }))
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// This node's lease, which the binary renews.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Whether this node answers 421 for other nodes' partitions instead of forwarding.
    pub(crate) fn redirects(&self) -> bool {
        self.redirect
    }

    /// The view in force.
    pub fn view(&self) -> Arc<View> {
        Arc::clone(&self.view.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Takes `view` unless its map is older than the one in force (a late watch event), or it
    /// cannot be followed (a partition count or seed of another cluster, a node without
    /// address): then the view in force stays, and the reason is returned.
    pub fn apply(&self, view: View) -> Result<bool, String> {
        view.validate()?;
        let mut current = self.view.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (old, new) = (&current.map, &view.map);
        if (new.partitions, new.hash_seed) != (old.partitions, old.hash_seed) {
            return Err(format!(
                "the new map (version {}) has partitions = {} and hash_seed = {}, this node's data {} and {}",
                new.version, new.partitions, new.hash_seed, old.partitions, old.hash_seed
            ));
        }
        if new.version < old.version || **current == view {
            return Ok(false);
        }
        let version = new.version;
        *current = Arc::new(view);
        self.version.send_replace(version);
        Ok(true)
    }

    /// The version of the map in force, as it changes.
    pub fn versions(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Waits, at most `within`, until the map in force is at `version` or newer.
    pub async fn await_version(&self, version: u64, within: std::time::Duration) {
        let mut versions = self.version.subscribe();
        let _ = tokio::time::timeout(within, versions.wait_for(|v| *v >= version)).await;
    }

    /// Sets how this node changes the map (once; later calls are ignored).
    pub fn set_map_writer(&self, writer: Arc<dyn MapWriter>) {
        let _ = self.map_writer.set(writer);
    }

    /// Sets how this node restores other nodes' partitions (once; later calls are ignored).
    pub fn set_restorer(&self, restorer: Arc<dyn Restorer>) {
        let _ = self.restorer.set(restorer);
    }

    /// How this node changes the map, once it has joined.
    pub(crate) fn map_writer(&self) -> Option<&Arc<dyn MapWriter>> {
        self.map_writer.get()
    }

    /// How this node restores other nodes' partitions, once it has joined.
    pub(crate) fn restorer(&self) -> Option<&Arc<dyn Restorer>> {
        self.restorer.get()
    }

    /// Where this node's replication stands: the same state each time (made on first use).
    pub(crate) fn replication(&self) -> &Arc<Replication> {
        self.replication.get_or_init(Arc::default)
    }

    /// The replication report, if this node replicates its partitions to copies.
    pub fn replication_report(&self) -> Option<ReplicationReport> {
        let view = self.view();
        let replicating = self.replication.get().filter(|_| view.map.copies() > 1)?;
        Some(replicating.report(&view.map, &self.node))
    }

    /// The partitions' gates and departure counts, for moves and the writes and reads they race.
    pub(crate) fn moves(&self) -> &Moves {
        &self.moves
    }

    /// Where `partition` is served: `None` here, else its owner.
    pub(crate) fn elsewhere(&self, partition: u32) -> Option<Owner> {
        let view = self.view();
        (partition < view.map.partitions && view.map.owners[partition as usize] != self.node)
            .then(|| view.owner(partition))
    }
}

/// The node ids of a view, for messages.
fn node_list(view: &View) -> String {
    view.addresses.keys().cloned().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn view(version: u64) -> View {
        let nodes = ["a".to_owned(), "b".to_owned()];
        let mut map = ClusterMap::spread(4, 7, &nodes).expect("a valid map");
        map.version = version;
        let addresses = nodes.iter().map(|n| (n.clone(), format!("http://{n}:8080"))).collect();
        View { map, addresses, alive: Default::default() }
    }

    /// A request forwarded by a node with a newer map waits for this node's to catch up: the
    /// wait ends as soon as that version is applied, or at its bound.
    #[tokio::test]
    async fn waiting_for_a_newer_map_ends_when_it_is_applied() {
        let cluster = Cluster::new("a".into(), false, view(1)).expect("a node of the map");
        let applying = Arc::clone(&cluster);
        let applier = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            applying.apply(view(3)).expect("a newer map")
        });
        let started = std::time::Instant::now();
        cluster.await_version(2, Duration::from_secs(30)).await;
        assert!(started.elapsed() < Duration::from_secs(10), "ended by the new map, not the bound");
        assert_eq!(cluster.view().map.version, 3);
        assert!(applier.await.expect("applied"));
        let started = std::time::Instant::now();
        cluster.await_version(9, Duration::from_millis(20)).await;
        assert!(started.elapsed() >= Duration::from_millis(20), "no version 9: the bound ends it");
    }
}
