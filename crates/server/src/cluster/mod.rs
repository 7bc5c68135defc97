//! Serving one node of a cluster (docs/cluster.md): [`Cluster`] holds this node's view of the
//! cluster map and decides, per request, whether a partition is served here or by its owner,
//! which then gets the request forwarded (`forward`) or, with `--redirect`, the client gets
//! `421 Misdirected Request` naming it. The map itself lives in etcd; the `shardlite` binary
//! reads it, watches it and hands each new version to [`Cluster::apply`], and tells the
//! node's [`Lease`] how long it holds its lease in etcd: without it, the node's own partitions
//! are fenced (503 `fenced`, `lease`). `route` holds the
//! per-route decisions, `batch` splits a `POST /batch` by owner, and `GET /cluster` is answered
//! by `route::map`.
//!
//! ```text
//!  request ─> partition of its key (or its ?partition=) ─> owner in the map
//!     owner is this node, lease held ─────────────> served here
//!     owner is this node, lease not held ─────────> 503 fenced
//!     owner elsewhere, request not yet forwarded ─> forwarded (default) | 421 (--redirect)
//!     owner elsewhere, request already forwarded ─> 421 (never forwarded twice)
//! ```

pub(crate) mod batch;
mod forward;
mod lease;
pub mod map;
pub(crate) mod moving;
pub(crate) mod route;
pub(crate) mod takeover;

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc, OnceLock, RwLock,
};

use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock as Gate};

use hyper::header::HeaderName;

pub use lease::Lease;
pub use map::{ClusterMap, Owner, View};
pub use takeover::{Restored, Restorer};

use crate::error::ApiError;

/// The header a forwarding node adds (its node id): a request carrying it is never forwarded
/// again, so a stale map cannot make two nodes bounce a request between them.
pub const FORWARDED_BY: HeaderName = HeaderName::from_static("shardlite-forwarded-by");

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
    /// The pooled HTTP client that forwards requests to their owners.
    forwarder: forward::Forwarder,
    /// One gate per partition: a write to the partition served here holds it shared while it
    /// runs; a move holds it exclusively from the freeze to the flip, so writes wait (not
    /// refused) and those under way finish first. tokio's lock queues new readers behind a
    /// waiting writer, so a freeze is never starved by a stream of writes.
    gates: Vec<Arc<Gate<()>>>,
    /// Per partition, how many times a move run here gave it away: counted once this node
    /// follows the map naming the new owner, before it empties its stale copy. A read served
    /// here keeps its answer only if the count did not change while it read
    /// (`route::read_here`).
    departures: Vec<AtomicU64>,
    /// How this node changes the map in etcd (set once the node has joined).
    map_writer: OnceLock<Arc<dyn MapWriter>>,
    /// Until when this node holds its lease in etcd: it serves its partitions only then.
    lease: Lease,
    /// How this node restores a dead node's partition from its replica (set once joined).
    restorer: OnceLock<Arc<dyn Restorer>>,
}

/// Changes the cluster map where it is kept (etcd), for a move this node runs.
pub trait MapWriter: Send + Sync + std::fmt::Debug {
    /// Gives `partition` to node `to` in one transaction that fails if the map changed since it
    /// was read or `from` no longer owns the partition; the view after it.
    fn reassign<'a>(
        &'a self,
        partition: u32,
        from: &'a str,
        to: &'a str,
    ) -> crate::backend::BoxFuture<'a, Result<View, String>>;
}

impl Cluster {
    /// Node `node` of the cluster `view` describes.
    pub fn new(node: String, redirect: bool, view: View) -> Result<Arc<Self>, String> {
        view.validate()?;
        if !view.addresses.contains_key(&node) {
            return Err(format!("node `{node}` is not in the cluster (its nodes: {})", node_list(&view)));
        }
        let gates = (0..view.map.partitions).map(|_| Arc::new(Gate::new(()))).collect();
        let departures = (0..view.map.partitions).map(|_| AtomicU64::new(0)).collect();
        Ok(Arc::new(Self {
            node,
            redirect,
            view: RwLock::new(Arc::new(view)),
            forwarder: forward::Forwarder::new(),
            gates,
            departures,
            map_writer: OnceLock::new(),
            lease: Lease::new(),
            restorer: OnceLock::new(),
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

    /// Refuses to serve this node's partition `partition` while it does not hold its lease:
    /// another node may have been given it by a failover.
    fn ensure_leased(&self, partition: u32) -> Result<(), ApiError> {
        match self.lease.held() {
            true => Ok(()),
            false => Err(ApiError::fenced(&self.node, partition)),
        }
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
        *current = Arc::new(view);
        Ok(true)
    }

    /// Sets how this node changes the map (once; later calls are ignored).
    pub fn set_map_writer(&self, writer: Arc<dyn MapWriter>) {
        let _ = self.map_writer.set(writer);
    }

    /// Sets how this node restores other nodes' partitions (once; later calls are ignored).
    pub fn set_restorer(&self, restorer: Arc<dyn Restorer>) {
        let _ = self.restorer.set(restorer);
    }

    /// Waits until no move holds any of `partitions` frozen; writes to them run while the
    /// guards live.
    async fn hold(&self, partitions: impl IntoIterator<Item = u32>) -> Vec<OwnedRwLockReadGuard<()>> {
        let mut partitions: Vec<u32> = partitions.into_iter().filter(|&p| (p as usize) < self.gates.len()).collect();
        // One order for every holder: a batch waiting on one gate holds none after it.
        partitions.sort_unstable();
        partitions.dedup();
        let mut held = Vec::with_capacity(partitions.len());
        for p in partitions {
            held.push(Arc::clone(&self.gates[p as usize]).read_owned().await);
        }
        held
    }

    /// Freezes writes to `partition` here until the guard is dropped, once those under way
    /// have finished.
    async fn freeze(&self, partition: u32) -> OwnedRwLockWriteGuard<()> {
        Arc::clone(&self.gates[partition as usize]).write_owned().await
    }

    /// How many times a move run here gave `partition` away (0 for a partition that does not
    /// exist).
    fn departures(&self, partition: u32) -> u64 {
        self.departures.get(partition as usize).map_or(0, |count| count.load(Ordering::Acquire))
    }

    /// A move run here gave `partition` away: this node follows the map naming the new owner,
    /// and is about to empty its copy.
    fn gave_away(&self, partition: u32) {
        if let Some(count) = self.departures.get(partition as usize) {
            count.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Where `partition` is served: `None` here, else its owner.
    fn elsewhere(&self, partition: u32) -> Option<Owner> {
        let view = self.view();
        (partition < view.map.partitions && view.map.owners[partition as usize] != self.node)
            .then(|| view.owner(partition))
    }
}

/// The node ids of a view, for messages.
fn node_list(view: &View) -> String {
    view.addresses.keys().cloned().collect::<Vec<_>>().join(", ")
}
