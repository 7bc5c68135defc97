//! A partition leaving this node (docs/cluster.md, "Moving a partition"): claimed by one move
//! at a time; while it copies the partition to its new owner, the writer notes the id of every
//! record each commit inserts, updates or deletes, so that each round of catching up sends only
//! what changed since the last one (deletes included: an id noted and no longer found is sent as
//! deleted). Once the map names the new owner the partition is `Leaving` until its stale copy
//! here is emptied, and no move may bring it back here meanwhile.
//!
//! Ids, not commit-log records: a partition's ids are never reused and a key keeps its id for
//! its whole life, so "the record of id X as it is now" (or its absence) is the whole change of
//! X, however many commits touched it; a set of ids stays as small as the records changed, works
//! without the commit log (`synchronous` other than `full`), and costs one push per operation
//! only while a move is under way.

use std::{collections::BTreeSet, sync::Mutex};

/// Where a partition is in leaving this node.
#[derive(Debug, Default)]
enum State {
    /// Not moving away.
    #[default]
    Staying,
    /// Being copied: the ids changed since the last round.
    Tracking(BTreeSet<u32>),
    /// Given away; its records here are about to be emptied.
    Leaving,
}

/// A partition's state of leaving, shared by its writer (which notes changes) and the move.
#[derive(Debug, Default)]
pub struct Departure(Mutex<State>);

impl Departure {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A move of the partition away begins: noting starts, unless another move is under way
    /// (then `false`, and nothing changes).
    pub fn start(&self) -> bool {
        let mut state = self.state();
        match *state {
            State::Staying => {
                *state = State::Tracking(BTreeSet::new());
                true
            }
            _ => false,
        }
    }

    /// The copy starts: the ids noted so far are dropped, as the copy holds their records.
    /// Called on the writer thread, between two rounds, just before the copy's snapshot, so
    /// that no commit under way escapes both the copy and the notes.
    pub fn track(&self) {
        if let State::Tracking(set) = &mut *self.state() {
            set.clear();
        }
    }

    /// Whether commits must note the ids they change.
    pub fn tracking(&self) -> bool {
        matches!(*self.state(), State::Tracking(_))
    }

    /// Notes the ids a commit changed (once it committed), if changes are being noted.
    pub fn note(&self, ids: &[u32]) {
        if let State::Tracking(set) = &mut *self.state() {
            set.extend(ids);
        }
    }

    /// The ids changed since the last call (or since [`Departure::track`]); noting goes on.
    /// `None`: changes are not being noted (no copy was taken, or the move ended).
    pub fn take(&self) -> Option<BTreeSet<u32>> {
        match &mut *self.state() {
            State::Tracking(set) => Some(std::mem::take(set)),
            _ => None,
        }
    }

    /// The partition is given away (just before the map changes): noting stops.
    pub fn leave(&self) {
        *self.state() = State::Leaving;
    }

    /// The move ended (failed, or the stale copy is emptied): back to an ordinary partition.
    pub fn stay(&self) {
        *self.state() = State::Staying;
    }

    /// Whether the partition is given away and not yet emptied.
    pub fn leaving(&self) -> bool {
        matches!(*self.state(), State::Leaving)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_noted_only_while_tracking_and_each_round_takes_them_once() {
        let departure = Departure::default();
        departure.note(&[1]);
        departure.track();
        assert_eq!(departure.take(), None);
        assert!(departure.start() && !departure.start(), "one move at a time");
        departure.note(&[7]);
        departure.track();
        departure.note(&[3, 1]);
        departure.note(&[3]);
        assert_eq!(departure.take(), Some(BTreeSet::from([1, 3])));
        assert_eq!(departure.take(), Some(BTreeSet::new()));
        departure.leave();
        departure.note(&[4]);
        assert!(departure.leaving() && !departure.tracking());
        assert_eq!(departure.take(), None);
        departure.stay();
        assert!(!departure.leaving());
    }
}
