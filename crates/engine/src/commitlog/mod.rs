//! The commit log: one append-only log shared by every partition, so that one flush makes a
//! whole round of commits durable, however many partitions it touched.
//!
//! With it (`synchronous = full`, WAL journal, `commit_log` on) SQLite runs at `NORMAL` and
//! durability comes from here: a writer runs a transaction up to its `COMMIT`, appends what it did
//! ([`CommitLog::append`]), waits for the log to be durable ([`CommitLog::wait_durable`]; an inline
//! write awaits [`CommitLog::durable`]), and only then commits and answers. Each partition's
//! `meta.log_applied` says how far it applied the log; an open replays what a database lacks.
//!
//! - [`format`](mod@format): segment headers and records, byte by byte
//! - `segment`: segment files: created preallocated, the spare, retired
//! - `recovery`: what an open finds of the log ([`Recovery::read`], [`finish_recovery`])
//! - [`base`]: `commit.base`, how far each partition was durable when segments were last dropped
//! - [`shipping`]: a flush's records handed to the replicator, which says when enough copies hold them

pub mod base;
pub mod format;
mod recovery;
mod segment;
pub mod shipping;

use std::{
    fs::File,
    os::unix::fs::FileExt,
    path::Path,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak,
    },
    task::{Context, Poll, Waker},
    time::Instant,
};

pub use base::Durable;
use format::HEADER;
pub use format::{Body, Effect, LoggedTx, TxBuilder};
pub use recovery::{finish_recovery, Recovery};
use segment::{remove, retire, Segment};
use shipping::RefusedRanges;
pub use shipping::{Replicate, Shipment};

use crate::{
    layout::{self, Layout},
    Error, Result,
};

/// How long after failing to make a spare segment (a full disk) the log tries again.
const SPARE_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// What the log has done, for `/stats` and `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogStats {
    /// Flushes (one `fdatasync` each, more when a flush spans segments).
    pub flushes: u64,
    /// Records (transactions and cancels) appended.
    pub records: u64,
    /// Bytes appended.
    pub bytes: u64,
    /// Time spent writing and syncing, nanoseconds.
    pub flush_nanos: u64,
    /// Segments dropped since open.
    pub trims: u64,
}

/// Records appended to one segment, not written yet.
#[derive(Debug)]
struct Chunk {
    segment: Arc<Segment>,
    /// LSN of the first byte.
    lsn: u64,
    bytes: Vec<u8>,
}

/// Everything behind the log's lock.
#[derive(Debug)]
struct State {
    /// The segment receiving appends.
    segment: Arc<Segment>,
    /// Earlier segments of this session, oldest first, with the LSN where each ends.
    closed: Vec<(Arc<Segment>, u64)>,
    /// The LSN just past the last appended byte.
    end: u64,
    /// Appended, not yet written: in LSN order.
    pending: Vec<Chunk>,
    /// Everything before this LSN is durable here.
    durable: u64,
    /// Everything before this LSN is durable here and, with a replicator, held by enough copies
    /// or refused ([`shipping`]): what writers wait for. Without one, `durable`.
    committed: u64,
    /// Ranges the copies did not acknowledge in time.
    refused: RefusedRanges,
    /// A flush is under way.
    flushing: bool,
    /// Flushes begun so far; the one under way (if any) is number `flushes_begun - 1`.
    flushes_begun: u64,
    /// Where the flush under way ends.
    flush_target: u64,
    /// Why the log refuses appends, once a write or sync of it failed.
    failed: Option<String>,
    /// Who awaits [`CommitLog::durable`], with where each waits for: woken by the end of the
    /// flush that covers it.
    wakers: Vec<(u64, Waker)>,
    /// Threads whose records are durable here, parked until the copies hold them, with where
    /// each waits for: each woken by the shipment that covers it (not all of them by every
    /// shipment).
    parked: Vec<(u64, std::thread::Thread)>,
    /// The flusher thread has stopped, or is to.
    stopping: bool,
}

impl State {
    /// Whether someone awaits a flush: a waiter whose records are not durable here yet (the
    /// others wait for the copies).
    fn awaits_flush(&self) -> bool {
        self.wakers.iter().any(|(end, _)| *end > self.durable)
    }
}

/// The shared commit log of a running store.
#[derive(Debug)]
pub struct CommitLog {
    layout: Layout,
    /// The data directory, open since before recovery wrote anything: `syncfs` through it
    /// reports every writeback error of the file system since then.
    dir: File,
    segment_bytes: u64,
    state: Mutex<State>,
    /// A segment file ready to be renamed into place at the next switch, its blocks written.
    spare: Mutex<Option<File>>,
    /// When making a spare last failed (a full disk): not tried again for [`SPARE_RETRY`].
    spare_failed: Mutex<Option<Instant>>,
    /// Where waiters sleep, by the parity of the flush that will cover them: the end of a flush
    /// wakes only the threads it covered (and one of those waiting for the next flush, to lead
    /// it), not every writer thread.
    flushed: [Condvar; 2],
    /// Where the flusher thread sleeps until someone awaits a flush.
    flush_wanted: Condvar,
    /// Where each flush's records go, and this log as the shipments know it (set once).
    replicator: OnceLock<(Arc<dyn Replicate>, Weak<CommitLog>)>,
    /// Per writer thread, then per partition (its inline writes): the lowest LSN it may have
    /// appended without committing yet (`u64::MAX`: none). Segments are dropped only below all
    /// of them.
    holds: Vec<AtomicU64>,
    flushes: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
    flush_nanos: AtomicU64,
    trims: AtomicU64,
}

impl CommitLog {
    /// Starts a new log in `layout` after `recovery` (whose segments must be gone:
    /// [`finish_recovery`]) at LSN `base`, for `holders` holds: the writer threads', then the
    /// partitions'.
    pub fn start(layout: &Layout, recovery: &Recovery, base: u64, segment_bytes: u64, holders: usize) -> Result<Self> {
        let seq = recovery.next_seq;
        let spare = match File::options().read(true).write(true).open(layout.log_spare()) {
            Ok(file) => Segment::adopt(layout, file, seq, base, 0)?,
            Err(_) => None,
        };
        let segment = match spare {
            Some(segment) => Arc::new(segment),
            None => Arc::new(Segment::create_fitting(layout, seq, base, segment_bytes, 0)?),
        };
        let dir = recovery.dir.try_clone().map_err(|e| Error::io(layout.dir(), &e))?;
        Ok(Self {
            layout: layout.clone(),
            dir,
            spare: Mutex::new(None),
            spare_failed: Mutex::new(None),
            segment_bytes,
            state: Mutex::new(State {
                segment,
                closed: Vec::new(),
                end: base,
                pending: Vec::new(),
                durable: base,
                committed: base,
                refused: RefusedRanges::default(),
                flushing: false,
                flushes_begun: 0,
                flush_target: base,
                failed: None,
                wakers: Vec::new(),
                parked: Vec::new(),
                stopping: false,
            }),
            flush_wanted: Condvar::new(),
            replicator: OnceLock::new(),
            flushed: [Condvar::new(), Condvar::new()],
            holds: (0..holders).map(|_| AtomicU64::new(u64::MAX)).collect(),
            flushes: AtomicU64::new(0),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            flush_nanos: AtomicU64::new(0),
            trims: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The position just past the last record appended.
    pub fn end(&self) -> u64 {
        self.lock().end
    }

    /// Holder `holder` (a writer thread, or a partition's inline write) is about to append:
    /// segments at or after the log's end now are kept until it [`CommitLog::release`]s.
    pub fn hold(&self, holder: usize) {
        let end = self.lock().end;
        self.holds[holder].store(end, Ordering::SeqCst);
    }

    /// [`CommitLog::hold`], keeping also what was appended from `from` on (by a transaction kept
    /// open since): segments at or after the lower of the two are kept.
    pub fn hold_from(&self, holder: usize, from: u64) {
        let end = self.lock().end;
        self.holds[holder].store(end.min(from), Ordering::SeqCst);
    }

    /// Holder `holder` has committed (or rolled back) everything it appended.
    pub fn release(&self, holder: usize) {
        self.holds[holder].store(u64::MAX, Ordering::SeqCst);
    }

    /// Appends a record; returns its LSN and the LSN just past it. Fails without appending
    /// anything if the log has failed, the record is too large, or a new segment it needs
    /// cannot be created (a full disk).
    pub fn append(&self, body: &Body) -> Result<(u64, u64)> {
        let len = body.record_len() as u64;
        if len > u64::from(u32::MAX) {
            return Err(Error::Config(format!(
                "a transaction of {len} bytes does not fit a commit log record (4 GiB): lower max_batch or max_value"
            )));
        }
        self.append_locked(&mut self.lock(), body)
    }

    /// [`CommitLog::append`] under the lock already held.
    fn append_locked(&self, st: &mut State, body: &Body) -> Result<(u64, u64)> {
        let len = body.record_len() as u64;
        if let Some(why) = &st.failed {
            return Err(failed(&st.segment.path, why));
        }
        if st.end + len > st.segment.limit {
            self.switch(st, len)?;
        }
        let lsn = st.end;
        let current = Arc::clone(&st.segment);
        match st.pending.last_mut() {
            Some(chunk) if Arc::ptr_eq(&chunk.segment, &current) => body.write_at(lsn, &mut chunk.bytes),
            _ => {
                let mut bytes = Vec::with_capacity(body.record_len());
                body.write_at(lsn, &mut bytes);
                st.pending.push(Chunk { segment: current, lsn, bytes });
            }
        }
        st.end += len;
        self.records.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(len, Ordering::Relaxed);
        Ok((lsn, st.end))
    }

    /// Moves appends to a new segment with room for at least `len` bytes: the spare if it is
    /// ready and large enough, else a new file.
    fn switch(&self, st: &mut State, len: u64) -> Result<()> {
        let seq = st.segment.header.seq + 1;
        let spare = self.spare.lock().unwrap_or_else(|p| p.into_inner()).take();
        let next = match spare.map(|file| Segment::adopt(&self.layout, file, seq, st.end, len)) {
            Some(Ok(Some(segment))) => segment,
            Some(Err(err)) => return Err(err),
            Some(Ok(None)) | None => Segment::create_fitting(&self.layout, seq, st.end, self.segment_bytes, len)?,
        };
        let old = std::mem::replace(&mut st.segment, Arc::new(next));
        st.closed.push((old, st.end));
        Ok(())
    }

    /// Makes sure a spare segment is ready: a dropped segment kept by [`CommitLog::trim`], or
    /// a new file of the configured size with zeros written through it and synced (done here,
    /// on the maintenance thread, so that no append waits for it).
    pub fn prepare_spare(&self) -> Result<()> {
        if self.spare.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            return Ok(());
        }
        let mut failed = self.spare_failed.lock().unwrap_or_else(|p| p.into_inner());
        if failed.is_some_and(|at| at.elapsed() < SPARE_RETRY) {
            return Ok(());
        }
        let path = self.layout.log_spare();
        let made = (|| {
            let file = File::options().read(true).write(true).create(true).truncate(true).open(&path)?;
            let total = HEADER + self.segment_bytes;
            // Allocate first: a full disk fails here, before any byte is written.
            let len = i64::try_from(total).map_err(|_| std::io::ErrorKind::InvalidInput)?;
            nix::fcntl::fallocate(&file, nix::fcntl::FallocateFlags::empty(), 0, len).map_err(std::io::Error::from)?;
            let zeros = vec![0u8; 1 << 20];
            let mut at = 0;
            while at < total {
                let n = (total - at).min(zeros.len() as u64);
                file.write_all_at(&zeros[..n as usize], at)?;
                at += n;
            }
            file.sync_all()?;
            Ok(file)
        })();
        match made {
            Ok(file) => {
                *self.spare.lock().unwrap_or_else(|p| p.into_inner()) = Some(file);
                *failed = None;
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                *failed = Some(Instant::now());
                Err(Error::io(&path, &e))
            }
        }
    }

    /// Returns once everything before `end` is committed: durable here and, with a replicator,
    /// held by enough copies; [`Error::Unreplicated`] if the copies refused it. Leads a flush if
    /// none is running (writing every record appended so far), else sleeps until the flush that
    /// covers `end` ends (the one under way, or the next), and looks again.
    pub fn wait_durable(&self, end: u64) -> Result<()> {
        self.wait(end, true)
    }

    /// Returns once everything before `end` is durable here, whatever the copies say: for what
    /// only this node's replay reads (a cancel), and for records received from another node's
    /// log, which must not wait for this node's own copies.
    pub fn wait_local(&self, end: u64) -> Result<()> {
        self.wait(end, false)
    }

    fn wait(&self, end: u64, replicated: bool) -> Result<()> {
        let mut st = self.lock();
        loop {
            if let Some(outcome) = st.refused.outcome(end, st.durable).filter(|_| st.committed >= end) {
                return outcome;
            }
            if let Some(why) = &st.failed {
                return Err(failed(&st.segment.path, why));
            }
            if st.durable >= end {
                if !replicated {
                    return Ok(());
                }
                // Listed once (a wake-up meant for something else, a channel's, looks again),
                // for this wait (an earlier one that failed may have left it listed).
                let me = std::thread::current();
                match st.parked.iter_mut().find(|(_, t)| t.id() == me.id()) {
                    Some(listed) => listed.0 = end,
                    None => st.parked.push((end, me)),
                }
                drop(st);
                std::thread::park();
                st = self.lock();
                continue;
            }
            if st.flushing {
                let covering = if end <= st.flush_target { st.flushes_begun - 1 } else { st.flushes_begun };
                st = self.flushed[(covering % 2) as usize].wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            self.lead(st)?;
            st = self.lock();
        }
    }

    /// Hands every later flush's records to `replicator` (once; later calls are ignored). Its
    /// first shipment is an empty one where the log is committed now, between two flushes: the
    /// replicator knows where the copies' streams start before any write comes (an idle owner's
    /// copies are told how far its log stands).
    pub fn set_replicator(self: &Arc<Self>, replicator: Arc<dyn Replicate>) {
        let mut st = self.lock();
        // A flush under way might see the replicator once set, and ship after the empty one.
        while st.flushing {
            let under_way = ((st.flushes_begun - 1) % 2) as usize;
            st = self.flushed[under_way].wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if self.replicator.set((Arc::clone(&replicator), Arc::downgrade(self))).is_ok() {
            let at = st.committed;
            replicator.ship(Shipment { from: at, to: at, records: Vec::new(), log: Arc::downgrade(self) });
        }
    }

    /// A shipment's outcome, in log order ([`Shipment::done`]): the range is committed; if it
    /// was refused, its transactions are cancelled here and its writers told so.
    fn shipped(&self, shipment: &Shipment, result: std::result::Result<(), String>) {
        let mut st = self.lock();
        st.committed = st.committed.max(shipment.to);
        if let Err(why) = result {
            tracing::warn!(from = shipment.from, to = shipment.to, %why, "writes refused: not replicated");
            for tx in shipment.transactions() {
                let cancelled = tx.partition().map(|p| self.append_locked(&mut st, &Body::cancel(p, tx.lsn)));
                if let Some(Err(err)) = cancelled {
                    tracing::error!(%err, lsn = tx.lsn, "could not cancel a refused transaction");
                }
            }
            let cancels_end = st.end;
            st.refused.push(shipment.from, shipment.to, why, cancels_end);
            drop(st);
            // Rare (copies down or slow), so this thread may wait for the cancels' flush.
            if let Err(err) = self.wait_local(cancels_end) {
                tracing::error!(%err, "could not make the cancels of refused transactions durable");
            }
            st = self.lock();
        }
        let committed = st.committed;
        let (wakers, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut st.wakers).into_iter().partition(|(end, _)| *end <= committed);
        st.wakers = later;
        let (threads, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut st.parked).into_iter().partition(|(end, _)| *end <= committed);
        st.parked = later;
        drop(st);
        for (_, waker) in wakers {
            waker.wake();
        }
        for (_, thread) in threads {
            thread.unpark();
        }
    }

    /// Waits, without blocking the caller's thread, until the log is durable past `end`: the
    /// flusher thread ([`CommitLog::run_flusher`]) runs the flush if no one else does.
    pub fn durable(&self, end: u64) -> Durability<'_> {
        Durability { log: self, end }
    }

    /// The flusher thread's work, for those who await [`CommitLog::durable`]: flushes whenever
    /// one of them waits and no one else flushes, again at once while records wait, until
    /// [`CommitLog::stop_flusher`] (then they flush themselves).
    pub fn run_flusher(&self) {
        let mut st = self.lock();
        loop {
            if st.stopping {
                return;
            }
            if st.awaits_flush() && !st.flushing && st.failed.is_none() {
                let _ = self.lead(st);
                st = self.lock();
                continue;
            }
            st = self.flush_wanted.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Stops the flusher thread.
    pub fn stop_flusher(&self) {
        self.lock().stopping = true;
        self.flush_wanted.notify_all();
    }

    /// Runs one flush of everything appended so far (no flush runs: `st.flushing` is false),
    /// then wakes whoever it covered and, if more waits, one waiter to lead the next.
    fn lead<'a>(&'a self, mut st: MutexGuard<'a, State>) -> Result<()> {
        st.flushing = true;
        let number = st.flushes_begun;
        st.flushes_begun += 1;
        let chunks = std::mem::take(&mut st.pending);
        let (from, target) = (st.durable, st.end);
        st.flush_target = target;
        drop(st);
        let started = Instant::now();
        let written = write_and_sync(&chunks);
        self.flush_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.flushes.fetch_add(1, Ordering::Relaxed);
        let replicator = self.replicator.get().filter(|_| written.is_ok());
        if let Some((replicator, log)) = replicator {
            // Still the only flush under way: shipments leave in log order.
            let mut records = Vec::with_capacity(chunks.iter().map(|c| c.bytes.len()).sum());
            chunks.iter().for_each(|c| records.extend_from_slice(&c.bytes));
            replicator.ship(Shipment { from, to: target, records, log: log.clone() });
        }
        st = self.lock();
        st.flushing = false;
        let done = match written {
            Ok(()) => {
                st.durable = target;
                if replicator.is_none() {
                    st.committed = target;
                }
                Ok(())
            }
            Err(why) => {
                tracing::error!(%why, "the commit log failed: writes are refused until a restart");
                let err = failed(&st.segment.path, &why);
                st.failed = Some(why);
                Err(err)
            }
        };
        let more = st.end > st.durable;
        let committed = st.committed;
        let (wakers, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut st.wakers).into_iter().partition(|(end, _)| *end <= committed || done.is_err());
        st.wakers = later;
        let awaited = st.awaits_flush();
        // Woken after the lock is let go, the waiters do not wake only to sleep on it.
        drop(st);
        for (_, waker) in wakers {
            waker.wake();
        }
        if awaited {
            // Those this flush did not cover need the next: the flusher runs it, unless it ran
            // this one and goes on by itself.
            self.flush_wanted.notify_one();
        }
        self.flushed[(number % 2) as usize].notify_all();
        let next = &self.flushed[((number + 1) % 2) as usize];
        if done.is_err() {
            next.notify_all();
        } else if more {
            next.notify_one();
        }
        done
    }

    /// Records, durably, that the transaction of `partition` logged at `lsn` did not commit.
    pub fn cancel(&self, partition: u32, lsn: u64) -> Result<()> {
        let (_, end) = self.append(&Body::cancel(partition, lsn))?;
        self.wait_local(end)
    }

    /// Drops the segments every record of which is committed in SQLite, if there are any:
    /// `syncfs` makes those commits durable, then `durable()` (how far each partition's commits
    /// went, read before the sync) is written to the base file and the segments removed.
    /// `durable()` may refuse (`None`), once the holds are read: then nothing is dropped.
    pub fn trim(&self, durable: impl FnOnce() -> Option<Vec<Durable>>) -> Result<()> {
        let flushed = self.lock().durable;
        let floor = self.holds.iter().map(|h| h.load(Ordering::SeqCst)).fold(flushed, u64::min);
        let droppable: Vec<Arc<Segment>> = {
            let st = self.lock();
            st.closed.iter().filter(|(_, end)| *end <= floor).map(|(s, _)| Arc::clone(s)).collect()
        };
        if droppable.is_empty() {
            return Ok(());
        }
        let Some(durable) = durable() else { return Ok(()) };
        layout::sync_filesystem(&self.dir, self.layout.dir())?;
        base::write(&self.layout.log_base(), flushed, &durable)?;
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        for segment in &droppable {
            // The first one dropped becomes the spare if none is ready: its blocks are written.
            let keep = spare.is_none() && segment.limit - segment.header.base == self.segment_bytes;
            if keep && std::fs::rename(&segment.path, self.layout.log_spare()).is_ok() {
                *spare = segment.file.try_clone().ok();
                continue;
            }
            remove(&segment.path)?;
        }
        drop(spare);
        layout::sync_dir(&self.layout.log_base()).map_err(|e| Error::io(self.layout.dir(), &e))?;
        let mut st = self.lock();
        st.closed.retain(|(s, _)| !droppable.iter().any(|d| Arc::ptr_eq(d, s)));
        self.trims.fetch_add(droppable.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Whether there are segments a [`CommitLog::trim`] could look at.
    pub fn has_closed_segments(&self) -> bool {
        !self.lock().closed.is_empty()
    }

    /// Whether a write or sync of the log failed (it refuses appends until a restart).
    pub fn has_failed(&self) -> bool {
        self.lock().failed.is_some()
    }

    /// Why the log refuses appends, if a write or sync of it failed.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// The store closed cleanly (every partition checkpointed): makes that durable, records
    /// `durable` in the base file and removes every segment.
    pub fn close(&self, durable: &[Durable]) -> Result<()> {
        layout::sync_filesystem(&self.dir, self.layout.dir())?;
        let st = self.lock();
        base::write(&self.layout.log_base(), st.end, durable)?;
        // The current segment is kept as the next session's first (a spare), if none is kept.
        for segment in [&st.segment].into_iter().chain(st.closed.iter().map(|(s, _)| s)) {
            retire(&self.layout, &segment.path)?;
        }
        layout::sync_dir(&self.layout.log_base()).map_err(|e| Error::io(self.layout.dir(), &e))
    }

    /// The log's figures now.
    pub fn stats(&self) -> LogStats {
        LogStats {
            flushes: self.flushes.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            flush_nanos: self.flush_nanos.load(Ordering::Relaxed),
            trims: self.trims.load(Ordering::Relaxed),
        }
    }
}

/// The log made durable past a position, awaited ([`CommitLog::durable`]).
#[derive(Debug)]
pub struct Durability<'a> {
    log: &'a CommitLog,
    end: u64,
}

impl std::future::Future for Durability<'_> {
    type Output = Result<()>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut st = self.log.lock();
        if let Some(outcome) = st.refused.outcome(self.end, st.durable).filter(|_| st.committed >= self.end) {
            return Poll::Ready(outcome);
        }
        if let Some(why) = &st.failed {
            return Poll::Ready(Err(failed(&st.segment.path, why)));
        }
        if !st.flushing && st.stopping && st.durable < self.end {
            // No flusher: this task flushes itself, then waits for the copies.
            if let Err(err) = self.log.lead(st) {
                return Poll::Ready(Err(err));
            }
            st = self.log.lock();
            if let Some(outcome) = st.refused.outcome(self.end, st.durable).filter(|_| st.committed >= self.end) {
                return Poll::Ready(outcome);
            }
        }
        // Polled again before its flush (the task woken by something else), it is already
        // on the list: one entry, one wake.
        let waker = cx.waker();
        if !st.wakers.iter().any(|(end, known)| *end == self.end && known.will_wake(waker)) {
            st.wakers.push((self.end, waker.clone()));
        }
        if !st.flushing && st.durable < self.end {
            drop(st);
            self.log.flush_wanted.notify_one();
        }
        Poll::Pending
    }
}

fn failed(path: &Path, why: &str) -> Error {
    Error::Io { path: path.to_owned(), message: format!("the commit log failed earlier ({why}); restart to recover") }
}

/// Writes the chunks where their LSNs say, then syncs each segment written (in order).
fn write_and_sync(chunks: &[Chunk]) -> std::result::Result<(), String> {
    for chunk in chunks {
        let at = chunk.segment.offset(chunk.lsn);
        chunk
            .segment
            .file
            .write_all_at(&chunk.bytes, at)
            .map_err(|e| format!("writing {}: {e}", chunk.segment.path.display()))?;
    }
    let mut synced: Vec<&Arc<Segment>> = Vec::new();
    for chunk in chunks {
        if synced.iter().any(|s| Arc::ptr_eq(s, &chunk.segment)) {
            continue;
        }
        chunk.segment.file.sync_data().map_err(|e| format!("syncing {}: {e}", chunk.segment.path.display()))?;
        synced.push(&chunk.segment);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn tx(partition: u32, id: u32) -> Body {
        let mut builder = TxBuilder::default();
        builder.insert(id, 1, format!("key-{id}").as_bytes(), b"value");
        builder.finish(partition, u64::from(id) + 1, u64::from(id))
    }

    fn fresh(dir: &Path, segment_bytes: u64) -> (Layout, CommitLog) {
        let layout = Layout::new(dir);
        let recovery = Recovery::read(&layout, 2).unwrap();
        let log = CommitLog::start(&layout, &recovery, recovery.end, segment_bytes, 1).unwrap();
        (layout, log)
    }

    fn ids(recovery: &Recovery, partition: usize) -> Vec<u32> {
        recovery.txs[partition]
            .iter()
            .map(|tx| match &tx.effects[0] {
                Effect::Insert { id, .. } => *id,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn records_come_back_in_order_without_the_cancelled_ones_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let (layout, log) = fresh(dir.path(), 8192);
        let mut cancelled = None;
        for id in 0..400 {
            let (lsn, end) = log.append(&tx(id % 2, id)).unwrap();
            if id == 7 {
                cancelled = Some(lsn);
            }
            log.wait_durable(end).unwrap();
        }
        log.cancel(1, cancelled.unwrap()).unwrap();
        assert!(log.has_closed_segments(), "8 KiB segments: the log switched");
        assert!(layout.log_segments().unwrap().len() > 2);
        let recovery = Recovery::read(&layout, 2).unwrap();
        assert_eq!(ids(&recovery, 0), (0..400).step_by(2).collect::<Vec<_>>());
        assert_eq!(ids(&recovery, 1), (1..400).step_by(2).filter(|id| *id != 7).collect::<Vec<_>>());
        let lsns: Vec<u64> = recovery.txs[0].iter().map(|tx| tx.lsn).collect();
        assert!(lsns.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn awaited_flushes_are_run_by_the_flusher_beside_threads_that_flush_themselves() {
        let dir = tempfile::tempdir().unwrap();
        let (layout, log) = fresh(dir.path(), 1 << 20);
        let log = Arc::new(log);
        let flusher = {
            let log = Arc::clone(&log);
            std::thread::spawn(move || log.run_flusher())
        };
        // Two tasks await their records, two threads wait for theirs: both kinds of waiter
        // share the flushes, and no waiter is left without one.
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
        let threads: Vec<_> = (0..2)
            .map(|t| {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    for id in (t..400).step_by(4) {
                        let (_, end) = log.append(&tx(0, id)).unwrap();
                        log.wait_durable(end).unwrap();
                    }
                })
            })
            .collect();
        runtime.block_on(async {
            let tasks: Vec<_> = (2..4)
                .map(|t| {
                    let log = Arc::clone(&log);
                    tokio::spawn(async move {
                        for id in (t..400).step_by(4) {
                            let (_, end) = log.append(&tx(1, id)).unwrap();
                            let wait = tokio::time::timeout(Duration::from_secs(60), log.durable(end));
                            wait.await.expect("a waiter was left without a flush").unwrap();
                            assert!(log.lock().durable >= end, "answered before its flush");
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
        threads.into_iter().for_each(|t| t.join().unwrap());
        log.stop_flusher();
        flusher.join().unwrap();
        let flushes = log.stats().flushes;
        assert!((1..=400).contains(&flushes), "{flushes} flushes");
        let recovery = Recovery::read(&layout, 2).unwrap();
        let mut ids: Vec<u32> = [ids(&recovery, 0), ids(&recovery, 1)].concat();
        ids.sort_unstable();
        assert_eq!(ids, (0..400).collect::<Vec<_>>());
    }

    #[test]
    fn a_segment_after_a_torn_one_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let (layout, log) = fresh(dir.path(), 8192);
        for id in 0..600 {
            let (_, end) = log.append(&tx(0, id)).unwrap();
            log.wait_durable(end).unwrap();
        }
        let segments = layout.log_segments().unwrap();
        assert!(segments.len() >= 3, "{segments:?}");
        let read = |path: &Path| {
            let data = std::fs::read(path).unwrap();
            let base = format::SegmentHeader::decode(&data, path).unwrap().base;
            let (records, end) = format::read_records(&data[HEADER as usize..], base);
            (data, base, records.len(), end)
        };
        let (first, second) = (read(&segments[0].1), read(&segments[1].1));
        // Tear the last record of the second segment: the segments after it start past a gap.
        let (mut torn, base, records, end) = second;
        torn[(HEADER + end - base - 3) as usize] ^= 0xff;
        std::fs::write(&segments[1].1, torn).unwrap();
        let recovery = Recovery::read(&layout, 2).unwrap();
        assert_eq!(recovery.txs[0].len(), first.2 + records - 1, "read up to the tear, nothing after it");
    }

    #[test]
    fn trims_drop_what_is_durable_elsewhere_and_keep_a_spare() {
        let dir = tempfile::tempdir().unwrap();
        let (layout, log) = fresh(dir.path(), 8192);
        log.hold(0);
        for id in 0..300 {
            let (_, end) = log.append(&tx(0, id)).unwrap();
            log.wait_durable(end).unwrap();
        }
        let before = layout.log_segments().unwrap().len();
        let durable = vec![Durable { applied: 7, next_id: 3 }, Durable { applied: 8, next_id: 4 }];
        log.trim(|| Some(durable.clone())).unwrap();
        assert_eq!(layout.log_segments().unwrap().len(), before, "a writer holds what it appended");
        log.release(0);
        log.trim(|| None).unwrap();
        assert_eq!(layout.log_segments().unwrap().len(), before, "a refused trim drops nothing");
        log.trim(|| Some(durable.clone())).unwrap();
        assert_eq!(layout.log_segments().unwrap().len(), 1, "only the current segment is left");
        assert!(layout.log_spare().exists(), "a dropped segment became the spare");
        let base = base::read(&layout.log_base(), 2).unwrap().unwrap();
        assert_eq!((base.durable, base.end), (durable, log.lock().durable));
        // The spare is the next segment; records appended after the switch read back.
        for id in 300..400 {
            let (_, end) = log.append(&tx(1, id)).unwrap();
            log.wait_durable(end).unwrap();
        }
        assert!(!layout.log_spare().exists() || log.stats().trims > 0);
        let recovery = Recovery::read(&layout, 2).unwrap();
        assert_eq!(ids(&recovery, 1), (300..400).collect::<Vec<_>>());
    }

    #[test]
    fn a_segment_that_cannot_be_created_refuses_only_the_appends_that_need_it() {
        let dir = tempfile::tempdir().unwrap();
        let (layout, log) = fresh(dir.path(), 8192);
        // A directory where the next segment would go makes its creation fail (as a full disk
        // would): the appends that need it are refused, with nothing of them in the log.
        let blocked = layout.log_segment(2);
        std::fs::create_dir(&blocked).unwrap();
        let mut refused = 0;
        for id in 0..200 {
            match log.append(&tx(0, id)) {
                Ok((_, end)) => log.wait_durable(end).unwrap(),
                Err(_) => refused += 1,
            }
        }
        assert!(refused > 0);
        std::fs::remove_dir(&blocked).unwrap();
        let (_, end) = log.append(&tx(0, 999)).unwrap();
        log.wait_durable(end).unwrap();
        let recovery = Recovery::read(&layout, 2).unwrap();
        assert_eq!(recovery.txs[0].len(), 200 - refused + 1, "refused appends left no trace");
    }
}
