//! `shardlite bench --url` against a node of a cluster (docs/cluster.md): the map read from
//! `GET /cluster` ([`ClusterRoutes`]), a [`Target`] per node, and which node each key goes to,
//! so that every request is sent straight to its partition's owner, as a partition-aware
//! client sends it. Requests carry the loop guard (`Shardlite-Forwarded-By`), so a request a
//! node does not own is answered 421, counted per node ([`NodeTally`]), never forwarded.

use std::{path::Path, time::Duration};

use anyhow::Context;
use hyper::header::{HeaderName, HeaderValue};
use serde::Serialize;
use shardlite_client::{ClusterMap, ClusterNode};
use shardlite_engine::KeyHasher;

use crate::http::Target;

/// The loop guard a routed request carries: a node that does not own its partition answers
/// 421 rather than forwarding it.
pub const ROUTED: (HeaderName, HeaderValue) =
    (HeaderName::from_static("shardlite-forwarded-by"), HeaderValue::from_static("client"));

/// The cluster's map as the generator routes by it.
#[derive(Debug)]
pub struct ClusterRoutes {
    /// The map's version.
    pub version: u64,
    /// The map's key hash.
    hasher: KeyHasher,
    /// Each node's id and target.
    pub nodes: Vec<(String, Target)>,
    /// The index in `nodes` of each partition's owner.
    owner_of: Vec<usize>,
}

/// Requests one node was sent during a run (warm-up included), and how many its owner served
/// directly (the rest were answered 421: the generator's map was not the node's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeTally {
    /// The node's id.
    pub node: String,
    /// Requests sent to it.
    pub sent: u64,
    /// Of those, answered by it as the owner (not 421).
    pub direct: u64,
}

impl ClusterRoutes {
    /// The map of the cluster `seed` is a node of, or `None` if it is not one (`GET /cluster`
    /// answers 404). The nodes are reached as the map's addresses say, trusting `ca` for
    /// `https://` ones.
    pub async fn discover(seed: &Target, ca: Option<&Path>) -> anyhow::Result<Option<Self>> {
        let (status, body) = seed.get("/cluster", Duration::from_secs(5)).await?;
        match status {
            200 => {}
            404 => return Ok(None),
            _ => anyhow::bail!("GET /cluster answered {status}: {}", String::from_utf8_lossy(&body)),
        }
        let (map, owner_of) = ClusterMap::parse(&body).map_err(anyhow::Error::msg)?;
        let mut nodes = Vec::with_capacity(map.nodes.len());
        for ClusterNode { id, address } in map.nodes {
            let target = Target::resolve_trusting(&address, ca).await.with_context(|| format!("node {id}"))?;
            nodes.push((id, target));
        }
        Ok(Some(Self { version: map.version, hasher: KeyHasher::new(map.hash_seed, map.partitions), nodes, owner_of }))
    }

    /// The index in `nodes` of the owner of `key`'s partition.
    pub fn node_of(&self, key: &[u8]) -> usize {
        self.owner_of[self.hasher.locate(key).partition as usize]
    }

    /// Per node: the requests sent and how many of them were not answered 421, from the
    /// counts of `sent` and `misdirected` by node index.
    pub fn tally(&self, sent: &[u64], misdirected: &[u64]) -> Vec<NodeTally> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, (node, _))| {
                let (sent, refused) = (sent.get(i).copied().unwrap_or(0), misdirected.get(i).copied().unwrap_or(0));
                NodeTally { node: node.clone(), sent, direct: sent - refused }
            })
            .collect()
    }
}
