//! One copy node's link: the frames for it sent in order by a task of its own, each once its
//! predecessors were acknowledged; those that waited while a send failed go together, merged
//! into one, when it is tried again. A link starts a new stream (the copy then takes the frames
//! from where the owner's log is) when it starts, when the copy was behind (it restarted, or
//! missed more than [`LINK_BUFFER`]), and when the map names a copy of the node stale: the
//! stream's first frame then announces the partitions whose copies come from a snapshot next
//! (`super::resync`), and until each is in, the node counts for none of that partition's writes.
//! A link ends once the dispatcher lets it go (the node keeps no copy of this node's partitions
//! any more), after the send under way; the replication report then forgets the node.

use std::{
    collections::BTreeSet,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use bytes::Bytes;
use hyper::{Method, StatusCode};
use shardlite_engine::replication::Frame;
use tokio::sync::mpsc;

use super::{resync, Answer, Shared};
use crate::cluster::ClusterMap;

/// Bytes of frames a link keeps for a copy that does not answer; past them the copy is behind.
const LINK_BUFFER: usize = 256 << 20;
/// How often an idle link sends its copy an empty frame: the copy learns where the owner's log
/// stands (it restarted: it answers that it is behind, and gets a new stream), and the link
/// starts a new stream if one is due (it was behind, or the map names one of its copies stale).
const LOOK_EVERY: Duration = Duration::from_millis(500);
/// How long a frame's answer may take before the frame is sent again (a copy that accepted the
/// connection but does not answer: stopped, or not serving yet).
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// The first wait before sending a frame again; doubled up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(10);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// A frame for the node and where its answer goes.
type Queued = (Frame, mpsc::UnboundedSender<Answer>);

/// One copy node's frames.
pub(super) struct Link {
    frames: mpsc::UnboundedSender<Queued>,
    /// The commit point of the last frame given it.
    pub(super) told: u64,
}

impl Link {
    pub(super) fn start(shared: &Arc<Shared>, node: &str) -> Self {
        let (frames, queue) = mpsc::unbounded_channel();
        tokio::spawn(run(Arc::clone(shared), node.to_owned(), queue));
        Self { frames, told: 0 }
    }

    pub(super) fn send(&mut self, frame: Frame, reply: mpsc::UnboundedSender<Answer>) {
        self.told = self.told.max(frame.commit);
        let _ = self.frames.send((frame, reply));
    }
}

/// Where the link's stream stands.
struct Stream {
    /// The next frame starts a new stream.
    new: bool,
    /// The copy was behind: every partition's copy comes from a snapshot, announced by the new
    /// stream until the copy takes it.
    behind: bool,
    /// The partitions announced in this stream (their snapshots sent, or to be).
    announced: BTreeSet<u32>,
    /// Bumped by each new stream the copy took: the snapshots sent for an earlier one stop.
    generation: Arc<AtomicU64>,
}

impl Stream {
    /// The partitions this node owns whose copy on `node` the map names stale and this stream
    /// has not announced (none at once while the map names no copy stale: every frame asks).
    /// A partition announced is forgotten once the map no longer names it stale here (brought
    /// up to date, or given away, or its copy moved): named stale again later, it is announced
    /// again.
    fn unannounced_stale(&mut self, map: &ClusterMap, me: &str, node: &str) -> BTreeSet<u32> {
        self.announced.retain(|&p| map.owners.get(p as usize).is_some_and(|o| o == me) && map.is_stale(p, node));
        if map.stale.is_empty() {
            return BTreeSet::new();
        }
        (0..map.partitions)
            .filter(|&p| map.owners[p as usize] == me && map.is_stale(p, node) && !self.announced.contains(&p))
            .collect()
    }

    /// Marks `frame` as a new stream's first if one is due, announcing the partitions whose
    /// copies come from a snapshot: those not up to date yet (all of the node's, if it was
    /// behind).
    fn prepare(&mut self, shared: &Shared, node: &str, frame: &mut Frame) {
        let view = shared.cluster.view();
        let (map, me) = (&view.map, shared.cluster.node());
        let fresh: BTreeSet<u32> = match self.behind {
            true => (0..map.partitions)
                .filter(|&p| map.owners[p as usize] == me && map.replicas_of(p).iter().any(|n| n == node))
                .collect(),
            false => self.unannounced_stale(map, me, node),
        };
        if !(self.new || self.behind || !fresh.is_empty()) {
            return;
        }
        if self.behind {
            self.announced.clear();
        }
        frame.new_stream = true;
        frame.resync_all = self.behind;
        frame.resync = shared.state.resync(node, &fresh);
        tracing::debug!(node, from = frame.from, resync = ?frame.resync, "a new stream of frames");
        self.announced.extend(&fresh);
        self.new = true;
    }

    /// The copy took a new stream's first frame: the snapshots it announced are sent (those of
    /// an earlier stream stop).
    fn started(&mut self, shared: &Arc<Shared>, node: &str, frame: &Frame) {
        let at = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        if !frame.resync.is_empty() {
            let partitions = frame.resync.iter().copied().collect();
            let generation = (Arc::clone(&self.generation), at);
            tokio::spawn(resync::copies(Arc::clone(shared), node.to_owned(), partitions, generation));
        }
        (self.new, self.behind) = (false, false);
    }
}

/// Sends the node its frames in order; see the module's doc.
async fn run(shared: Arc<Shared>, node: String, mut queue: mpsc::UnboundedReceiver<Queued>) {
    let mut stream = Stream { new: true, behind: false, announced: BTreeSet::new(), generation: Arc::default() };
    let mut waiting: Vec<Queued> = Vec::new();
    let mut retry = RETRY_FIRST;
    // Where the owner's log stands in the last frame sent: an idle link's new stream starts there.
    let mut sent_to = None;
    loop {
        let first = tokio::select! {
            first = queue.recv() => match first {
                Some(first) => first,
                None => return shared.state.forget(&node),
            },
            () = tokio::time::sleep(LOOK_EVERY) => match sent_to {
                Some(at) => {
                    let (commit, refused) = super::committed(&shared);
                    (Frame { from: at, to: at, commit, refused, ..Frame::default() }, mpsc::unbounded_channel().0)
                }
                None => continue,
            },
        };
        waiting.push(first);
        while let Ok(more) = queue.try_recv() {
            waiting.push(more);
        }
        loop {
            let mut frame = merge(waiting.iter().map(|(f, _)| f));
            stream.prepare(&shared, &node, &mut frame);
            shared.state.sent(&node);
            let posted = post(&shared, &node, &frame).await;
            if queue.is_closed() {
                // Let go: the node keeps no copy of this node's partitions any more.
                let answer = match posted {
                    Ok(Sent::Held) => Ok(()),
                    Ok(Sent::Behind(why)) | Err(why) => Err(why),
                };
                for (_, reply) in waiting.drain(..) {
                    let _ = reply.send((node.clone(), answer.clone()));
                }
                return shared.state.forget(&node);
            }
            let answer = match posted {
                Ok(Sent::Held) => {
                    shared.state.held(&node, frame.to, frame.commit);
                    if frame.new_stream {
                        stream.started(&shared, &node, &frame);
                    }
                    (sent_to, retry) = (Some(frame.to), RETRY_FIRST);
                    Ok(())
                }
                Ok(Sent::Behind(why)) => {
                    tracing::warn!(node, %why, "a copy is behind: its partitions are sent as snapshots");
                    shared.state.failed(&node, true, &why);
                    (stream.behind, sent_to) = (true, Some(frame.to));
                    Err(why)
                }
                Err(why) => {
                    shared.state.failed(&node, false, &why);
                    let bytes: usize = waiting.iter().flat_map(|(f, _)| &f.txs).map(|(_, b)| b.len()).sum();
                    if bytes <= LINK_BUFFER {
                        tracing::debug!(node, %why, "sending a frame failed; trying again");
                        tokio::time::sleep(retry).await;
                        retry = (retry * 2).min(RETRY_MAX);
                        while let Ok(more) = queue.try_recv() {
                            waiting.push(more);
                        }
                        continue;
                    }
                    (stream.behind, sent_to) = (true, Some(frame.to));
                    Err(format!("node `{node}` was unreachable while {bytes} bytes of writes waited for it: {why}"))
                }
            };
            for (_, reply) in waiting.drain(..) {
                let _ = reply.send((node.clone(), answer.clone()));
            }
            break;
        }
    }
}

/// Frames that follow each other as one: the first's start, the last's end, every transaction.
fn merge<'a>(frames: impl Iterator<Item = &'a Frame>) -> Frame {
    let mut merged: Option<Frame> = None;
    for frame in frames {
        match &mut merged {
            None => merged = Some(frame.clone()),
            Some(m) => {
                m.to = frame.to;
                m.commit = m.commit.max(frame.commit);
                m.refused.clone_from(&frame.refused);
                m.epochs.extend(frame.epochs.iter().copied());
                m.txs.extend(frame.txs.iter().cloned());
            }
        }
    }
    merged.unwrap_or_default()
}

/// What a copy said to a frame.
enum Sent {
    Held,
    /// It does not follow what the copy holds: why.
    Behind(String),
}

/// `POST /admin/replicate?from=THIS_NODE` to `node` with the frame; its answer.
async fn post(shared: &Shared, node: &str, frame: &Frame) -> Result<Sent, String> {
    let asked = super::ask(shared, node, Method::POST, "", Bytes::from(frame.encode()));
    let answered = tokio::time::timeout(ANSWER_WITHIN, asked).await;
    let (status, body) = answered.map_err(|_| format!("node `{node}` did not answer within {ANSWER_WITHIN:?}"))??;
    match status {
        StatusCode::OK => Ok(Sent::Held),
        StatusCode::CONFLICT => {
            Ok(Sent::Behind(format!("node `{node}`'s copy is behind: {}", String::from_utf8_lossy(&body))))
        }
        status => Err(format!("node `{node}` answered {status}: {}", String::from_utf8_lossy(&body))),
    }
}
