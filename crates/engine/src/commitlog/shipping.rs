//! Replication's seam in the commit log: each flush's records, once durable here, are handed in
//! log order to a [`Replicate`] (the cluster's replicator), which sends them to the other copies
//! and reports with [`Shipment::done`] whether enough of them made the records durable. Writers
//! wait for that report ([`super::CommitLog::wait_durable`]), not only for the local flush.
//!
//! A shipment refused (too few copies acknowledged it in time) leaves its range refused: each
//! transaction in it is cancelled in the log (replay must not apply it here), and its writers are
//! answered [`Error::Unreplicated`]. The copies learn which ranges were refused from the
//! replicator, so they never apply them either.

use std::{collections::VecDeque, sync::Weak};

use super::{format, CommitLog};
use crate::{Error, Result};

/// Refused ranges remembered for the writers still to look at them.
const REFUSED_KEPT: usize = 1024;

/// Where each flush's records go once they are durable here: called in log order, once per
/// flush, from the thread that ran it. It must not block, and must call [`Shipment::done`]
/// exactly once per shipment, in the order it was given them, from another thread (a refused
/// shipment's `done` waits for a flush, which waits for the `ship` under way).
pub trait Replicate: Send + Sync + std::fmt::Debug {
    /// Sends `shipment` to the copies.
    fn ship(&self, shipment: Shipment);
}

/// One flush's records: the log's bytes from `from` to `to`, whole records back to back.
#[derive(Debug)]
pub struct Shipment {
    /// The LSN of the first byte.
    pub from: u64,
    /// The LSN just past the last byte.
    pub to: u64,
    /// The records, as the log holds them.
    pub records: Vec<u8>,
    pub(super) log: Weak<CommitLog>,
}

impl Shipment {
    /// The transactions of the shipment, in log order.
    pub fn transactions(&self) -> impl Iterator<Item = Raw<'_>> {
        format::raw_records(&self.records, self.from).filter(|raw| raw.is_tx())
    }

    /// Reports how the shipment went: `Ok`, enough copies hold it durably; `Err(why)`, not
    /// (its writers are refused and its transactions cancelled here).
    pub fn done(self, result: std::result::Result<(), String>) {
        if let Some(log) = self.log.upgrade() {
            log.shipped(&self, result);
        }
    }
}

pub use format::Raw;

/// A range of the log whose shipment was refused, why, and where the records cancelling its
/// transactions end: its writers are answered once those are durable here, so that no replay
/// here applies a write its writer was told is rolled back.
#[derive(Debug, Clone)]
pub(super) struct Refused {
    from: u64,
    to: u64,
    why: String,
    cancels_end: u64,
}

/// The ranges refused lately, newest last.
#[derive(Debug, Default)]
pub(super) struct RefusedRanges(VecDeque<Refused>);

impl RefusedRanges {
    pub(super) fn push(&mut self, from: u64, to: u64, why: String, cancels_end: u64) {
        if self.0.len() == REFUSED_KEPT {
            self.0.pop_front();
        }
        self.0.push_back(Refused { from, to, why, cancels_end });
    }

    /// What a writer whose record ends at `end` (committed already) is answered, once the log
    /// is durable here up to `durable`; `None` while its cancel is not durable yet.
    pub(super) fn outcome(&self, end: u64, durable: u64) -> Option<Result<()>> {
        match self.0.iter().rev().find(|r| r.from < end && end <= r.to) {
            Some(refused) if refused.cancels_end <= durable => Some(Err(Error::Unreplicated(refused.why.clone()))),
            Some(_) => None,
            None => Some(Ok(())),
        }
    }
}
