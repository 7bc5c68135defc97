//! This node's side of replication as a copy (docs/cluster.md, "Replicas"): frames from the
//! owners of the partitions it keeps copies of ([`frame`]), received in each owner's log order.
//! A frame's transactions are appended to this node's commit log and made durable before the
//! frame is acknowledged; they are applied to the copies once the owner says its log is
//! committed past them ([`Frame::commit`]), and never if the owner says they were refused.
//!
//! ```text
//!  owner's flush ─> frame (from, to, commit, refused, epochs, txs) ─> receive: contiguous with
//!  what this node holds from that owner? append each tx to the local log, flush ─> held (position)
//!      └─ txs before `commit`: Job::Replicated to the partition's writer; refused: cancelled here
//!  owner dead (a failover):
//!      seal ─> no more frames from it; its position      tail(P, after) ─> its txs of P since
//!      catch_up(P, tail of the most advanced copy)       promote(P): every tx of P held applied
//!  owner alive, handing P over to a copy (it writes P no more):
//!      hand_over(P, through): held and committed through? every tx of P held applied
//! ```
//!
//! A failover reads the position of every live copy once they are sealed: the most advanced one
//! holds every write the dead owner acknowledged (enough copies held each, and the live ones
//! include one of them), so it becomes the owner, and the others take the transactions they
//! lack from it (its [`tail`]) so that every copy has the same records again.

pub mod frame;
pub mod positions;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

pub use frame::Frame;
pub use positions::{Place, Positions};

use crate::{
    commitlog::{
        format::{Raw, Record},
        Body, CommitLog, LoggedTx,
    },
    partition::writer::Replicated,
    Error, Result,
};

/// Bytes of applied transactions each owner's source keeps for a failover's catching up.
const RECENT_BYTES: usize = 64 << 20;
/// Refused ranges kept per owner.
const REFUSED_KEPT: usize = 1024;
/// How long a copy gathers a partition's committed transactions before it applies them, in one
/// SQLite transaction: on a copy a partition's frames carry about one each.
const GATHER_FOR: Duration = Duration::from_millis(250);
/// How many committed transactions of a partition a copy applies at once without waiting.
const GATHER_UP_TO: usize = 64;
/// How often a copy looks for gathered transactions that are due, at most (a frame comes every
/// few writes, and each look goes over every transaction held), but on a frame with none.
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// What a copy answers a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receipt {
    /// Everything of the owner's log before `position` is durable here.
    Held {
        /// Where this node's copy of the owner's log ends.
        position: u64,
    },
    /// The frame does not follow what this node holds from that owner (it missed frames, or
    /// it restarted and knows nothing of the owner's log), or a failover sealed the owner: the
    /// owner must not count this copy.
    Behind {
        /// Where this node's copy of the owner's log ends, if it knows.
        position: Option<u64>,
    },
}

/// One of an owner's transactions received and durable here.
#[derive(Debug)]
struct Tentative {
    /// The transaction as the owner logged it (its LSNs are the owner's).
    tx: LoggedTx,
    /// Its body as logged, for another copy's catching up.
    body: Vec<u8>,
    /// Where this node logged it.
    local_lsn: u64,
    local_end: u64,
    /// When it came.
    came: Instant,
}

/// What this node holds of one owner's log.
#[derive(Debug, Default)]
struct Source {
    /// Where this node's copy of the owner's log ends (`None`: nothing received since start).
    position: Option<u64>,
    /// Received, not applied yet: in the owner's log order.
    tentative: VecDeque<Tentative>,
    /// Applied lately, `(lsn, partition, body)`, in log order, at most [`RECENT_BYTES`].
    recent: VecDeque<(u64, u32, Vec<u8>)>,
    recent_bytes: usize,
    /// `recent` and `tentative` hold every transaction received from here on.
    since: Option<u64>,
    /// The ranges the owner said were refused.
    refused: Vec<(u64, u64)>,
    /// The owner's epoch of each partition.
    epochs: HashMap<u32, u64>,
    /// A failover sealed the owner: no frame of its is taken any more.
    sealed: bool,
    /// Partitions whose copy the owner sends as a snapshot ([`Frame::resync`]), and when it
    /// said so: their transactions are held until it arrives.
    awaiting: BTreeMap<u32, Instant>,
    /// Where the owner's current stream began: a new stream's first frame sent again (its
    /// answer lost) begins there too.
    stream_start: Option<u64>,
    /// The partitions whose snapshot came in since the current stream began.
    resynced: BTreeSet<u32>,
    /// When this node last took a frame of the owner's (since it started).
    heard: Option<Instant>,
    /// When this node last looked for gathered transactions that are due ([`LOOK_EVERY`]).
    looked: Option<Instant>,
    /// No frame of the owner's was taken, in a directory new when it first opened: this node's
    /// copies of its partitions are empty, and its log from 0 follows them.
    empty: bool,
    /// Where the owner's log is committed, as its last frame said.
    commit: u64,
    /// Where this node's copy of the owner's log ended when it opened, if it held transactions
    /// then (restored from [`positions`]): those belong to the owner's stream of that time.
    restored_end: Option<u64>,
}

impl Source {
    /// A source whose log this node holds up to `place`'s position, every transaction before
    /// its commit point applied and the later ones held: appended to `log` again (a store of
    /// `partitions`) and durable there.
    fn placed(owner: &str, place: Place, log: Option<&CommitLog>, partitions: u32) -> Result<Self> {
        let Place { position, commit, held } = place;
        let mut source = Self { position: Some(position), since: Some(commit), commit, ..Self::default() };
        if !held.is_empty() {
            let log =
                log.ok_or_else(|| Error::Replication("transactions held for a copy, and no commit log".into()))?;
            take_in(&mut source, owner, &Frame { txs: held, ..Frame::default() }, log, partitions)?;
            source.restored_end = Some(position);
        }
        Ok(source)
    }

    /// Whether it still holds transactions restored at open: they belong to the owner's stream
    /// of that time, and only that stream's commit may apply them.
    fn holds_restored(&self) -> bool {
        self.restored_end.is_some_and(|end| self.tentative.front().is_some_and(|t| t.tx.lsn < end))
    }

    fn refused(&self, lsn: u64) -> bool {
        self.refused.iter().any(|(from, to)| *from <= lsn && lsn < *to)
    }

    fn learn(&mut self, frame: &Frame) {
        for range in &frame.refused {
            if !self.refused.contains(range) {
                if self.refused.len() == REFUSED_KEPT {
                    self.refused.remove(0);
                }
                self.refused.push(*range);
            }
        }
        self.epochs.extend(frame.epochs.iter().copied());
    }

    /// Keeps an applied transaction for a failover's catching up, dropping the oldest past the
    /// bound.
    fn remember(&mut self, tx: &LoggedTx, body: Vec<u8>) {
        self.recent_bytes += body.len();
        self.recent.push_back((tx.lsn, tx.partition, body));
        while self.recent_bytes > RECENT_BYTES {
            let Some((lsn, _, body)) = self.recent.pop_front() else { break };
            self.recent_bytes -= body.len();
            self.since = Some(lsn + 1);
        }
    }
}

/// The owners this node keeps copies for, by node id.
#[derive(Debug, Default)]
pub struct Sources {
    owners: Mutex<HashMap<String, Arc<Mutex<Source>>>>,
    /// The directory was new when it first opened (and has not crashed since): its copies of
    /// an owner it never took a frame from are empty, and that owner's log from 0 follows them.
    untouched: bool,
}

impl Sources {
    /// What a store opened finds: where its copies stood at its last clean close
    /// ([`positions`], `None` after a crash: then nothing is known), or, for a directory
    /// `created` now, that it never took a frame. The transactions held then are appended to
    /// `log` (a store of `partitions`) again and held as before.
    pub fn restored(
        positions: Option<Positions>,
        created: bool,
        log: Option<&CommitLog>,
        partitions: u32,
    ) -> Result<Self> {
        let Some(positions) = positions else { return Ok(Self { untouched: created, ..Self::default() }) };
        let mut owners = HashMap::new();
        for (owner, place) in positions.owners {
            let source = match place {
                Some(place) => Source::placed(&owner, place, log, partitions)?,
                None => Source::default(),
            };
            owners.insert(owner, Arc::new(Mutex::new(source)));
        }
        Ok(Self { owners: Mutex::new(owners), untouched: positions.untouched })
    }

    /// `owner`'s snapshot of `partition`, announced at `announced`, was taken in: an owner that
    /// announced one before it will not send it (the partition was given away before it did:
    /// only its owner sends its snapshot), so its transactions of the partition held until then
    /// are dropped (the snapshot holds what they wrote), and those it sends later are applied
    /// as any. An announcement made since is left waiting for its own snapshot. Each owner is
    /// locked in turn, `owner` no longer.
    fn supersede(&self, owner: &str, partition: u32, announced: Instant) {
        let others: Vec<Arc<Mutex<Source>>> = {
            let owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
            owners.iter().filter(|(o, _)| o.as_str() != owner).map(|(_, s)| Arc::clone(s)).collect()
        };
        for other in others {
            let mut other = lock(&other);
            if other.awaiting.get(&partition).is_some_and(|&earlier| earlier < announced) {
                other.awaiting.remove(&partition);
                other.tentative.retain(|t| t.tx.partition != partition);
            }
        }
    }

    fn of(&self, owner: &str) -> Arc<Mutex<Source>> {
        let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        let source = owners
            .entry(owner.to_owned())
            .or_insert_with(|| Arc::new(Mutex::new(Source { empty: self.untouched, ..Source::default() })));
        Arc::clone(source)
    }
}

fn lock(source: &Mutex<Source>) -> MutexGuard<'_, Source> {
    source.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where the transactions a copy applies go: the partition's writer, with where to answer once
/// they are applied (`None`: no one waits).
pub type Apply<'a> = dyn FnMut(u32, Vec<Replicated>, Option<oneshot::Sender<Result<()>>>) -> Result<()> + 'a;

/// Takes `frame` from `owner` in: appends its transactions to `log` and makes them durable,
/// cancels those of refused ranges, and hands those before the owner's commit to `apply`
/// (grouped by partition, in order). `partitions`: the store's count, which every transaction's
/// partition must be below.
pub fn receive(
    sources: &Sources,
    owner: &str,
    mut frame: Frame,
    log: &CommitLog,
    partitions: u32,
    apply: &mut Apply<'_>,
) -> Result<Receipt> {
    let source = sources.of(owner);
    let mut source = lock(&source);
    if frame.new_stream
        && !source.sealed
        && source.stream_start == Some(frame.from)
        && source.position > Some(frame.from)
    {
        // The new stream's first frame again, with what followed (its answer was lost): the
        // stream goes on, and the partitions it announces since wait for their snapshots.
        let announced: Vec<u32> = frame.resync.iter().filter(|p| !source.resynced.contains(p)).copied().collect();
        for p in announced {
            source.awaiting.entry(p).or_insert_with(Instant::now);
        }
        frame.new_stream = false;
    }
    // A copy holding transactions of the owner's stream of before its own restart follows no
    // new stream: the owner restarted too, and may have refused them without telling it (their
    // partitions may even be another node's now).
    let follows = source.position.or(source.empty.then_some(0)) == Some(frame.from) && !source.holds_restored();
    match (frame.new_stream, source.position) {
        (_, position) if source.sealed => return Ok(Receipt::Behind { position }),
        // A new stream that does not begin where this copy's copy of the owner's log ends (the
        // owner restarted while frames for this node waited), or of an owner whose log this
        // node knows nothing of (it restarted after a crash): what lies between will not come,
        // or may be missing, so every copy must come from a snapshot.
        (true, position) if !follows && !frame.resync_all => {
            return Ok(Receipt::Behind { position });
        }
        (true, _) => start_stream(&mut source, &frame),
        // Held already (an answer that was lost, or a frame that only says the commit moved).
        (false, Some(position)) if frame.to <= position => {
            source.learn(&frame);
            settle(&mut source, frame.commit, frame.is_idle(), log, apply)?;
            source.heard = Some(Instant::now());
            return Ok(Receipt::Held { position });
        }
        (false, Some(position)) if frame.from == position => {}
        // Partly held (sent again, with what followed, after an answer that came too late):
        // the rest follows.
        (false, Some(position)) if frame.from < position => {
            frame.txs.retain(|(lsn, _)| *lsn >= position);
            frame.from = position;
        }
        (false, position) => return Ok(Receipt::Behind { position }),
    }
    take_in(&mut source, owner, &frame, log, partitions)?;
    source.position = Some(frame.to);
    source.learn(&frame);
    settle(&mut source, frame.commit, frame.is_idle(), log, apply)?;
    source.heard = Some(Instant::now());
    Ok(Receipt::Held { position: frame.to })
}

/// Takes `frame`, a new stream's first, as where the owner's log stands. What was held of the
/// partitions it announces is the snapshots' to bring, and what was restored at open belongs to
/// an ended stream (dropped: the stream brings every partition from a snapshot); the rest stays
/// held until the owner's commit passes it, as before (an owner that restarted resolves it: its
/// replay applied what its log held, and its first resolved flush commits everything before).
/// Refused ranges past `from` and the commit point belong to an earlier life of the owner's log.
fn start_stream(source: &mut Source, frame: &Frame) {
    let now = Instant::now();
    source.awaiting = frame.resync.iter().map(|&p| (p, now)).collect();
    let (awaiting, restored_end) = (&source.awaiting, source.restored_end.take().unwrap_or(0));
    source.tentative.retain(|t| !awaiting.contains_key(&t.tx.partition) && t.tx.lsn >= restored_end);
    source.resynced.clear();
    source.refused.retain(|&(_, to)| to <= frame.from);
    source.commit = frame.commit;
    source.stream_start = Some(frame.from);
    source.empty = false;
    source.position = Some(frame.from);
    source.since = Some(frame.from);
}

/// Appends the frame's transactions to `log` as tentative ones and makes them durable.
fn take_in(source: &mut Source, owner: &str, frame: &Frame, log: &CommitLog, partitions: u32) -> Result<()> {
    let mut end = None;
    for (lsn, body) in &frame.txs {
        let raw = Raw { lsn: *lsn, body };
        let tx = match raw.decode() {
            Some(Record::Tx(tx)) if tx.partition < partitions => tx,
            _ => return Err(Error::Replication(format!("the transaction at {lsn} of `{owner}`'s log is malformed"))),
        };
        let (local_lsn, local_end) = log.append(&raw.to_body())?;
        source.tentative.push_back(Tentative { tx, body: body.clone(), local_lsn, local_end, came: Instant::now() });
        end = Some(local_end);
    }
    match end {
        Some(end) => log.wait_local(end),
        None => Ok(()),
    }
}

/// Applies the tentative transactions before `commit` that were not refused (those are
/// cancelled here), but those of partitions awaiting a snapshot, and, unless `all` (an idle
/// owner's frame, [`Frame::is_idle`], or the store closes), those of a partition whose
/// first committed one came less than [`GATHER_FOR`] ago, fewer than [`GATHER_UP_TO`]: they
/// wait for the next frames, and are applied with what follows them in one transaction. Unless
/// `all`, it looks [`LOOK_EVERY`] at most; in between, the transactions wait for a later frame.
fn settle(source: &mut Source, commit: u64, all: bool, log: &CommitLog, apply: &mut Apply<'_>) -> Result<()> {
    source.commit = source.commit.max(commit);
    let now = Instant::now();
    if !all && source.looked.is_some_and(|at| now.duration_since(at) < LOOK_EVERY) {
        return Ok(());
    }
    source.looked = Some(now);
    let ready = take_due(source, all, now);
    apply_in_order(source, ready, log, apply, None)
}

/// Takes out of `source`'s tentative transactions those [`settle`] applies, in log order, with
/// the gathering's clock read `now`. Which partitions are due is decided once, before any is
/// taken: a partition's committed transactions go all together or none of them, never the later
/// ones before the earlier (a copy skips an insert below the `next_id` it holds, and would lose
/// it).
fn take_due(source: &mut Source, all: bool, now: Instant) -> Vec<Tentative> {
    let committed = |t: &Tentative| t.tx.lsn < source.commit && !source.awaiting.contains_key(&t.tx.partition);
    // Each partition's committed transactions: how many, and when the first came (not needed
    // when all are applied).
    let mut gathered: HashMap<u32, (usize, Instant)> = HashMap::new();
    for t in source.tentative.iter().filter(|t| !all && committed(t)) {
        gathered.entry(t.tx.partition).or_insert((0, t.came)).0 += 1;
    }
    let ripe = |(count, first): &(usize, Instant)| *count >= GATHER_UP_TO || now.duration_since(*first) >= GATHER_FOR;
    let ripe: BTreeSet<u32> = gathered.iter().filter(|(_, g)| ripe(g)).map(|(p, _)| *p).collect();
    let due = |p: u32| all || ripe.contains(&p);
    let (mut ready, mut kept) = (Vec::new(), VecDeque::new());
    for t in std::mem::take(&mut source.tentative) {
        match committed(&t) && due(t.tx.partition) {
            true => ready.push(t),
            false => kept.push_back(t),
        }
    }
    source.tentative = kept;
    ready
}

/// `partition`'s copy was just taken from the owner's snapshot, which holds every transaction
/// of its log before `position`: those held are dropped, the later ones applied as far as the
/// owner's log is committed. Snapshots of the partition announced earlier by other owners are
/// not awaited any more ([`Sources::supersede`]).
pub fn resynced(
    sources: &Sources,
    owner: &str,
    partition: u32,
    position: u64,
    log: &CommitLog,
    apply: &mut Apply<'_>,
) -> Result<()> {
    let announced = {
        let source = sources.of(owner);
        let mut source = lock(&source);
        let Some(announced) = source.awaiting.remove(&partition) else {
            return Err(Error::Replication(format!("`{owner}` announced no snapshot of partition {partition}")));
        };
        source.resynced.insert(partition);
        source.tentative.retain(|t| t.tx.partition != partition || t.tx.lsn >= position);
        let commit = source.commit;
        settle(&mut source, commit, false, log, apply)?;
        announced
    };
    sources.supersede(owner, partition, announced);
    Ok(())
}

/// Applies `ready` (in log order) but the refused ones, which are cancelled here; `done` is
/// answered once the last partition's are applied.
fn apply_in_order(
    source: &mut Source,
    ready: Vec<Tentative>,
    log: &CommitLog,
    apply: &mut Apply<'_>,
    done: Option<oneshot::Sender<Result<()>>>,
) -> Result<()> {
    let mut groups: Vec<(u32, Vec<Replicated>)> = Vec::new();
    for Tentative { tx, body, local_lsn, local_end, .. } in ready {
        if source.refused(tx.lsn) {
            log.append(&Body::cancel(tx.partition, local_lsn))?;
            continue;
        }
        source.remember(&tx, body);
        let partition = tx.partition;
        let replicated = Replicated { tx, local_end };
        match groups.iter_mut().find(|(p, _)| *p == partition) {
            Some((_, txs)) => txs.push(replicated),
            None => groups.push((partition, vec![replicated])),
        }
    }
    let last = groups.len().saturating_sub(1);
    let mut done = done;
    for (i, (partition, txs)) in groups.into_iter().enumerate() {
        apply(partition, txs, if i == last { done.take() } else { None })?;
    }
    if let Some(done) = done {
        let _ = done.send(Ok(()));
    }
    Ok(())
}

/// The store is closing: a clean close removes the commit log, and with it what is not applied,
/// and a write a copy acknowledged must survive its restart. Where the copies stand, for the
/// next open ([`positions`]): of each owner none of whose partitions awaits a snapshot (and not
/// sealed), the position, the commit point, and the transactions held past it, which the next
/// open holds again (the owner may still refuse them); of the other owners nothing is known, and
/// what this node holds of them is applied now but for partitions awaiting a snapshot (as after
/// a crash, whose replay applies what the log holds).
pub fn closing(sources: &Sources, log: &CommitLog, apply: &mut Apply<'_>) -> Positions {
    let owners = sources.owners.lock().unwrap_or_else(|p| p.into_inner());
    let places = owners.iter().map(|(owner, source)| {
        let mut source = lock(source);
        let kept = source.awaiting.is_empty() && !source.sealed;
        let commit = if kept { source.commit } else { u64::MAX };
        if let Err(err) = settle(&mut source, commit, true, log, apply) {
            tracing::warn!(%err, owner, "could not apply a copy's transactions before closing; the next open replays them");
            return (owner.clone(), None);
        }
        let held = source.tentative.iter().map(|t| (t.tx.lsn, t.body.clone())).collect();
        let place = source.position.filter(|_| kept).map(|position| Place { position, commit: source.commit, held });
        (owner.clone(), place)
    });
    Positions { untouched: sources.untouched, owners: places.collect() }
}

/// Where a sealed owner's copies stand on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// Where this node's copy of the owner's log ends (`None`: nothing taken since it started).
    pub position: Option<u64>,
    /// The partitions whose copies wait for a snapshot: they hold the owner's later
    /// transactions, not what came before, so they are no copies to promote.
    pub awaiting: Vec<u32>,
}

/// Seals `owner` (a failover: it is dead) so that no frame of its is taken any more; where this
/// node's copies of its partitions stand.
pub fn seal(sources: &Sources, owner: &str) -> Sealed {
    let source = sources.of(owner);
    let mut source = lock(&source);
    source.sealed = true;
    Sealed { position: source.position, awaiting: source.awaiting.keys().copied().collect() }
}

/// If this node's copy of `partition`, kept for `owner`, follows the owner's stream (it took a
/// frame of `owner`'s since it started, `owner` is not sealed, and the partition is not waiting
/// for a snapshot), how long ago it last took one. Such a copy lags the owner by what is in
/// flight, no more, while frames come (an idle owner sends one at least every 0.5 s).
pub fn heard(sources: &Sources, owner: &str, partition: u32) -> Option<Duration> {
    let known = sources.owners.lock().unwrap_or_else(|p| p.into_inner()).get(owner).cloned()?;
    let source = lock(&known);
    let heard = source.heard.filter(|_| !source.sealed && !source.awaiting.contains_key(&partition))?;
    // What the owner committed and this copy gathers, not applied yet, lags it too.
    let gathered = source.tentative.iter().find(|t| t.tx.partition == partition && t.tx.lsn < source.commit);
    Some(heard.elapsed().max(gathered.map_or(Duration::ZERO, |t| t.came.elapsed())))
}

/// Takes `owner`'s frames again if a failover sealed it: it came back (its copies on this node
/// stand where they stood; a frame that does not follow them is answered [`Receipt::Behind`],
/// and the owner starts a new stream). Whether it was sealed.
pub fn unseal(sources: &Sources, owner: &str) -> bool {
    std::mem::replace(&mut lock(&sources.of(owner)).sealed, false)
}

/// The transactions of `partition` this node holds from `owner`'s log at or after `after`, as a
/// frame up to its position, with the ranges refused: what a copy at `after` lacks.
pub fn tail(sources: &Sources, owner: &str, partition: u32, after: u64) -> Result<Frame> {
    let source = sources.of(owner);
    let source = lock(&source);
    let (Some(position), Some(since)) = (source.position, source.since) else {
        return Err(Error::Replication(format!("this node holds nothing of `{owner}`'s log")));
    };
    if after < since || after > position {
        return Err(Error::Replication(format!(
            "this node holds `{owner}`'s log from {since} to {position}, not from {after}"
        )));
    }
    let recent = source.recent.iter().map(|(lsn, p, body)| (*lsn, *p, body));
    let tentative = source.tentative.iter().map(|t| (t.tx.lsn, t.tx.partition, &t.body));
    let txs = recent
        .chain(tentative)
        .filter(|(lsn, p, _)| *p == partition && *lsn >= after)
        .map(|(lsn, _, body)| (lsn, body.clone()))
        .collect();
    let epochs = source.epochs.get(&partition).map(|e| vec![(partition, *e)]).unwrap_or_default();
    Ok(Frame { from: after, to: position, refused: source.refused.clone(), epochs, txs, ..Frame::default() })
}

/// Takes in `frame`, the tail of a more advanced copy of `partition` ([`tail`]), for the sealed
/// `owner`, then applies every transaction of `partition` held from it; `done` is answered once
/// they are applied.
pub fn catch_up(
    sources: &Sources,
    owner: &str,
    partition: u32,
    mut frame: Frame,
    log: &CommitLog,
    apply: &mut Apply<'_>,
    done: oneshot::Sender<Result<()>>,
) -> Result<()> {
    let source = sources.of(owner);
    let mut source = lock(&source);
    if !source.sealed {
        return Err(Error::Replication(format!("`{owner}` is not sealed here: a catching up is a failover's")));
    }
    let position = source.position.unwrap_or(0);
    frame.txs.retain(|(lsn, body)| *lsn >= position && Raw { lsn: *lsn, body }.partition() == Some(partition));
    take_in(&mut source, owner, &frame, log, partition + 1)?;
    source.learn(&frame);
    promote_held(&mut source, partition, log, apply, done)
}

/// Applies every transaction of `partition` held from the sealed `owner`, this node becoming its
/// owner; `done` is answered once they are applied. The owner's epoch of the partition, if a
/// frame said it.
pub fn promote(
    sources: &Sources,
    owner: &str,
    partition: u32,
    log: &CommitLog,
    apply: &mut Apply<'_>,
    done: oneshot::Sender<Result<()>>,
) -> Result<Option<u64>> {
    let source = sources.of(owner);
    let mut source = lock(&source);
    if !source.sealed {
        return Err(Error::Replication(format!("`{owner}` is not sealed here: seal it first (a failover)")));
    }
    promote_held(&mut source, partition, log, apply, done)?;
    Ok(source.epochs.get(&partition).copied())
}

/// `owner`, alive, hands `partition` over (its ownership moves to a copy, docs/cluster.md): it
/// writes the partition no more, and every transaction of its log before `through` was resolved.
/// If this node holds the owner's log through `through` and was told it is committed that far,
/// every transaction of `partition` held is applied but the refused ones (`done` answered once
/// they are); else nothing changes and the handover is refused.
pub fn hand_over(
    sources: &Sources,
    owner: &str,
    partition: u32,
    through: u64,
    log: &CommitLog,
    apply: &mut Apply<'_>,
    done: oneshot::Sender<Result<()>>,
) -> Result<()> {
    let source = sources.of(owner);
    let mut source = lock(&source);
    let follows = !source.sealed && !source.awaiting.contains_key(&partition);
    let held = source.position.filter(|_| follows);
    if held.is_none_or(|held| held < through) || source.commit < through {
        let held = held.map_or_else(|| "nothing it can count".to_owned(), |at| format!("up to {at}"));
        return Err(Error::Replication(format!(
            "this node's copy of partition {partition} holds `{owner}`'s log {held}, committed up to {}: not \
             through {through}",
            source.commit
        )));
    }
    promote_held(&mut source, partition, log, apply, done)
}

/// Applies every tentative transaction of `partition`, in log order, but the refused ones.
fn promote_held(
    source: &mut Source,
    partition: u32,
    log: &CommitLog,
    apply: &mut Apply<'_>,
    done: oneshot::Sender<Result<()>>,
) -> Result<()> {
    let (ready, kept): (Vec<Tentative>, Vec<Tentative>) =
        source.tentative.drain(..).partition(|t| t.tx.partition == partition);
    source.tentative = kept.into();
    apply_in_order(source, ready, log, apply, Some(done))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A committed transaction of `partition` at `lsn` that came at `came`.
    fn tentative(partition: u32, lsn: u64, came: Instant) -> Tentative {
        let tx = LoggedTx { lsn, end: lsn + 1, partition, next_id: lsn + 1, records: 0, effects: Vec::new() };
        Tentative { tx, body: Vec::new(), local_lsn: lsn, local_end: lsn + 1, came }
    }

    #[test]
    fn a_partitions_gathered_transactions_are_taken_all_together_or_not_at_all() {
        let now = Instant::now();
        let first = now - GATHER_FOR;
        // Partition 0's first transaction came just the gathering's time ago, its later ones
        // since; partition 1's came lately. Each has fewer than `GATHER_UP_TO`.
        let mut source = Source { commit: 1000, ..Source::default() };
        for i in 0..40 {
            let came = first + Duration::from_millis(i);
            source.tentative.push_back(tentative(0, 2 * i, came));
            source.tentative.push_back(tentative(1, 2 * i + 1, now));
        }
        let taken = take_due(&mut source, false, now);
        assert_eq!(taken.len(), 40, "every one of partition 0's, none of partition 1's");
        assert!(taken.iter().all(|t| t.tx.partition == 0));
        assert!(taken.windows(2).all(|w| w[0].tx.lsn < w[1].tx.lsn), "in log order");
        // A moment earlier, partition 0 was not due: none of its transactions is taken, not
        // even those a later reading of the clock would find ripe.
        let mut again = Source { commit: 1000, tentative: taken.into(), ..Source::default() };
        assert!(take_due(&mut again, false, now - Duration::from_millis(1)).is_empty());
        assert_eq!(take_due(&mut again, true, now).len(), 40, "an idle owner's frame takes all");
    }
}
