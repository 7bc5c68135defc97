//! What a failover's takeover needs of a node (docs/cluster.md, "Failover"): a [`Restorer`],
//! which the binary provides (Litestream), to restore a dead node's partition from that node's
//! replica as a transfer stream ([`Restored`]). The takeover's route, which checks the request
//! and takes the partition in, is the handlers'.

use bytes::Bytes;

use crate::backend::BoxFuture;

/// A partition restored from a replica, on its way in.
#[derive(Debug)]
pub struct Restored {
    /// The partition as a transfer stream (`shardlite_engine::transfer`).
    pub chunks: tokio::sync::mpsc::Receiver<Bytes>,
    /// The replica's position restored: its last transaction id, as the replica names it.
    pub replica_txid: String,
    /// How long restoring the replica took, seconds.
    pub restore_seconds: f64,
}

/// Restores another node's partition from that node's replica, for a failover.
pub trait Restorer: Send + Sync + std::fmt::Debug {
    /// Restores partition `partition` of node `from` from its replica.
    fn restore<'a>(&'a self, partition: u32, from: &'a str) -> BoxFuture<'a, Result<Restored, String>>;
}
