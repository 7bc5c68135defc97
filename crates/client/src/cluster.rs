//! [`Router`]: a client of a cluster (docs/cluster.md). The map is read from `GET /cluster`
//! (first from the builder's URL, the seed), and each key goes straight to its partition's
//! owner, over a connection pool per node ([`Routes`]). Requests carry the loop guard, so a node
//! that does not own the partition answers 421 `misdirected` instead of forwarding it; the
//! client then reads the map again from that node and sends the request to the new owner
//! ([`Router::after_misdirected`]), a bounded number of times.

use std::{
    collections::BTreeMap,
    sync::{Arc, RwLock},
    time::Duration,
};

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde::Deserialize;

use crate::{
    error::Error,
    partition::PartitionHasher,
    transport::{Setup, Transport},
};

/// Attempts after a 421 (each after reading the map again): a map changes in one etcd
/// transaction and the nodes follow it within milliseconds, so a few suffice.
pub(crate) const MISDIRECTED_RETRIES: u32 = 3;

/// The wait before attempt `n` after a 421 when no newer map was found (the answering node's
/// map is older than the client's and catches up within a watch event).
const MAP_CATCH_UP: Duration = Duration::from_millis(20);

/// Where a request goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// The partition of this key.
    Key(&'a [u8]),
    /// This partition (`GET /keys`).
    Partition(u32),
}

/// The map in force and the way to the nodes. Cheap to share; a new map replaces it whole.
#[derive(Debug)]
pub(crate) struct Router {
    /// The builder's URL: where the map is read first.
    seed: Arc<Transport>,
    /// How each node's transport is made: the builder's token, timeouts and TLS.
    setup: Setup,
    /// The routes in force, `None` until the first request reads the map. A lock held only to
    /// clone or swap the `Arc`, never across an await.
    routes: RwLock<Option<Arc<Routes>>>,
    /// One reading of the map at a time: callers that met the same stale map wait for that
    /// reading rather than each making its own.
    reading: tokio::sync::Mutex<()>,
}

/// One version of the map, as the client routes by it.
#[derive(Debug)]
pub(crate) struct Routes {
    /// The map's version.
    pub version: u64,
    /// The map's key hash.
    hasher: PartitionHasher,
    /// The nodes and their connection pools.
    nodes: Vec<Node>,
    /// The index in `nodes` of each partition's owner.
    owner_of: Vec<usize>,
}

/// A node of the map.
#[derive(Debug)]
pub(crate) struct Node {
    /// Its id.
    id: String,
    /// Its address as the map gives it.
    address: String,
    /// Its connections.
    pub transport: Arc<Transport>,
}

/// `GET /cluster`'s answer, the fields routing needs (docs/http-api.md, "GET /cluster").
#[derive(Debug, Clone, Deserialize)]
pub struct ClusterMap {
    /// The map's version: every change raises it.
    pub version: u64,
    /// The cluster's partition count.
    pub partitions: u32,
    /// The seed of the key hash.
    pub hash_seed: u64,
    /// Each partition's owner, a node id.
    pub owners: Vec<String>,
    /// Each node's id and address.
    pub nodes: Vec<ClusterNode>,
}

/// A node of a [`ClusterMap`].
#[derive(Debug, Clone, Deserialize)]
pub struct ClusterNode {
    /// Its id.
    pub id: String,
    /// Its HTTP address (`http://host:port`).
    pub address: String,
}

impl ClusterMap {
    /// Reads `GET /cluster`'s body: the map, and for each partition the index in `nodes` of its
    /// owner. Refuses a body that is not a map, a map without one owner per partition, and an
    /// owner without an address.
    pub fn parse(body: &[u8]) -> Result<(Self, Vec<usize>), String> {
        let map: Self = serde_json::from_slice(body)
            .map_err(|e| format!("GET /cluster answered a document that is not a map: {e}"))?;
        if map.partitions == 0 || map.owners.len() != map.partitions as usize {
            return Err(format!("the cluster map names {} owners for {} partitions", map.owners.len(), map.partitions));
        }
        let owner_of = map
            .owners
            .iter()
            .map(|owner| {
                map.nodes
                    .iter()
                    .position(|node| &node.id == owner)
                    .ok_or_else(|| format!("the cluster map names node `{owner}`, which has no address"))
            })
            .collect::<Result<_, _>>()?;
        Ok((map, owner_of))
    }
}

impl Router {
    /// A router that reads the map from the server `setup` names.
    pub fn new(setup: Setup) -> Result<Self, Error> {
        let seed = Arc::new(Transport::new(Setup { routed: false, ..setup.clone() })?);
        Ok(Self { seed, setup, routes: RwLock::new(None), reading: tokio::sync::Mutex::new(()) })
    }

    /// The routes in force, the map read from the seed first if none was read yet.
    pub async fn routes(&self) -> Result<Arc<Routes>, Error> {
        match self.current() {
            Some(routes) => Ok(routes),
            None => self.read_map(&self.seed, 0).await,
        }
    }

    /// The map version in force, if one was read.
    pub fn version(&self) -> Option<u64> {
        self.current().map(|routes| routes.version)
    }

    /// After node `from` answered 421 to a request sent by `seen`: the map read again from
    /// `from` (whose map names another owner), or, if it is not newer, the same routes after a
    /// short wait (the node's map is the older one and is catching up). `attempt` counts from 0.
    pub async fn after_misdirected(&self, from: &Transport, seen: &Routes, attempt: u32) -> Result<Arc<Routes>, Error> {
        let routes = self.read_map(from, seen.version).await?;
        if routes.version == seen.version {
            tokio::time::sleep(MAP_CATCH_UP * (1 << attempt.min(8))).await;
        }
        Ok(routes)
    }

    fn current(&self) -> Option<Arc<Routes>> {
        self.routes.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Reads the map from `from` unless a map newer than version `seen` is in force already,
    /// and takes it if it is newer than the one in force; the routes in force.
    async fn read_map(&self, from: &Transport, seen: u64) -> Result<Arc<Routes>, Error> {
        let _one = self.reading.lock().await;
        let current = self.current();
        if let Some(routes) = current.as_ref().filter(|routes| routes.version > seen) {
            return Ok(Arc::clone(routes));
        }
        let answer = from.send(Method::GET, "/cluster", None, Bytes::new()).await?;
        if answer.status != StatusCode::OK {
            return Err(answer.refusal().into());
        }
        let (map, owner_of) = ClusterMap::parse(&answer.body).map_err(Error::Protocol)?;
        if let Some(routes) = current.filter(|routes| routes.version >= map.version) {
            return Ok(routes);
        }
        let routes = Arc::new(self.routes_of(map, owner_of)?);
        *self.routes.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::clone(&routes));
        Ok(routes)
    }

    /// The routes of `map` (whose partitions' owners are `owner_of`, indexes in its nodes),
    /// keeping the connection pool of each node whose address is unchanged.
    fn routes_of(&self, map: ClusterMap, owner_of: Vec<usize>) -> Result<Routes, Error> {
        let previous = self.current();
        let kept: BTreeMap<(&str, &str), &Arc<Transport>> = previous
            .iter()
            .flat_map(|routes| &routes.nodes)
            .map(|node| ((node.id.as_str(), node.address.as_str()), &node.transport))
            .collect();
        let mut nodes = Vec::with_capacity(map.nodes.len());
        for ClusterNode { id, address } in map.nodes {
            let transport = match kept.get(&(id.as_str(), address.as_str())) {
                Some(transport) => Arc::clone(transport),
                None => Arc::new(Transport::new(Setup { url: address.clone(), routed: true, ..self.setup.clone() })?),
            };
            nodes.push(Node { id, address, transport });
        }
        Ok(Routes {
            version: map.version,
            hasher: PartitionHasher::new(map.hash_seed, map.partitions),
            nodes,
            owner_of,
        })
    }
}

impl Routes {
    /// The index of the node a request for `target` goes to. A partition beyond the map's goes
    /// to the first node, which refuses it as one server would (400).
    pub fn node_of(&self, target: Target<'_>) -> usize {
        let partition = match target {
            Target::Key(key) => self.hasher.partition(key),
            Target::Partition(partition) => partition,
        };
        self.owner_of.get(partition as usize).copied().unwrap_or(0)
    }

    /// Node `index` (from [`Routes::node_of`]).
    pub fn node(&self, index: usize) -> &Node {
        &self.nodes[index]
    }
}
