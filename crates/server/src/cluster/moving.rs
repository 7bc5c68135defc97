//! What a partition move needs of a node's state (docs/cluster.md, "Moving a partition"): the
//! [`MapWriter`] that gives the partition to its new owner in etcd, and [`Moves`], one gate per
//! partition that a move closes from its freeze to its flip, and a count per partition of the
//! moves that gave it away. The move's steps, run through the admin routes, are the handlers'.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock as Gate};

use super::map::View;
use crate::backend::BoxFuture;

/// Changes the cluster map where it is kept (etcd), for a move this node runs.
pub trait MapWriter: Send + Sync + std::fmt::Debug {
    /// Gives `partition` to node `to` in one transaction that fails if the map changed since it
    /// was read or `from` no longer owns the partition (if `to` kept a copy of it, `from` keeps
    /// one in its place), naming the copies of the nodes of `stale` stale; the view after it.
    fn reassign<'a>(
        &'a self,
        partition: u32,
        from: &'a str,
        to: &'a str,
        stale: &'a [String],
    ) -> BoxFuture<'a, Result<View, String>>;

    /// `node`'s copies of `partitions` are up to date again: no longer stale, in one
    /// transaction; the view after it.
    fn refresh<'a>(&'a self, node: &'a str, partitions: &'a [u32]) -> BoxFuture<'a, Result<View, String>>;
}

/// Per partition, the gate its writes pass and how often a move run here gave it away.
#[derive(Debug)]
pub(crate) struct Moves {
    /// One gate per partition: a write to the partition served here holds it shared while it
    /// runs; a move holds it exclusively from the freeze to the flip, so writes wait (not
    /// refused) and those under way finish first. tokio's lock queues new readers behind a
    /// waiting writer, so a freeze is never starved by a stream of writes.
    gates: Vec<Arc<Gate<()>>>,
    /// Per partition, how many times a move run here gave it away: counted once this node
    /// follows the map naming the new owner, before it empties its stale copy. A read served
    /// here keeps its answer only if the count did not change while it read.
    departures: Vec<AtomicU64>,
}

impl Moves {
    /// Open gates and zero counts for `partitions` partitions.
    pub(super) fn new(partitions: u32) -> Self {
        let gates = (0..partitions).map(|_| Arc::new(Gate::new(()))).collect();
        let departures = (0..partitions).map(|_| AtomicU64::new(0)).collect();
        Self { gates, departures }
    }

    /// Waits until no move holds any of `partitions` frozen; writes to them run while the
    /// guards live.
    pub(crate) async fn hold(&self, partitions: impl IntoIterator<Item = u32>) -> Vec<OwnedRwLockReadGuard<()>> {
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
    pub(crate) async fn freeze(&self, partition: u32) -> OwnedRwLockWriteGuard<()> {
        Arc::clone(&self.gates[partition as usize]).write_owned().await
    }

    /// How many times a move run here gave `partition` away (0 for a partition that does not
    /// exist).
    pub(crate) fn departures(&self, partition: u32) -> u64 {
        self.departures.get(partition as usize).map_or(0, |count| count.load(Ordering::Acquire))
    }

    /// A move run here gave `partition` away: this node follows the map naming the new owner,
    /// and is about to empty its copy.
    pub(crate) fn gave_away(&self, partition: u32) {
        if let Some(count) = self.departures.get(partition as usize) {
            count.fetch_add(1, Ordering::AcqRel);
        }
    }
}
