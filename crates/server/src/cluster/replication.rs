//! Where this node's replication stands. As an owner of partitions with copies: how far its log
//! is shipped and committed, the flushes acknowledged and refused, and for each copy node its
//! link (sending, retrying, behind), the log position it holds, what waits for it and since
//! when, and the copies being brought up to date from snapshots. The replicator
//! (`crate::http::replicator`) writes it; `/stats`, `/metrics`, `/readyz` and `cluster status`
//! read its [`ReplicationReport`].

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Mutex, MutexGuard},
    time::Instant,
};

use serde::{Deserialize, Serialize};

use super::ClusterMap;

/// The replication state of one owner node; see the module's doc.
#[derive(Debug, Default)]
pub struct Replication {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    shipped: u64,
    committed: u64,
    flushes_acked: u64,
    flushes_refused: u64,
    last_refusal: Option<String>,
    flushes_degraded: u64,
    last_degraded: Option<String>,
    links: BTreeMap<String, Link>,
    /// The copies `(node, partition)` being brought up to date from a snapshot.
    resyncing: BTreeSet<(String, u32)>,
}

/// One copy node's link as the owner sees it.
#[derive(Debug, Default)]
struct Link {
    state: LinkState,
    held: u64,
    /// How far the log is committed, as the last frame the copy held said.
    told: u64,
    /// When the oldest frame not yet held was sent.
    waiting_since: Option<Instant>,
    frames_held: u64,
    sends_failed: u64,
    last_error: Option<String>,
}

/// What a link is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    /// Its last frame was held.
    #[default]
    Streaming,
    /// Its last send failed (unreachable, or no answer): tried again.
    Retrying,
    /// The copy did not follow the owner's log: a new stream with snapshots is due.
    Behind,
}

/// The replication state, for `/stats` and `cluster status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationReport {
    /// How many copies hold a write before it is answered (the owner's included).
    pub acks: u32,
    /// The end of this node's log as last handed to the copies.
    pub shipped: u64,
    /// How far the log is committed: held by enough copies, or refused.
    pub committed: u64,
    /// Flushes held by enough copies and answered.
    pub flushes_acked: u64,
    /// Flushes answered 503 `unreplicated`.
    pub flushes_refused: u64,
    /// Why the last refused flush was refused.
    pub last_refusal: Option<String>,
    /// Flushes acknowledged held by fewer than `acks` copies (`--degrade-to-async`).
    pub flushes_degraded: u64,
    /// Why the last of those was.
    pub last_degraded: Option<String>,
    /// Each copy node's link.
    pub copies: Vec<CopyReport>,
    /// This node's partitions that fewer than `acks` copies can hold writes of now (their
    /// writes are refused until enough are back), and why.
    pub short: Vec<u32>,
    /// Why the partitions in `short` are.
    pub short_why: Option<String>,
}

/// One copy node, as its owner sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyReport {
    /// The copy node's id.
    pub node: String,
    /// What its link is doing.
    pub state: LinkState,
    /// The position of this node's log the copy holds everything up to.
    pub held: u64,
    /// Log positions shipped and not yet held.
    pub behind_by: u64,
    /// How far the copy was told this node's log is committed (it applies what it holds before
    /// that, and cancels what was refused).
    pub told: u64,
    /// Milliseconds the oldest frame it does not hold yet has waited (0: none waits).
    pub waiting_ms: u64,
    /// Frames it answered as held.
    pub frames_held: u64,
    /// Sends that failed or found it behind.
    pub sends_failed: u64,
    /// Why the last send failed.
    pub last_error: Option<String>,
    /// Its copies of this node's partitions being brought up to date from snapshots.
    pub resyncing: Vec<u32>,
}

impl LinkState {
    /// Its name, as `/stats` and `cluster status` show it.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkState::Streaming => "streaming",
            LinkState::Retrying => "retrying",
            LinkState::Behind => "behind",
        }
    }
}

impl Replication {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A flush up to `to` was handed to the copies.
    pub fn shipped(&self, to: u64) {
        let mut inner = self.inner();
        inner.shipped = inner.shipped.max(to);
    }

    /// A frame went to `node`: what it does not hold waits from now, if nothing waited.
    pub fn sent(&self, node: &str) {
        self.inner().link(node).waiting_since.get_or_insert_with(Instant::now);
    }

    /// `node` holds everything up to `to`, and was told the log is committed up to `commit`.
    pub fn held(&self, node: &str, to: u64, commit: u64) {
        let mut inner = self.inner();
        let shipped = inner.shipped;
        let link = inner.link(node);
        (link.state, link.held, link.frames_held) = (LinkState::Streaming, link.held.max(to), link.frames_held + 1);
        link.told = link.told.max(commit);
        if link.held >= shipped {
            link.waiting_since = None;
        } else {
            link.waiting_since = Some(Instant::now());
        }
    }

    /// A send to `node` failed (`behind`: it does not follow the log) because of `why`.
    pub fn failed(&self, node: &str, behind: bool, why: &str) {
        let mut inner = self.inner();
        let link = inner.link(node);
        link.state = if behind { LinkState::Behind } else { LinkState::Retrying };
        link.sends_failed += 1;
        link.last_error = Some(why.to_owned());
    }

    /// A flush was resolved: the log is committed up to `to`, the flush refused with `refused`.
    pub fn resolved(&self, to: u64, refused: Option<&str>) {
        let mut inner = self.inner();
        inner.committed = inner.committed.max(to);
        match refused {
            None => inner.flushes_acked += 1,
            Some(why) => {
                inner.flushes_refused += 1;
                inner.last_refusal = Some(why.to_owned());
            }
        }
    }

    /// A flush too few copies held was acknowledged anyway (degrading to asynchronous), because
    /// of `why`.
    pub fn degraded(&self, why: &str) {
        let mut inner = self.inner();
        inner.flushes_degraded += 1;
        inner.last_degraded = Some(why.to_owned());
    }

    /// Whether every copy node whose link is streaming holds everything shipped, and was told
    /// how far the log is committed (then it applied what it holds, or cancelled what was
    /// refused).
    pub fn drained(&self) -> bool {
        let inner = self.inner();
        let done = |l: &Link| l.held >= inner.shipped && l.told >= inner.committed;
        inner.links.values().all(|l| l.state != LinkState::Streaming || done(l))
    }

    /// Whether `node`'s link is streaming, and the copy holds this node's log up to `through`
    /// and was told it is committed that far.
    pub fn holds(&self, node: &str, through: u64) -> bool {
        let inner = self.inner();
        let holds = |l: &Link| l.state == LinkState::Streaming && l.held >= through && l.told >= through;
        inner.links.get(node).is_some_and(holds)
    }

    /// `node` keeps no copy of this node's partitions any more: its link is gone. (Its copies
    /// being brought up to date stay noted: their snapshots' task ends each one, at once for a
    /// partition it keeps no copy of.)
    pub fn forget(&self, node: &str) {
        self.inner().links.remove(node);
    }

    /// The copy nodes whose links are not streaming now (retrying, or behind).
    pub fn not_streaming(&self) -> Vec<String> {
        let inner = self.inner();
        inner.links.iter().filter(|(_, l)| l.state != LinkState::Streaming).map(|(n, _)| n.clone()).collect()
    }

    /// `f` of the copies `(node, partition)` being brought up to date (under the lock).
    pub fn with_resyncing<R>(&self, f: impl FnOnce(&BTreeSet<(String, u32)>) -> R) -> R {
        f(&self.inner().resyncing)
    }

    /// Notes `partitions` of `node` as being brought up to date; returns every partition of
    /// `node` that is.
    pub fn resync(&self, node: &str, partitions: &BTreeSet<u32>) -> Vec<u32> {
        let mut inner = self.inner();
        inner.resyncing.extend(partitions.iter().map(|&p| (node.to_owned(), p)));
        inner.resyncing.iter().filter(|(n, _)| n == node).map(|(_, p)| *p).collect()
    }

    /// `node`'s copy of `partition` is up to date again.
    pub fn resynced(&self, node: &str, partition: u32) {
        self.inner().resyncing.remove(&(node.to_owned(), partition));
    }

    /// The report, for node `me` under `map`.
    pub fn report(&self, map: &ClusterMap, me: &str) -> ReplicationReport {
        let inner = self.inner();
        let copies: Vec<CopyReport> = inner.links.iter().map(|(node, link)| inner.copy_report(node, link)).collect();
        let (short, short_why) = inner.short(map, me);
        ReplicationReport {
            acks: map.acks,
            shipped: inner.shipped,
            committed: inner.committed,
            flushes_acked: inner.flushes_acked,
            flushes_refused: inner.flushes_refused,
            last_refusal: inner.last_refusal.clone(),
            flushes_degraded: inner.flushes_degraded,
            last_degraded: inner.last_degraded.clone(),
            copies,
            short,
            short_why,
        }
    }
}

impl Inner {
    fn link(&mut self, node: &str) -> &mut Link {
        self.links.entry(node.to_owned()).or_default()
    }

    fn copy_report(&self, node: &str, link: &Link) -> CopyReport {
        CopyReport {
            node: node.to_owned(),
            state: link.state,
            held: link.held,
            behind_by: self.shipped.saturating_sub(link.held),
            told: link.told,
            waiting_ms: link.waiting_since.map_or(0, |t| t.elapsed().as_millis() as u64),
            frames_held: link.frames_held,
            sends_failed: link.sends_failed,
            last_error: link.last_error.clone(),
            resyncing: self.resyncing.iter().filter(|(n, _)| n == node).map(|(_, p)| *p).collect(),
        }
    }

    /// Whether `node` can hold `partition`'s writes now: the map names it up to date, its link
    /// streams, and its copy is not being brought up to date.
    fn can_hold(&self, map: &ClusterMap, node: &str, partition: u32) -> bool {
        let streaming = self.links.get(node).is_none_or(|l| l.state == LinkState::Streaming);
        streaming && !map.is_stale(partition, node) && !self.resyncing.contains(&(node.to_owned(), partition))
    }

    /// This node's partitions whose writes fewer than `acks` copies can hold now, and why.
    fn short(&self, map: &ClusterMap, me: &str) -> (Vec<u32>, Option<String>) {
        let mut short = Vec::new();
        let mut unable = BTreeSet::new();
        for p in (0..map.partitions).filter(|&p| map.owners[p as usize] == me && !map.replicas_of(p).is_empty()) {
            let (able, not): (Vec<&String>, Vec<&String>) =
                map.replicas_of(p).iter().partition(|n| self.can_hold(map, n, p));
            if 1 + able.len() < map.acks as usize {
                short.push(p);
                unable.extend(not);
            }
        }
        let why = (!short.is_empty()).then(|| {
            let nodes: Vec<String> = unable.iter().map(|n| format!("`{n}` ({})", self.why_unable(map, n))).collect();
            format!("fewer than {} copies can hold their writes: {}", map.acks, nodes.join(", "))
        });
        (short, why)
    }

    fn why_unable(&self, map: &ClusterMap, node: &str) -> &'static str {
        match self.links.get(node).map(|l| l.state) {
            Some(LinkState::Retrying) => "unreachable",
            Some(LinkState::Behind) => "behind",
            _ if self.resyncing.iter().any(|(n, _)| n == node) => "being brought up to date",
            _ if (0..map.partitions).any(|p| map.is_stale(p, node)) => "stale",
            _ => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> ClusterMap {
        let ids: Vec<String> = ["a", "b", "c"].map(String::from).into();
        ClusterMap::spread(6, 7, &ids).unwrap().with_copies(&ids, 3, 2).unwrap()
    }

    #[test]
    fn a_link_state_prints_as_its_json_says() {
        for state in [LinkState::Streaming, LinkState::Retrying, LinkState::Behind] {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }

    #[test]
    fn a_copy_that_holds_what_was_shipped_waits_for_nothing() {
        let replication = Replication::default();
        replication.shipped(10);
        replication.sent("b");
        replication.held("b", 10, 0);
        replication.shipped(20);
        replication.sent("b");
        let report = replication.report(&map(), "a");
        let b = &report.copies[0];
        assert_eq!((b.node.as_str(), b.held, b.behind_by, b.state), ("b", 10, 10, LinkState::Streaming));
        assert!(!replication.drained());
        replication.held("b", 20, 10);
        let b = &replication.report(&map(), "a").copies[0];
        assert_eq!((b.behind_by, b.waiting_ms, b.frames_held), (0, 0, 2));
        replication.resolved(20, None);
        assert!(!replication.drained(), "b holds everything, and was not told it is committed");
        replication.held("b", 20, 20);
        assert!(replication.drained());
    }

    #[test]
    fn partitions_with_too_few_copies_able_to_hold_writes_are_named_with_why() {
        let replication = Replication::default();
        assert!(replication.report(&map(), "a").short.is_empty(), "every copy can hold writes");
        replication.failed("b", false, "connection refused");
        assert!(replication.report(&map(), "a").short.is_empty(), "one of two replicas is enough for acks 2");
        replication.resync("c", &BTreeSet::from([0]));
        let report = replication.report(&map(), "a");
        assert_eq!(report.short, [0], "of a's partitions, only 0 has its copy on c resyncing");
        let why = report.short_why.unwrap();
        assert!(why.contains("`b` (unreachable)") && why.contains("`c` (being brought up to date)"), "{why}");
        replication.resolved(5, Some("too few copies"));
        let report = replication.report(&map(), "a");
        assert_eq!((report.flushes_refused, report.committed), (1, 5));
    }
}
