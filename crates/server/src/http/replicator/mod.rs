//! The owner's side of replication (docs/cluster.md, "Replicas"): each flush of this node's
//! commit log ([`Shipment`]) becomes one frame per node keeping copies of its partitions, sent
//! over the nodes' HTTP client with the node token (`POST /admin/replicate`), and the flush's
//! writers are answered once, for every partition it touched, `acks - 1` of its replicas hold it
//! durably; or refused after `timeout`.
//!
//! ```text
//!  log flush ─> ship ─> dispatch: a frame per copy node (its partitions' txs, commit, refused)
//!                         └─> link n2: send in order; a failed send is retried, merged with
//!                             what followed; a copy that is behind is not sent more
//!               resolve, in log order: enough acks per partition? done(Ok) : after timeout done(Err)
//! ```
//!
//! Frames are dispatched as flushes come and resolved in order, so a slow round trip does not
//! hold the next flush's frames back. A node with no frame to send for a while gets an empty one
//! saying how far the log is committed, so its copies apply the last writes.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{
    header::{HeaderValue, AUTHORIZATION},
    Method, Request, StatusCode,
};
use shardlite_engine::{
    commitlog::{Replicate, Shipment},
    replication::Frame,
};
use tokio::sync::mpsc;

use super::{auth::Auth, forward::Forwarder, options::ServerOptions};
use crate::{
    backend::Backend,
    cluster::{Cluster, Owner, Replication},
};
use link::Link;

mod link;
mod resync;

/// How long after the last frame a node is sent an empty one saying how far the log is committed.
const SETTLE_AFTER: Duration = Duration::from_millis(20);
/// Refused ranges remembered to tell the copies.
const REFUSED_KEPT: usize = 1024;

/// How long a write waits for `acks` copies, and what then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationPolicy {
    /// How long a write waits for enough copies to hold it.
    pub timeout: Duration,
    /// Acknowledge a write that too few copies held (in time, or at all: their nodes are known
    /// unreachable) instead of refusing it: held by fewer copies, a failover may lose it.
    pub degrade_to_async: bool,
}

/// Has `backend`'s commits wait for the copies the map of `cluster` names, if it names any (else
/// nothing changes): a write is answered once `acks` copies hold it, or, after the `policy`'s
/// timeout, refused (or acknowledged anyway, if it degrades to asynchronous). The nodes are
/// reached as `options` says (their CA, this node's token).
pub fn replicate(
    backend: &Arc<dyn Backend>,
    cluster: &Arc<Cluster>,
    options: &ServerOptions,
    policy: ReplicationPolicy,
) -> Result<bool, String> {
    if cluster.view().map.copies() < 2 {
        return Ok(false);
    }
    let client = Forwarder::new(options.node_ca.as_deref())?;
    let token = Auth::new(options.token_source())?.node_token();
    let replicator = Replicator::start(Arc::clone(cluster), Arc::clone(backend), client, token, policy);
    backend.replicate_with(replicator).map_err(|e| format!("replicas need the engine's commit log: {e}"))?;
    Ok(true)
}

/// [`replicate`] as soon as the map names copies, for a node whose map named none when it
/// started (`cluster copies` gave the partitions copies since): a task that ends once `backend`
/// replicates. A node that cannot (no commit log) says so at each new map; its writes are then
/// held by its own copy alone, and it must be restarted with the commit log.
pub fn replicate_once_copied(
    backend: Arc<dyn Backend>,
    cluster: Arc<Cluster>,
    options: ServerOptions,
    policy: ReplicationPolicy,
) {
    tokio::spawn(async move {
        let mut versions = cluster.versions();
        loop {
            match replicate(&backend, &cluster, &options, policy) {
                Ok(true) => return,
                Ok(false) => {}
                Err(why) => tracing::error!(%why, "the cluster map names copies, and this node cannot replicate"),
            }
            if versions.changed().await.is_err() {
                return;
            }
        }
    });
}

/// Hands each flush's frames to the copies; [`Replicate`] for the engine's commit log.
#[derive(Debug)]
pub struct Replicator {
    flushes: mpsc::UnboundedSender<Shipment>,
}

impl Replicator {
    /// Starts replicating on the current tokio runtime: `cluster` says which nodes keep copies
    /// of which partitions, `client` reaches them with `token`, `backend` says each partition's
    /// epoch; a flush not acknowledged by enough copies within the `policy`'s timeout is
    /// refused, or acknowledged anyway where it degrades to asynchronous.
    fn start(
        cluster: Arc<Cluster>,
        backend: Arc<dyn Backend>,
        client: Forwarder,
        token: Option<String>,
        policy: ReplicationPolicy,
    ) -> Arc<Self> {
        let (flushes, shipments) = mpsc::unbounded_channel();
        let (resolve, in_flight) = mpsc::unbounded_channel();
        let state = Arc::clone(cluster.replication());
        let shared = Arc::new(Shared { cluster, backend, client, token, log: Mutex::default(), state, policy });
        tokio::spawn(dispatch(Arc::clone(&shared), shipments, resolve));
        tokio::spawn(resolve_in_order(shared, in_flight));
        Arc::new(Self { flushes })
    }
}

impl Replicate for Replicator {
    fn ship(&self, shipment: Shipment) {
        if let Err(refused) = self.flushes.send(shipment) {
            // Not on this thread: `done` of a refusal waits for the flush that called this.
            std::thread::spawn(move || {
                refused.0.done(Err("replication has stopped (the server is shutting down)".into()))
            });
        }
    }
}

/// What the dispatcher, the resolver and the links share.
#[derive(Debug)]
struct Shared {
    cluster: Arc<Cluster>,
    backend: Arc<dyn Backend>,
    client: Forwarder,
    token: Option<String>,
    log: Mutex<Committed>,
    /// Where replication stands, for the server's views; it also holds the copies being
    /// brought up to date from a snapshot: they get the partition's transactions but count for
    /// no write until the snapshot is in.
    state: Arc<Replication>,
    policy: ReplicationPolicy,
}

/// How far this node's log is committed, and the ranges refused lately.
#[derive(Debug, Default)]
struct Committed {
    commit: u64,
    refused: Vec<(u64, u64)>,
}

/// A flush's frames sent, waiting for enough acknowledgements.
struct InFlight {
    shipment: Shipment,
    /// For each set of replicas some partition of the flush has: how many must acknowledge.
    needs: Vec<(Vec<String>, usize)>,
    /// Degrading to asynchronous: the copy nodes whose links were not streaming when it was
    /// sent (else none).
    down: Vec<String>,
    /// Each node's answer to its frame, as they come.
    answers: mpsc::UnboundedReceiver<Answer>,
}

/// A copy node's answer to a frame: held, or why not.
type Answer = (String, Result<(), String>);

/// Turns each shipment into frames, hands them to the links, and the shipment to the resolver.
async fn dispatch(
    shared: Arc<Shared>,
    mut shipments: mpsc::UnboundedReceiver<Shipment>,
    resolve: mpsc::UnboundedSender<InFlight>,
) {
    let mut links: HashMap<String, Link> = HashMap::new();
    let mut routes = Routes::default();
    let mut last_to = None;
    loop {
        let next = tokio::time::timeout(SETTLE_AFTER, shipments.recv()).await;
        if routes.follow(&shared) {
            forget_gone(&routes, &mut links);
        }
        let shipment = match next {
            Ok(Some(shipment)) => shipment,
            Ok(None) => return,
            Err(_) => {
                if let Some(at) = last_to {
                    settle(&shared, &routes, &mut links, at);
                }
                continue;
            }
        };
        if last_to.is_none() {
            // Everything before the first shipment is settled: this node's replay applied
            // what its log held when it started.
            let mut log = shared.log.lock().unwrap_or_else(|p| p.into_inner());
            log.commit = log.commit.max(shipment.from);
        }
        last_to = Some(shipment.to);
        shared.state.shipped(shipment.to);
        let Sorted { theirs, needs } = sort(&shared, &routes, &shipment);
        let (commit, refused) = committed(&shared);
        let (reply, answers) = mpsc::unbounded_channel();
        for (node, Theirs { txs, partitions }) in theirs {
            let epochs = partitions.into_iter().filter_map(|p| Some((p, shared.backend.partition_epoch(p)?))).collect();
            let (from, to) = (shipment.from, shipment.to);
            let frame = Frame { from, to, commit, refused: refused.clone(), epochs, txs, ..Frame::default() };
            let link = links.entry(node.clone()).or_insert_with(|| Link::start(&shared, &node));
            link.send(frame, reply.clone());
        }
        drop(reply);
        let down = if shared.policy.degrade_to_async { shared.state.not_streaming() } else { Vec::new() };
        if resolve.send(InFlight { shipment, needs, down, answers }).is_err() {
            return;
        }
    }
}

/// Where this node's transactions go under one version of the map, worked out once per
/// version (not per shipment: a flush comes every few writes).
#[derive(Default)]
struct Routes {
    version: Option<u64>,
    /// How many copies hold a write before its answer (the owner's included).
    acks: usize,
    /// Every node keeping copies of this node's partitions.
    nodes: Vec<String>,
    /// Per partition: its place in `sets`, if this node owns it and it has copies.
    set_of: Vec<Option<usize>>,
    /// Each distinct pair of a partition's replicas (they get its transactions) and those of
    /// them up to date (they count for its writes).
    sets: Vec<(Vec<String>, Vec<String>)>,
}

impl Routes {
    /// Worked out again if the map in force is not the one these were for (then `true`).
    fn follow(&mut self, shared: &Shared) -> bool {
        let view = shared.cluster.view();
        let (map, me) = (&view.map, shared.cluster.node());
        if self.version == Some(map.version) {
            return false;
        }
        *self = Routes {
            version: Some(map.version),
            acks: map.acks as usize,
            set_of: vec![None; map.partitions as usize],
            ..Routes::default()
        };
        for p in (0..map.partitions).filter(|&p| map.owners[p as usize] == me && !map.replicas_of(p).is_empty()) {
            let set = (map.replicas_of(p).to_vec(), map.live_replicas_of(p).into_iter().cloned().collect());
            let at = self.sets.iter().position(|s| *s == set).unwrap_or_else(|| {
                self.sets.push(set);
                self.sets.len() - 1
            });
            self.set_of[p as usize] = Some(at);
        }
        let mut nodes: Vec<String> = self.sets.iter().flat_map(|(replicas, _)| replicas.iter().cloned()).collect();
        nodes.sort();
        nodes.dedup();
        self.nodes = nodes;
        true
    }

    /// The replicas of `partition` and those of them up to date, if this node owns it and it
    /// has copies.
    fn of(&self, partition: u32) -> Option<&(Vec<String>, Vec<String>)> {
        let at = (*self.set_of.get(partition as usize)?)?;
        Some(&self.sets[at])
    }
}

/// A shipment sorted by copy node.
struct Sorted {
    /// Every up-to-date copy node of this node's partitions, with its transactions of the
    /// shipment (none: its frame only says how far the log is committed).
    theirs: BTreeMap<String, Theirs>,
    /// For each set of replicas some partition of the shipment has: how many must hold it.
    needs: Vec<(Vec<String>, usize)>,
}

/// One copy node's part of a shipment.
#[derive(Default)]
struct Theirs {
    txs: Vec<(u64, Vec<u8>)>,
    partitions: BTreeSet<u32>,
}

/// Sorts the shipment's transactions of this node's partitions by the nodes keeping copies of
/// them (`routes`, for the map in force). A stale copy, or one being brought up to date, gets
/// them (held until its snapshot is in) but counts for nothing.
fn sort(shared: &Shared, routes: &Routes, shipment: &Shipment) -> Sorted {
    let mut theirs: BTreeMap<String, Theirs> = routes.nodes.iter().map(|n| (n.clone(), Theirs::default())).collect();
    let mut needs: Vec<(Vec<String>, usize)> = Vec::new();
    shared.state.with_resyncing(|resyncing| {
        for raw in shipment.transactions() {
            let Some((p, (replicas, live))) = raw.partition().and_then(|p| Some((p, routes.of(p)?))) else {
                continue;
            };
            for node in replicas {
                let copy = theirs.get_mut(node).expect("a route's node is among the routes' nodes");
                copy.txs.push((raw.lsn, raw.body.to_vec()));
                copy.partitions.insert(p);
            }
            let counts = |n: &&String| resyncing.is_empty() || !resyncing.contains(&((*n).clone(), p));
            if !needs.iter().any(|(set, _)| set.iter().eq(live.iter().filter(counts))) {
                needs.push((live.iter().filter(counts).cloned().collect(), routes.acks - 1));
            }
        }
    });
    Sorted { theirs, needs }
}

/// Lets go of the links to the nodes that keep no copy of this node's partitions under
/// `routes` any more (their copies moved, the node drained or removed, the partitions handed
/// over): each link's task ends once the send under way is done, and the reports forget it.
fn forget_gone(routes: &Routes, links: &mut HashMap<String, Link>) {
    links.retain(|node, _| routes.nodes.contains(node));
}

/// Sends each link an empty frame saying how far the log is committed, if it moved; and a
/// link starts for each node the map gave copies of this node's partitions since the last
/// shipment (an idle owner's new copies are brought up to date, and hold its log's end).
fn settle(shared: &Arc<Shared>, routes: &Routes, links: &mut HashMap<String, Link>, at: u64) {
    let (commit, refused) = committed(shared);
    let frame = || Frame { from: at, to: at, commit, refused: refused.clone(), ..Frame::default() };
    for node in &routes.nodes {
        if !links.contains_key(node) {
            let mut link = Link::start(shared, node);
            link.send(frame(), mpsc::unbounded_channel().0);
            links.insert(node.clone(), link);
        }
    }
    for link in links.values_mut().filter(|l| l.told < commit) {
        link.send(frame(), mpsc::unbounded_channel().0);
    }
}

fn committed(shared: &Shared) -> (u64, Vec<(u64, u64)>) {
    let log = shared.log.lock().unwrap_or_else(|p| p.into_inner());
    (log.commit, log.refused.clone())
}

/// Answers each flush's writers in log order: once every partition it touched has enough
/// acknowledgements, or refused when the policy's timeout passes first. Degrading to
/// asynchronous, a flush that too few copies held is acknowledged instead, at once if the
/// links to the copies it needs were down when it was sent.
async fn resolve_in_order(shared: Arc<Shared>, mut in_flight: mpsc::UnboundedReceiver<InFlight>) {
    let policy = shared.policy;
    while let Some(InFlight { shipment, needs, down, answers }) = in_flight.recv().await {
        let outcome = tokio::time::timeout(policy.timeout, enough(&needs, &down, answers)).await;
        let result = match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(why),
            Err(_) => Err(format!(
                "fewer copies than the cluster's acks held the write within {} ms",
                policy.timeout.as_millis()
            )),
        };
        let result = match result {
            Err(why) if policy.degrade_to_async => {
                shared.state.degraded(&why);
                Ok(())
            }
            result => result,
        };
        shared.state.resolved(shipment.to, result.as_ref().err().map(String::as_str));
        {
            let mut log = shared.log.lock().unwrap_or_else(|p| p.into_inner());
            if result.is_err() {
                if log.refused.len() == REFUSED_KEPT {
                    log.refused.remove(0);
                }
                log.refused.push((shipment.from, shipment.to));
            }
            log.commit = shipment.to;
        }
        match result {
            Ok(()) => shipment.done(Ok(())),
            // A refusal waits for its cancels' flush: on a blocking thread, not the runtime's
            // (awaited, so that the flushes are still resolved in log order).
            Err(why) => {
                let _ = tokio::task::spawn_blocking(move || shipment.done(Err(why))).await;
            }
        }
    }
}

/// Waits for the answers until every set of replicas has its count of acknowledgements; fails
/// once too many have failed (or are `down` from the start) for some set to get there.
async fn enough(
    needs: &[(Vec<String>, usize)],
    down: &[String],
    mut answers: mpsc::UnboundedReceiver<Answer>,
) -> Result<(), String> {
    let (mut acked, mut failed, mut reasons) = (Vec::new(), down.to_vec(), Vec::new());
    reasons.extend(down.iter().map(|n| format!("node `{n}` is unreachable")));
    let count = |set: &[String], of: &[String]| set.iter().filter(|r| of.contains(r)).count();
    while !needs.iter().all(|(set, n)| count(set, &acked) >= *n) {
        let hopeless = needs.iter().any(|(set, n)| set.len() - count(set, &failed) < *n);
        let next = match hopeless {
            true => None,
            false => answers.recv().await,
        };
        let Some((node, answer)) = next else {
            return Err(format!("too few copies held the write: {}", reasons.join("; ")));
        };
        match answer {
            Ok(()) => acked.push(node),
            Err(why) => {
                reasons.push(why);
                failed.push(node);
            }
        }
    }
    Ok(())
}

/// `METHOD /admin/replicate?from=THIS_NODE` + `query` to `node` as a node of the cluster (the
/// node token), with `body`; the answer's status and whole body.
async fn ask(
    shared: &Shared,
    node: &str,
    method: Method,
    query: &str,
    body: Bytes,
) -> Result<(StatusCode, Bytes), String> {
    let view = shared.cluster.view();
    let me = shared.cluster.node();
    let address = view.addresses.get(node).ok_or_else(|| format!("node `{node}` has no address in the map"))?;
    let to = Owner { partition: 0, node: node.to_owned(), address: address.clone(), map_version: view.map.version };
    let mut head = Request::new(());
    *head.method_mut() = method;
    *head.uri_mut() = format!("/admin/replicate?from={me}{query}").parse().map_err(|e| format!("{e}"))?;
    if let Some(token) = &shared.token {
        let bearer = HeaderValue::try_from(format!("Bearer {token}")).map_err(|e| e.to_string())?;
        head.headers_mut().insert(AUTHORIZATION, bearer);
    }
    let (head, ()) = head.into_parts();
    let answer = shared.client.send(&to, me, &head, body).await.map_err(|e| e.message)?;
    let status = answer.status();
    let body = answer.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, body))
}
