//! How a node restores a dead node's partition for a failover (the server's
//! [`Restorer`]): the dead node's replica URL from etcd (`replicas/ID`, recorded by
//! `serve --litestream-replica`), `litestream restore` of `<URL>/pNNNN` into a scratch file
//! beside the data directory's partitions, then that file as a transfer stream, which the server
//! takes in as a move's target does. The scratch file is removed once streamed.

use std::{path::PathBuf, time::Instant};

use bytes::Bytes;
use shardlite_engine::{send_database, Error as EngineError};
use shardlite_server::{
    backend::BoxFuture,
    cluster::{Restored, Restorer},
};

use super::etcd::Etcd;
use crate::{
    litestream::{config::partition_url, Litestream},
    restore::litestream::restore_replica,
};

/// Bytes of each piece of the transfer stream.
const PIECE: usize = 1 << 20;

/// Restores other nodes' partitions from the replicas they recorded in etcd.
#[derive(Clone)]
pub struct ReplicaRestorer {
    /// Where the replicas' URLs are.
    pub etcd: Etcd,
    /// The `litestream` binary.
    pub litestream: PathBuf,
    /// The directory the restored files go to while they are streamed (in the data directory).
    pub scratch: PathBuf,
}

impl std::fmt::Debug for ReplicaRestorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaRestorer").field("litestream", &self.litestream).field("scratch", &self.scratch).finish()
    }
}

impl Restorer for ReplicaRestorer {
    fn restore<'a>(&'a self, partition: u32, from: &'a str) -> BoxFuture<'a, Result<Restored, String>> {
        Box::pin(async move {
            let replica = self.etcd.clone().replica(from).await.map_err(|e| format!("{e:#}"))?.ok_or_else(|| {
                format!("node `{from}` recorded no Litestream replica (serve --litestream-replica URL)")
            })?;
            let url = partition_url(&replica, partition);
            let out = self.scratch.join(format!("takeover-{from}-p{partition:04}.db"));
            let (litestream, scratch) = (self.litestream.clone(), self.scratch.clone());
            let restore = tokio::task::spawn_blocking(move || {
                std::fs::create_dir_all(&scratch)?;
                remove(&out);
                let started = Instant::now();
                let (litestream, _) = Litestream::find(&litestream)?;
                let txid = restore_replica(&litestream, &url, &out)?;
                anyhow::Ok((txid, started.elapsed(), out))
            });
            let (replica_txid, took, out) = match restore.await {
                Ok(Ok(restored)) => restored,
                Ok(Err(err)) => return Err(format!("{err:#}")),
                Err(err) => return Err(err.to_string()),
            };
            let (sender, chunks) = tokio::sync::mpsc::channel(16);
            tokio::task::spawn_blocking(move || {
                let send = |piece: Vec<u8>| sender.blocking_send(Bytes::from(piece)).map_err(|_| EngineError::Closed);
                // A stream cut short has no end: the adoption refuses it.
                if let Err(err) = send_database(&out, PIECE, send) {
                    tracing::warn!(partition, %err, "streaming a restored partition stopped");
                }
                remove(&out);
            });
            Ok(Restored { chunks, replica_txid, restore_seconds: took.as_secs_f64() })
        })
    }
}

/// Removes a restored database file and any SQLite files beside it.
fn remove(db: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut path = db.as_os_str().to_owned();
        path.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(path));
    }
}
