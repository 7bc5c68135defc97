//! One partition's writer: where it lies between uses ([`Slot`]), its read-write connection and
//! counters ([`PartitionWriter`]), and a group's transaction from `BEGIN` to its answers: run up
//! to its `COMMIT` and logged ([`PartitionWriter::prepare`]), then committed once the log is
//! durable and published ([`PartitionWriter::complete`]).
//!
//! With the commit log, a group's transaction may instead be kept open once the log holds it
//! durably: its writes are answered and held ([`crate::partition::held`]), and the next groups
//! run inside it until one `COMMIT` ends them all (the group that is not kept, or
//! [`PartitionWriter::settle`]). A group that fails there rolls the whole transaction back, and
//! the answered groups are applied again from their commit log records before anything else.
//!
//! [`Held`]: crate::partition::held::Held

use std::{
    collections::HashMap,
    panic::{catch_unwind, AssertUnwindSafe},
    sync::{atomic::Ordering, Arc, Condvar, Mutex},
    time::Instant,
};

use rusqlite::Connection;

use super::{Maintenance, WriteRequest, Writing};
use crate::{
    cache::RecordCache,
    checkpointer::{self, Checkpoints},
    commitlog::{format::Record as LogRecord, Body, CommitLog, TxBuilder},
    config::{IndexMode, TxMode},
    index::entry,
    keyhash::KeyHasher,
    ops::{Op, Outcome, Record, Written},
    partition::{
        held::{self, HeldRecord},
        recovery::rebuild_index,
        replay::replay,
        sql, Partition, WriterStart,
    },
    Error, Result,
};

/// Where a partition's writer lies when no one is using it: its writer thread checks it out
/// for a round, a caller for an inline write.
pub struct Slot {
    writer: Mutex<Option<PartitionWriter>>,
    back: Condvar,
}

impl Slot {
    /// A slot holding `writer`.
    pub fn new(writer: PartitionWriter) -> Self {
        Self { writer: Mutex::new(Some(writer)), back: Condvar::new() }
    }

    /// The writer, waiting until whoever has it puts it back.
    pub(super) fn take(&self) -> PartitionWriter {
        let mut slot = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(writer) = slot.take() {
                return writer;
            }
            slot = self.back.wait(slot).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The writer if it is free now.
    pub fn try_take(&self) -> Option<PartitionWriter> {
        self.writer.try_lock().ok()?.take()
    }

    /// Puts the writer back.
    pub fn put(&self, writer: PartitionWriter) {
        *self.writer.lock().unwrap_or_else(|p| p.into_inner()) = Some(writer);
        self.back.notify_one();
    }
}

/// The writer's side of one partition: the read-write connection and the id counter.
pub struct PartitionWriter {
    pub(super) partition: Arc<Partition>,
    pub(super) conn: Connection,
    pub(super) hasher: KeyHasher,
    pub(super) next_id: u64,
    pub(super) records: u64,
    /// `(next_id, records)` as the partition's `meta` holds them (its last note, or as read).
    pub(super) noted: (u64, u64),
    candidates: Vec<u32>,
    /// The transaction kept open with answered writes in it, if one is.
    holding: Option<Holding>,
    /// A kept transaction rolled back after its groups were answered (a later group failed, or
    /// its `COMMIT`): its writes stay held, and it is applied again before anything else is done.
    unapplied: Option<Holding>,
}

/// A transaction kept open after its writes were answered (they are held: [`Held`]); or one
/// rolled back since, to be applied again ([`PartitionWriter::reapply`]).
#[derive(Debug)]
pub(super) struct Holding {
    /// When its first group was answered.
    pub(super) began: Instant,
    /// The groups answered in it.
    pub(super) groups: u32,
    /// Bytes of the keys and values it holds.
    pub(super) bytes: usize,
    /// Where its first record in the commit log begins, once it has one: the log keeps what
    /// follows ([`crate::commitlog::CommitLog::hold_from`]).
    pub(super) from: Option<u64>,
    /// The log position `meta` notes in it, if a group noted one.
    applied: Option<u64>,
    /// Its groups' records in the commit log, at their positions.
    bodies: Vec<(u64, Body)>,
}

/// What becomes of a group's transaction once the log holds it durably.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// `COMMIT` it (with whatever is held), then answer.
    Commit,
    /// Answer and keep it open, held.
    Keep,
}

/// A transaction's effects, applied to the writer's state only once it commits.
struct Tx {
    next_id: u64,
    records: u64,
    /// It writes `next_id` and `records` to `meta` ([`PartitionWriter::note_due`]).
    noted: bool,
    /// Keys written in this transaction: `(id, counter)`, or `None` once deleted.
    overlay: HashMap<Vec<u8>, Option<(u32, u64)>>,
    added: Vec<u64>,
    removed: Vec<u64>,
    /// Ids at or below this live in the index file: deleting one leaves a tombstone.
    tombstone_floor: u64,
    /// What the transaction did, for the commit log (when there is one).
    log: Option<TxBuilder>,
    /// Its record as appended to the commit log, kept for a group that may be held.
    body: Option<Body>,
    /// Ids it inserted, updated or deleted, while a move copies the partition away.
    changed: Option<Vec<u32>>,
}

impl Tx {
    /// Notes that the record of `id` changed, if a move wants to know.
    fn changed(&mut self, id: u32) {
        if let Some(changed) = &mut self.changed {
            changed.push(id);
        }
    }
}

/// Where a transaction's record is in the commit log: `(lsn, end)`.
pub(super) type Logged = (u64, u64);

/// A group's transaction, run up to its `COMMIT` ([`PartitionWriter::prepare`]), waiting for
/// the round's flush of the commit log ([`PartitionWriter::complete`]).
pub(super) struct Prepared {
    reqs: Vec<WriteRequest>,
    started: Instant,
    /// Per-request results and the open transaction; or the error every request gets (the
    /// transaction rolled back).
    state: Result<(Vec<Vec<Result<Outcome>>>, Tx)>,
    /// The transaction's record in the commit log.
    pub(super) logged: Option<Logged>,
}

impl Prepared {
    /// The RAM holding the group's writes would take, at most ([`held::charge`]).
    pub(super) fn bytes(&self) -> usize {
        let op_bytes = |op: &Op| match op {
            Op::Put { key, value, .. } => held::charge(key.len(), value.len()),
            Op::Delete { key, .. } => held::charge(key.len(), 0),
            Op::Get { .. } => 0,
        };
        self.reqs.iter().flat_map(|r| &r.ops).map(|(op, _)| op_bytes(op)).sum()
    }
}

impl PartitionWriter {
    /// Writer state for a partition just opened.
    pub fn new(partition: Arc<Partition>, start: WriterStart, hasher: KeyHasher) -> Self {
        let WriterStart { conn, next_id, records, .. } = start;
        Self {
            partition,
            conn,
            hasher,
            next_id,
            records,
            noted: (next_id, records),
            candidates: Vec::new(),
            holding: None,
            unapplied: None,
        }
    }

    /// The transaction kept open with answered writes in it, if one is.
    pub(super) fn holding(&self) -> Option<&Holding> {
        self.holding.as_ref()
    }

    /// Whether answered writes wait for a transaction to reach SQLite: one kept open, or one to
    /// be applied again. The writer stays with its thread meanwhile.
    pub(super) fn keeps(&self) -> bool {
        self.holding.is_some() || self.unapplied.is_some()
    }

    /// Whether a transaction whose `COMMIT` failed for want of disk space waits to be applied
    /// again.
    pub(super) fn unapplied(&self) -> bool {
        self.unapplied.is_some()
    }

    /// Where the first commit log record of the answered writes not in SQLite begins.
    pub(super) fn kept_from(&self) -> Option<u64> {
        self.holding.as_ref().or(self.unapplied.as_ref()).and_then(|h| h.from)
    }

    /// The partition this writer serves.
    pub fn partition(&self) -> &Arc<Partition> {
        &self.partition
    }

    /// Runs `reqs` in one transaction up to its `COMMIT` and, with a commit log, appends what
    /// it did to the log. Nothing is visible to readers yet.
    pub(super) fn prepare(&mut self, reqs: Vec<WriteRequest>, tx_mode: TxMode, log: Option<&CommitLog>) -> Prepared {
        let started = Instant::now();
        let mut prepared = Prepared { reqs, started, state: Err(Error::Closed), logged: None };
        if let Some(err) = self.partition.poison_error() {
            prepared.state = Err(err);
            return prepared;
        }
        if let Err(err) = self.reapply() {
            prepared.state = Err(err);
            return prepared;
        }
        let reqs = &prepared.reqs;
        let run = catch_unwind(AssertUnwindSafe(|| self.transact_repairing(reqs, tx_mode, log.is_some())));
        prepared.state = match run {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(err)) => Err(self.failed(err)),
            Err(panic) => Err(self.panicked(&*panic)),
        };
        if let (Ok((_, tx)), Some(log)) = (&mut prepared.state, log) {
            match self.log(tx, log) {
                Ok(logged) => prepared.logged = logged,
                Err((err, logged)) => {
                    self.roll_back_group();
                    prepared.logged = logged;
                    prepared.state = Err(self.failed(err));
                }
            }
        }
        prepared
    }

    /// Starts reading, in the background, the index file pages that `reqs` will look up.
    pub(super) fn prefetch(&self, reqs: &[WriteRequest]) {
        if let Some(index) = &self.partition.index {
            index.prefetch(reqs.iter().flat_map(|r| r.ops.iter().map(|(_, fp)| *fp)));
        }
    }

    /// Appends the transaction's record to the log and, if a note is due
    /// ([`PartitionWriter::note_due`]), writes the counters inside the transaction with how far
    /// the partition applies the log (without one, replay tells by the ids and counters whether
    /// the database holds a logged effect). A transaction that wrote nothing logs nothing. On
    /// error, what was appended (to be cancelled).
    fn log(&self, tx: &mut Tx, log: &CommitLog) -> std::result::Result<Option<Logged>, (Error, Option<Logged>)> {
        let Some(builder) = tx.log.take().filter(|b| !b.is_empty()) else { return Ok(None) };
        let body = builder.finish(self.partition.id, tx.next_id, tx.records);
        let (lsn, end) = log.append(&body).map_err(|e| (e, None))?;
        tx.body = Some(body);
        tx.noted = self.note_due(tx);
        if tx.noted {
            sql::write_meta(&self.conn, tx.next_id, tx.records, Some(end)).map_err(|e| (e, Some((lsn, end))))?;
        }
        Ok(Some((lsn, end)))
    }

    /// Whether `tx` must write the counters to `meta`: it changed them, and it deleted a record
    /// (or one was deleted since the last note), or [`sql::NOTE_EVERY`] ids have been assigned
    /// since. Otherwise the records it inserted are the rows at or above the noted `next_id`,
    /// which is how [`sql::read_meta`] finds them.
    fn note_due(&self, tx: &Tx) -> bool {
        let (noted_next_id, noted_records) = self.noted;
        let new_ids = tx.next_id - noted_next_id;
        let only_inserted = tx.records.checked_sub(noted_records) == Some(new_ids);
        (tx.next_id, tx.records) != (self.next_id, self.records) && !(only_inserted && new_ids < sql::NOTE_EVERY)
    }

    /// Commits a prepared group once the log is durable past its record (`flushed`), then
    /// answers each request; a group that fails is rolled back, its logged record cancelled,
    /// and every request answered the error. The commit is counted in `metrics` before anyone
    /// is answered; `cache` learns of it as [`RecordCache`] requires.
    ///
    /// `end` says whether the transaction commits now or is kept open with its writes held. A
    /// kept transaction's earlier groups were answered: if it fails, their writes stay held and
    /// are applied again ([`PartitionWriter::lose_holding`]).
    pub(super) fn complete(&mut self, prepared: Prepared, flushed: &Result<()>, writing: &Writing, end: End) {
        let (log, cache) = (writing.log.as_deref(), writing.cache.as_deref());
        let Prepared { mut reqs, started, state, logged } = prepared;
        let held_applied = self.holding.as_ref().and_then(|h| h.applied);
        let outcome = match state {
            Err(err) => Err(err),
            Ok((results, tx)) => match flushed {
                Err(err) if logged.is_some() => {
                    self.roll_back_group();
                    Err(self.failed(err.clone()))
                }
                _ => match catch_unwind(AssertUnwindSafe(|| self.end_group(&tx, end, cache))) {
                    Ok(Ok(())) => Ok((results, tx)),
                    Ok(Err(err)) => Err(self.commit_failed(err)),
                    Err(panic) => Err(self.panicked(&*panic)),
                },
            },
        };
        if let (Err(_), Some((lsn, _)), Some(log), Ok(())) = (&outcome, logged, log, flushed) {
            // Logged and durable, but not committed: replay must not apply it.
            if let Err(err) = log.cancel(self.partition.id, lsn) {
                self.partition.poison(format!("could not cancel a failed commit in the commit log: {err}"));
            }
        }
        writing.metrics.record_commit(reqs.len(), started.elapsed());
        match outcome {
            Ok((results, tx)) => {
                let noted = logged.filter(|_| tx.noted).map(|(_, end)| end);
                self.publish(&tx, results.iter().map(Vec::len).sum());
                match end {
                    End::Keep => self.hold(held_writes(&mut reqs, &results), tx, logged, cache),
                    End::Commit => self.committed(noted.or(held_applied)),
                }
                for (req, result) in reqs.into_iter().zip(results) {
                    let _ = req.reply.send(Ok(result));
                }
            }
            Err(err) => reply_all(reqs, &err),
        }
    }

    /// Holds a kept group's `writes` before they are answered; then the keys leave `cache` (a
    /// read that did not find them held noted the cache's generation before this, and caches
    /// nothing). `logged`: where the group's record is in the commit log, if it has one; `noted`:
    /// the log position the group wrote to `meta`, if it did.
    fn hold(
        &mut self,
        writes: Vec<(Vec<u8>, HeldRecord)>,
        mut tx: Tx,
        logged: Option<Logged>,
        cache: Option<&RecordCache>,
    ) {
        let bytes: usize =
            writes.iter().map(|(k, r)| held::charge(k.len(), r.as_ref().map_or(0, |(_, _, v)| v.len()))).sum();
        let noted = logged.filter(|_| tx.noted).map(|(_, end)| end);
        let holding = self.holding.get_or_insert_with(|| Holding {
            began: Instant::now(),
            groups: 0,
            bytes: 0,
            from: None,
            applied: None,
            bodies: Vec::new(),
        });
        holding.groups += 1;
        holding.bytes += bytes;
        holding.applied = noted.or(holding.applied);
        if let (Some((lsn, _)), Some(body)) = (logged, tx.body.take()) {
            holding.from = holding.from.or(Some(lsn));
            holding.bodies.push((lsn, body));
        }
        self.partition.held.add(writes);
        if let Some(cache) = cache {
            cache.commit_begins(self.partition.id, tx.overlay.keys());
            cache.commit_ended(self.partition.id);
        }
    }

    /// What follows a transaction's end: the checkpoint the checkpointer left unfinished, a
    /// new one if the WAL has grown past its threshold, a merge if the recent index is full.
    pub(super) fn after_commit(&self, writing: &Writing) {
        Checkpoints::finish(&self.partition, &self.conn);
        writing.checkpoints.want(&self.partition, checkpointer::threshold(&writing.config, self.partition.id));
        if self.partition.index.as_ref().is_some_and(|i| i.freeze_if(writing.config.merge_threshold)) {
            let _ = writing.maintenance.send(Maintenance::Merge(self.partition.id));
        }
    }

    /// Ends a group's part of the transaction as `end` says: `COMMIT`s it (the keys it wrote
    /// leaving `cache` just before), or keeps it open (they leave `cache` once held).
    fn end_group(&mut self, tx: &Tx, end: End, cache: Option<&RecordCache>) -> Result<()> {
        match end {
            End::Keep => Ok(()),
            End::Commit => {
                if let Some(cache) = cache.filter(|_| !tx.overlay.is_empty()) {
                    cache.commit_begins(self.partition.id, tx.overlay.keys());
                }
                self.commit(cache)
            }
        }
    }

    /// `COMMIT`s the open transaction, forgets the held writes it committed (a read finds them
    /// in SQLite from now on), then lets `cache` take records in again. In that order: the
    /// group committing may have written a held key again, and a read that found the key's
    /// held value after the `COMMIT` must not cache it.
    fn commit(&mut self, cache: Option<&RecordCache>) -> Result<()> {
        let committed = self.partition.commit(&self.conn);
        if committed.is_ok() && self.holding.take().is_some() {
            self.partition.held.clear();
        }
        if let Some(cache) = cache {
            cache.commit_ended(self.partition.id);
        }
        committed
    }

    /// A `COMMIT` failed with `err`: rolls back; answered writes the transaction held stay
    /// held ([`PartitionWriter::lose_holding`]).
    fn commit_failed(&mut self, err: Error) -> Error {
        self.roll_back_group();
        self.failed(err)
    }

    /// The transaction holding answered writes was rolled back. Their writes stay held
    /// (readable), and are applied again, from the records they logged, before anything else is
    /// done ([`PartitionWriter::reapply`]).
    fn lose_holding(&mut self) {
        if let Some(holding) = self.holding.take() {
            self.unapplied = Some(holding);
        }
    }

    /// Applies again, in one transaction, the answered groups of a kept transaction rolled
    /// back, as replay would from the log; then they are committed like any kept transaction.
    /// Fails with the error that stopped it, or the partition's poison (the groups stay to be
    /// applied again; poisoned unless for want of disk space: the commit log, which a poisoned
    /// partition keeps whole, brings them into SQLite at the next start).
    /// Whether it applied any.
    fn reapply(&mut self) -> Result<bool> {
        let Some(unapplied) = &self.unapplied else { return Ok(false) };
        if let Some(poisoned) = self.partition.poison_error() {
            return Err(poisoned);
        }
        if unapplied.bodies.is_empty() {
            // Its groups wrote nothing (conditions that failed, reads): nothing to apply, and no
            // log position for the partition's files to be told of.
            self.unapplied = None;
            return Ok(false);
        }
        let txs: Vec<_> = unapplied
            .bodies
            .iter()
            .filter_map(|(lsn, body)| match body.decode_at(*lsn) {
                Some(LogRecord::Tx(tx)) => Some(tx),
                _ => None,
            })
            .collect();
        let floor = self.partition.index.as_ref().map_or(0, |i| i.tombstone_floor());
        match replay(&self.conn, &txs, 0, self.partition.mode, floor) {
            Ok((applied, _)) => {
                self.unapplied = None;
                self.noted = (self.next_id, self.records);
                self.committed(Some(applied));
                self.partition.held.clear();
                Ok(true)
            }
            Err(err) => {
                if !matches!(err, Error::DiskFull(_)) {
                    self.partition.poison(format!("applying answered writes again failed: {err}"));
                }
                Err(err)
            }
        }
    }

    /// Commits the transaction kept open, if one is: its held writes reach SQLite, and the
    /// partition's files are told how far they apply the log. Then what follows a commit. Fails
    /// if the partition holds answered writes its files lack, which is what a reader of its
    /// files must not miss: with the error of the `COMMIT` or re-apply that failed now (a full
    /// disk: 507), or the partition's poison.
    pub(super) fn settle(&mut self, writing: &Writing) -> Result<()> {
        if self.commit_held()? {
            self.after_commit(writing);
        }
        Ok(())
    }

    /// Commits the transaction kept open, if one is (without what follows a commit); whether it
    /// committed anything. Fails as [`PartitionWriter::settle`] says.
    fn commit_held(&mut self) -> Result<bool> {
        let mut committed = self.reapply()?;
        if let Some(applied) = self.holding.as_ref().map(|h| h.applied) {
            match catch_unwind(AssertUnwindSafe(|| self.commit(None))) {
                Ok(Ok(())) => {
                    self.committed(applied);
                    committed = true;
                }
                Ok(Err(err)) => return Err(self.commit_failed(err)),
                Err(panic) => return Err(self.panicked(&*panic)),
            }
        }
        match self.partition.held.any() {
            true => Err(self.partition.poison_error().unwrap_or(Error::Closed)),
            false => Ok(committed),
        }
    }

    /// Rolls back what the group under way did: the whole transaction, with any answered
    /// groups kept in it, which are then applied again ([`PartitionWriter::lose_holding`]).
    /// Failures are rare (a full disk, I/O, a damaged file), so they pay for the re-apply,
    /// and the groups that succeed pay no savepoint.
    fn roll_back_group(&mut self) {
        sql::rollback(&self.conn);
        self.lose_holding();
    }

    /// A transaction failed with `err`: poisons the partition unless the write may be retried
    /// (a full disk, which SQLite rolled back cleanly; copies that did not acknowledge it).
    /// Returns the error to answer.
    fn failed(&self, err: Error) -> Error {
        if !err.is_retryable_write() {
            self.partition.poison(format!("commit failed: {err}"));
        }
        err
    }

    /// The writer panicked inside a transaction: rolls back, poisons, returns the error.
    fn panicked(&mut self, panic: &(dyn std::any::Any + Send)) -> Error {
        sql::rollback(&self.conn);
        // Answered writes of a kept transaction stay held (the partition is poisoned below).
        self.holding = None;
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        self.partition.poison(format!("writer panicked: {what}"));
        self.partition.poison_error().unwrap_or(Error::Closed)
    }

    /// Runs the transaction; if the index file turns out damaged, rebuilds it and runs again.
    fn transact_repairing(
        &mut self,
        reqs: &[WriteRequest],
        tx_mode: TxMode,
        logging: bool,
    ) -> Result<(Vec<Vec<Result<Outcome>>>, Tx)> {
        match self.transact(reqs, tx_mode, logging) {
            Err(Error::Corrupt { path, what }) if self.partition.index.is_some() => {
                tracing::warn!(
                    partition = self.partition.id, path = %path.display(), %what,
                    "index damaged; rebuilding"
                );
                // The rebuild reads committed rows only.
                self.commit_held()?;
                self.rebuild()?;
                self.transact(reqs, tx_mode, logging)
            }
            other => other,
        }
    }

    /// Runs the transaction up to its `COMMIT` (rolled back on error); `logging`: note its
    /// effects for the commit log.
    fn transact(
        &mut self,
        reqs: &[WriteRequest],
        tx_mode: TxMode,
        logging: bool,
    ) -> Result<(Vec<Vec<Result<Outcome>>>, Tx)> {
        let mut tx = Tx {
            next_id: self.next_id,
            records: self.records,
            noted: false,
            overlay: HashMap::new(),
            added: Vec::new(),
            removed: Vec::new(),
            tombstone_floor: self.partition.index.as_ref().map_or(0, |i| i.tombstone_floor()),
            log: logging.then(TxBuilder::default),
            body: None,
            changed: self.partition.departure.tracking().then(Vec::new),
        };
        if self.holding.is_none() {
            sql::begin(&self.conn, tx_mode)?;
        }
        let run = (|| {
            let mut results = Vec::with_capacity(reqs.len());
            for req in reqs {
                let mut outcomes = Vec::with_capacity(req.ops.len());
                for (op, fp) in &req.ops {
                    outcomes.push(self.apply(&mut tx, op, *fp)?);
                }
                results.push(outcomes);
            }
            if !logging && self.note_due(&tx) {
                sql::write_meta(&self.conn, tx.next_id, tx.records, None)?;
                tx.noted = true;
            }
            Ok(results)
        })();
        match run {
            Ok(results) => Ok((results, tx)),
            Err(err) => {
                self.roll_back_group();
                Err(err)
            }
        }
    }

    /// Applies one operation inside the transaction. The outer error aborts the transaction;
    /// the inner one is this operation's own answer (not found, condition failed, ...).
    fn apply(&mut self, tx: &mut Tx, op: &Op, fp: u32) -> Result<Result<Outcome>> {
        match op {
            Op::Get { key } => {
                let Some((id, _)) = self.current(tx, key, fp)? else { return Ok(Ok(Outcome::Found(None))) };
                let row = sql::row_by_id(&self.conn, id)?;
                let record = row.map(|r| Record { version: self.partition.version(id, r.counter), value: r.value });
                Ok(Ok(Outcome::Found(record)))
            }
            Op::Put { key, value, condition } => {
                if self.partition.mode == IndexMode::None {
                    return self.append(tx, key, value, fp);
                }
                let current = self.current(tx, key, fp)?;
                if let Err(e) = condition.check(current.map(|(id, c)| self.partition.version(id, c))) {
                    return Ok(Err(e));
                }
                let Some((id, counter)) = current else { return self.append(tx, key, value, fp) };
                let counter = counter + 1;
                sql::update(&self.conn, id, counter, value)?;
                if let Some(log) = &mut tx.log {
                    log.update(id, counter, value);
                }
                tx.changed(id);
                tx.overlay.insert(key.clone(), Some((id, counter)));
                Ok(Ok(Outcome::Written(Written { version: self.partition.version(id, counter), created: false })))
            }
            Op::Delete { key, condition } => {
                let current = self.current(tx, key, fp)?;
                if let Err(e) = condition.check(current.map(|(id, c)| self.partition.version(id, c))) {
                    return Ok(Err(e));
                }
                let Some((id, counter)) = current else { return Ok(Err(Error::NotFound)) };
                let hashed = self.partition.mode == IndexMode::Hash;
                let tombstone = hashed && u64::from(id) <= tx.tombstone_floor;
                sql::delete(&self.conn, id, tombstone)?;
                if let Some(log) = &mut tx.log {
                    log.delete(id);
                }
                tx.changed(id);
                if hashed && !tombstone {
                    tx.removed.push(entry(fp, id));
                }
                tx.records -= 1;
                tx.overlay.insert(key.clone(), None);
                Ok(Ok(Outcome::Deleted { version: self.partition.version(id, counter) }))
            }
        }
    }

    fn append(&mut self, tx: &mut Tx, key: &[u8], value: &[u8], fp: u32) -> Result<Result<Outcome>> {
        let Ok(id) = u32::try_from(tx.next_id) else {
            return Ok(Err(Error::PartitionFull { partition: self.partition.id }));
        };
        sql::insert(&self.conn, id, key, 1, value)?;
        if let Some(log) = &mut tx.log {
            log.insert(id, 1, key, value);
        }
        tx.changed(id);
        tx.next_id += 1;
        tx.records += 1;
        let written = Outcome::Written(Written { version: self.partition.version(id, 1), created: true });
        match self.partition.mode {
            IndexMode::Hash => tx.added.push(entry(fp, id)),
            IndexMode::None => return Ok(Ok(written)),
            IndexMode::Sqlite => {}
        }
        tx.overlay.insert(key.to_vec(), Some((id, 1)));
        Ok(Ok(written))
    }

    /// The `(id, counter)` of `key` as this transaction sees it.
    fn current(&mut self, tx: &Tx, key: &[u8], fp: u32) -> Result<Option<(u32, u64)>> {
        if let Some(slot) = tx.overlay.get(key) {
            return Ok(*slot);
        }
        match (self.partition.mode, &self.partition.index) {
            (IndexMode::Hash, Some(index)) => {
                index.candidates(fp, &mut self.candidates)?;
                for &id in &self.candidates {
                    if let Some((stored, counter)) = sql::key_counter_by_id(&self.conn, id)? {
                        if stored == key {
                            return Ok(Some((id, counter)));
                        }
                    }
                }
                Ok(None)
            }
            (IndexMode::Sqlite, _) => sql::id_counter_by_key(&self.conn, key),
            _ => Ok(None),
        }
    }

    /// Publishes a transaction's group about to be answered: ids, counts, the recent index (the
    /// writer's later groups find its records by it, and readers skip ids their snapshot lacks).
    fn publish(&mut self, tx: &Tx, ops: usize) {
        self.next_id = tx.next_id;
        self.records = tx.records;
        if tx.noted {
            self.noted = (tx.next_id, tx.records);
        }
        let counters = &self.partition.counters;
        counters.records.store(tx.records, Ordering::Relaxed);
        counters.ops.fetch_add(ops as u64, Ordering::Relaxed);
        if let Some(index) = &self.partition.index {
            index.apply(&tx.added, &tx.removed, tx.next_id - 1);
        }
        if let Some(changed) = tx.changed.as_deref().filter(|c| !c.is_empty()) {
            self.partition.departure.note(changed);
        }
    }

    /// The transaction committed: the partition's files hold every group published so far, and
    /// apply the commit log up to `applied` (the end of the last record whose group noted it).
    fn committed(&self, applied: Option<u64>) {
        self.partition.next_id.store(self.next_id, Ordering::Relaxed);
        self.partition.counters.commits.fetch_add(1, Ordering::Relaxed);
        if let Some(end) = applied {
            self.partition.applied.store(end, Ordering::Relaxed);
        }
    }

    /// Rebuilds the partition's index from SQLite.
    pub fn rebuild(&mut self) -> Result<()> {
        match &self.partition.index {
            Some(index) => rebuild_index(&self.conn, index, self.hasher, self.next_id, &self.partition.wal_path),
            None => Ok(()),
        }
    }
}

/// Each key's last state after a group's writes that succeeded, for [`Held`]; the keys and values
/// are taken out of `reqs`, which are only answered after this.
fn held_writes(reqs: &mut [WriteRequest], results: &[Vec<Result<Outcome>>]) -> Vec<(Vec<u8>, HeldRecord)> {
    let mut writes = Vec::new();
    for (req, outcomes) in reqs.iter_mut().zip(results) {
        for ((op, _), outcome) in req.ops.iter_mut().zip(outcomes) {
            match (op, outcome) {
                (Op::Put { key, value, .. }, Ok(Outcome::Written(w))) => {
                    let (id, counter) = (w.version.id as u32, w.version.counter);
                    writes.push((std::mem::take(key), Some((id, counter, std::mem::take(value)))));
                }
                (Op::Delete { key, .. }, Ok(Outcome::Deleted { .. })) => writes.push((std::mem::take(key), None)),
                _ => {}
            }
        }
    }
    writes
}

fn reply_all(reqs: Vec<WriteRequest>, err: &Error) {
    for req in reqs {
        let _ = req.reply.send(Err(err.clone()));
    }
}
