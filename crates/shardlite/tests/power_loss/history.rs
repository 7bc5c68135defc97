//! What the clients know of each key, and what a key may hold after a power cut at T.
//!
//! Each key belongs to one client task, which waits for each answer before its next request,
//! so a key's writes are a sequence and at most one of them is unanswered at any moment. A
//! write is *acknowledged before T* if its 2xx answer arrived before T (the answer's arrival is
//! after the server's commit, so this never credits the server too early); it is *in flight at
//! T* if it was sent before T and not answered before T. After a power cut at T a key must hold
//! the state of its last write acknowledged before T (absent if none, or if that was a DELETE),
//! or the state of the write in flight at T: an unanswered write may or may not have been
//! applied. The operations of one `POST /batch` that fall in one partition are one transaction:
//! applied all or none.
//!
//! The history runs over several server sessions on one directory. A write left unanswered
//! because its server was killed stays in flight until the next session, once it has opened the
//! directory (replayed, synced), reads the key: that read *settles* it. Found applied, it counts
//! from the read's answer on as if acknowledged then (with the commit log, recovery made the
//! directory durable before the server answered, so a power cut after the read must keep it;
//! with `synchronous = normal` losing it is a lost write like any other); found not applied, it
//! is known never to have been applied from then on, and finding it later is a failure. A cut
//! before the read (in the gap between sessions, or during the recovery that would have settled
//! it) still sees it in flight.
//!
//! With `synchronous = full` a key that holds the state of its last acknowledged write must
//! also answer the tag that write was given (or that the read settling it found): nothing shown
//! was lost, so no tag changed.

use std::collections::BTreeMap;

/// One write to a key: a PUT (the new value) or a DELETE (`None`), alone or in a batch.
#[derive(Debug, Clone)]
pub struct Write {
    /// When the request was sent (read just before sending).
    pub sent: u64,
    /// When its 2xx answer arrived; `None` if it never did (the server was killed).
    pub answered: Option<u64>,
    /// For an unanswered write: when a read after the restart answered, and whether it found
    /// the write applied.
    pub settled: Option<(u64, bool)>,
    /// The key's state after it: the value, or `None` (deleted).
    pub state: Option<Vec<u8>>,
    /// The tag its answer gave (a PUT's), or the read that settled it applied.
    pub tag: Option<String>,
    /// The batch it was part of.
    pub batch: Option<u64>,
}

impl Write {
    /// From when the write must be found (unless a later one replaced it): its answer, or the
    /// read that found it applied after a restart.
    pub fn holds_from(&self) -> Option<u64> {
        self.answered.or(match self.settled {
            Some((at, true)) => Some(at),
            _ => None,
        })
    }

    /// Whether a read before `t` found it not applied (it never will be).
    pub fn void_at(&self, t: u64) -> bool {
        matches!(self.settled, Some((at, false)) if at < t)
    }

    /// Whether it was in flight at `t`: sent, neither answered nor settled.
    pub fn in_flight_at(&self, t: u64) -> bool {
        self.sent < t && self.holds_from().is_none_or(|at| at >= t) && !self.void_at(t)
    }
}

/// A key and every write sent to it, in order (writes refused with 503 are left out).
#[derive(Debug, Clone)]
pub struct KeyHistory {
    /// The key.
    pub key: Vec<u8>,
    /// Its partition.
    pub partition: u32,
    /// Its writes.
    pub writes: Vec<Write>,
}

/// What was wrong with a rebuilt directory.
#[derive(Debug, Clone)]
pub enum Failure {
    /// `shardlite check` failed; its output.
    Check(String),
    /// The store did not open; the error.
    Open(String),
    /// The store refused to open because a partition's WAL is missing (commits may be lost);
    /// the error. The keys are judged on the store opened accepting the loss.
    Refused(String),
    /// A key holds a state older than its last acknowledged write: that write was lost.
    Lost { key: String, expected: String, in_flight: String, found: String },
    /// A key holds a state no write sent before T produced (a later one, or none at all).
    Wrong { key: String, expected: String, in_flight: String, found: String },
    /// A key holds the state of an unanswered write that a read after a restart, before T,
    /// found not applied.
    Revived { key: String, expected: String, found: String },
    /// An unanswered batch is applied in part within one partition.
    TornBatch { batch: u64, partition: u32, keys: Vec<(String, Applied)> },
    /// A key holds the state of its last acknowledged write under another tag than it was given.
    TagChanged { key: String, given: String, found: String },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Check(output) => write!(f, "shardlite check failed:\n{output}"),
            Failure::Open(err) => write!(f, "the store did not open: {err}"),
            Failure::Refused(err) => write!(f, "the store refused to open (then opened accepting the loss): {err}"),
            Failure::Lost { key, expected, in_flight, found } => write!(
                f,
                "LOST acknowledged write: key {key}: expected {expected} (or in flight {in_flight}), found {found}"
            ),
            Failure::Wrong { key, expected, in_flight, found } => {
                write!(f, "key {key}: expected {expected} (or in flight {in_flight}), found {found}, which no write before the cut made")
            }
            Failure::Revived { key, expected, found } => write!(
                f,
                "key {key}: expected {expected}, found {found}: the state of an unanswered write that a read after a \
                 restart found not applied"
            ),
            Failure::TagChanged { key, given, found } => {
                write!(f, "key {key}: its state was given the tag {given}, and is found under {found}")
            }
            Failure::TornBatch { batch, partition, keys } => {
                write!(f, "batch {batch} half applied in partition {partition}: {keys:?}")?;
                if self.explained_by_a_loss() {
                    write!(f, " (or an acknowledged write to a key it deletes was lost)")?;
                }
                Ok(())
            }
        }
    }
}

impl Failure {
    /// A torn batch whose only applied-looking operations are deletes found absent: the key's
    /// acknowledged state may have been lost instead (a separate failure; with `synchronous =
    /// normal`, an expected one), so this proves no torn transaction.
    pub fn explained_by_a_loss(&self) -> bool {
        match self {
            Failure::TornBatch { keys, .. } => !keys.iter().any(|(_, a)| *a == Applied::Yes),
            _ => false,
        }
    }
}

/// Whether an operation of an unanswered batch shows in the rebuilt store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The key holds the value it put.
    Yes,
    /// The key holds its state from before.
    No,
    /// It deleted the key, which is absent: applied, unless the key's acknowledged state was
    /// lost (which an earlier check of the same key cannot tell apart).
    Deleted,
}

/// A state as the report shows it: the value's tag (up to its `:`), or "absent".
pub fn show(state: &Option<Vec<u8>>) -> String {
    match state {
        None => "absent".to_owned(),
        Some(v) => {
            let tag = v.split(|b| *b == b':').next().unwrap_or(v);
            format!("{:?}", String::from_utf8_lossy(tag))
        }
    }
}

/// Counts from judging one cut.
#[derive(Debug, Default, Clone, Copy)]
pub struct Judged {
    /// Keys whose last acknowledged write before T exists.
    pub acknowledged: usize,
    /// Writes in flight at T.
    pub in_flight: usize,
    /// Of those, found applied.
    pub applied: usize,
}

/// Judges every key against `found` (what the rebuilt store holds for a key: its value and
/// tag) at cut `t`; with `tags_kept`, a key holding its last acknowledged state must answer
/// that state's tag.
pub fn judge(
    keys: &[KeyHistory],
    t: u64,
    tags_kept: bool,
    mut found: impl FnMut(&[u8]) -> Option<(Vec<u8>, String)>,
) -> (Judged, Vec<Failure>) {
    let mut judged = Judged::default();
    let mut failures = Vec::new();
    // (batch, partition) -> (key, applied) of its operations in flight at t.
    let mut batches: BTreeMap<(u64, u32), Vec<(String, Applied)>> = BTreeMap::new();
    for k in keys {
        let name = String::from_utf8_lossy(&k.key).into_owned();
        let acked = k.writes.iter().rposition(|w| w.holds_from().is_some_and(|a| a < t));
        let expected = acked.and_then(|i| k.writes[i].state.clone());
        let mut unanswered = k.writes.iter().filter(|w| w.in_flight_at(t));
        let in_flight = unanswered.next();
        assert!(unanswered.next().is_none(), "key {name}: two writes in flight at once");
        judged.acknowledged += usize::from(acked.is_some());
        judged.in_flight += usize::from(in_flight.is_some());
        let (state, tag) = found(&k.key).unzip();
        let applied = if state == expected {
            let given = acked.and_then(|i| k.writes[i].tag.as_ref());
            if let (true, Some(given), Some(tag)) = (tags_kept, given, &tag) {
                if given != tag {
                    failures.push(Failure::TagChanged { key: name.clone(), given: given.clone(), found: tag.clone() });
                }
            }
            Applied::No
        } else if in_flight.is_some_and(|w| w.state == state) {
            judged.applied += 1;
            if state.is_some() {
                Applied::Yes
            } else {
                Applied::Deleted
            }
        } else {
            let (expected, in_flight_shown, found_shown) =
                (show(&expected), in_flight.map_or("none".to_owned(), |w| show(&w.state)), show(&state));
            // An older state: the state before the first write, or one an earlier write made.
            let older =
                state.is_none() || k.writes[..acked.unwrap_or(0)].iter().any(|w| !w.void_at(t) && w.state == state);
            let revived = state.is_some() && k.writes.iter().any(|w| w.void_at(t) && w.state == state);
            failures.push(if revived {
                Failure::Revived { key: name.clone(), expected, found: found_shown }
            } else if older && acked.is_some() {
                Failure::Lost { key: name.clone(), expected, in_flight: in_flight_shown, found: found_shown }
            } else {
                Failure::Wrong { key: name.clone(), expected, in_flight: in_flight_shown, found: found_shown }
            });
            continue;
        };
        if let Some(batch) = in_flight.and_then(|w| w.batch) {
            batches.entry((batch, k.partition)).or_default().push((name, applied));
        }
    }
    for ((batch, partition), ops) in batches {
        let not_applied = ops.iter().filter(|o| o.1 == Applied::No).count();
        if not_applied != 0 && not_applied != ops.len() {
            failures.push(Failure::TornBatch { batch, partition, keys: ops });
        }
    }
    (judged, failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(sent: u64, answered: Option<u64>, state: &str) -> Write {
        let tag = Some(format!("tag-{state}"));
        Write { sent, answered, settled: None, state: Some(state.as_bytes().to_vec()), tag, batch: None }
    }

    fn key(writes: Vec<Write>) -> Vec<KeyHistory> {
        vec![KeyHistory { key: b"k".to_vec(), partition: 0, writes }]
    }

    fn failures(keys: &[KeyHistory], t: u64, found: &str) -> Vec<Failure> {
        judge(keys, t, true, |_| Some((found.as_bytes().to_vec(), format!("tag-{found}")))).1
    }

    /// The state of the last acknowledged write under another tag is a finding.
    #[test]
    fn a_state_found_under_another_tag_is_a_finding() {
        let keys = key(vec![write(0, Some(10), "a")]);
        let found = |tag: &'static str| move |_: &[u8]| Some((b"a".to_vec(), tag.to_owned()));
        assert!(judge(&keys, 20, true, found("tag-a")).1.is_empty());
        assert!(matches!(judge(&keys, 20, true, found("tag-x")).1[..], [Failure::TagChanged { .. }]));
        assert!(judge(&keys, 20, false, found("tag-x")).1.is_empty(), "not asked for");
    }

    /// A write a kill left unanswered (sent at 20) is in flight until the read after the
    /// restart (at 50) settles it; found applied, it must be there from then on.
    #[test]
    fn a_write_settled_applied_holds_from_the_read_on() {
        let mut unanswered = write(20, None, "b");
        unanswered.settled = Some((50, true));
        let keys = key(vec![write(0, Some(10), "a"), unanswered]);
        for t in [21, 30, 50] {
            assert!(failures(&keys, t, "a").is_empty(), "in flight at {t}: not applied is fine");
            assert!(failures(&keys, t, "b").is_empty(), "in flight at {t}: applied is fine");
        }
        assert!(matches!(failures(&keys, 51, "a")[..], [Failure::Lost { .. }]), "after the read: it must hold");
        assert!(failures(&keys, 51, "b").is_empty());
    }

    /// Found not applied by the read after the restart, it may never show up again.
    #[test]
    fn a_write_settled_unapplied_may_not_come_back() {
        let mut unanswered = write(20, None, "b");
        unanswered.settled = Some((50, false));
        let keys = key(vec![write(0, Some(10), "a"), unanswered, write(60, Some(70), "c")]);
        assert!(failures(&keys, 30, "b").is_empty(), "in flight before the read");
        assert!(failures(&keys, 55, "a").is_empty());
        assert!(matches!(failures(&keys, 55, "b")[..], [Failure::Revived { .. }]));
        assert!(matches!(failures(&keys, 80, "b")[..], [Failure::Revived { .. }]));
        assert!(matches!(failures(&keys, 80, "a")[..], [Failure::Lost { .. }]));
        assert!(failures(&keys, 65, "c").is_empty(), "a later write in flight");
    }
}
