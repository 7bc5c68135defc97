//! A partition moving between nodes through the open store (docs/cluster.md, "Moving a
//! partition"). On the old owner, [`Store::send_partition`] writes it as transfer streams
//! ([`crate::transfer`]): once [`Store::begin_departure`] has claimed it for one move, first
//! the copy, from one read transaction, while writes go on (the writer notes the ids they
//! change from just before it: [`Departure`]); then, round after
//! round, the records of the ids changed since the previous stream. Once the map names the new
//! owner, [`Store::drop_partition`] empties the stale copy. [`send_database`] writes the copy of
//! a partition's database file outside any store (one restored from its Litestream replica for a
//! failover). On the new owner an [`Adoption`] takes each stream in through the partition's
//! writer ([`Adopt`]).
//!
//! [`Departure`]: crate::partition::departure::Departure

use std::{collections::BTreeSet, path::Path};

use rusqlite::Connection;

use super::Store;
use crate::{
    partition::{sql, writer::Adopt, writer::Job},
    transfer::{Decoder, Encoder, Moved, Received},
    Config, Error, Result,
};

/// Bytes of records an adoption inserts per transaction.
const ADOPT_BATCH: usize = 4 << 20;

/// Which stream of a move: the whole partition, or what changed since the last stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MovePart {
    /// Every record, from one snapshot; the writer notes changes from just before it.
    Copy,
    /// The records of the ids changed since the previous stream (deletions included).
    Changes,
}

impl Store {
    /// Writes `part` of partition `partition` as a transfer stream, from one read transaction,
    /// handing `send` pieces of about `piece` bytes.
    pub fn send_partition(
        &self,
        partition: u32,
        part: MovePart,
        piece: usize,
        send: impl FnMut(Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        let handle = self.partition(partition)?;
        let changed = match part {
            MovePart::Copy => {
                // The notes start over just before the snapshot: a commit the copy misses is
                // noted.
                self.shared.control(partition, |reply| Job::Track { partition, reply })??;
                None
            }
            MovePart::Changes => Some(handle.departure.take().ok_or_else(|| {
                Error::Move(format!("partition {partition} is not being copied: its copy must be asked for first"))
            })?),
        };
        // A round of changes reads few records: it need not wait for the WAL to start over
        // (the last round runs under the freeze).
        let _reading = changed.is_none().then(|| handle.long_read());
        send_snapshot(&handle.readers.open_own()?, changed, handle.epoch(), piece, send)
    }

    /// Whether a move is copying `partition` away (the ids its commits change are noted).
    pub fn moving_away(&self, partition: u32) -> Result<bool> {
        Ok(self.partition(partition)?.departure.tracking())
    }

    /// A move of `partition` away begins: the ids its commits change are noted from now on.
    /// Refused while another move of it is under way (two at once would share one set of
    /// notes, and each take the other's changes).
    pub fn begin_departure(&self, partition: u32) -> Result<()> {
        match self.partition(partition)?.departure.start() {
            true => Ok(()),
            false => Err(Error::Move(format!("a move of partition {partition} away from this node is under way"))),
        }
    }

    /// The map is about to name another owner of `partition`: stop noting its changes, and
    /// refuse to take it back in until [`Store::drop_partition`] or [`Store::keep_partition`].
    pub fn leave_partition(&self, partition: u32) -> Result<()> {
        self.partition(partition)?.departure.leave();
        Ok(())
    }

    /// The move of `partition` away failed: it stays here as it is, noting nothing.
    pub fn keep_partition(&self, partition: u32) -> Result<()> {
        self.partition(partition)?.departure.stay();
        Ok(())
    }

    /// `partition` has another owner now: empties the stale copy here. The records it held.
    pub fn drop_partition(&self, partition: u32) -> Result<u64> {
        let handle = self.partition(partition)?;
        let records = handle.counters.records.load(std::sync::atomic::Ordering::Relaxed);
        let emptied = self.adopt_step(partition, Adopt::Empty);
        handle.departure.stay();
        emptied.map(|()| records)
    }

    /// Starts taking `part` of partition `partition` in from another node: for the copy,
    /// empties it first.
    pub fn adopt(&self, partition: u32, part: MovePart) -> Result<Adoption> {
        if self.partition(partition)?.departure.leaving() {
            return Err(Error::Move(format!(
                "partition {partition} was just given away from this node and is being emptied: move it back later"
            )));
        }
        if part == MovePart::Copy {
            self.adopt_step(partition, Adopt::Empty)?;
        }
        Ok(Adoption { partition, part, decoder: Decoder::default(), pending: Vec::new(), pending_bytes: 0 })
    }

    fn adopt_step(&self, partition: u32, step: Adopt) -> Result<()> {
        self.partition(partition)?;
        self.shared.control(partition, |reply| Job::Adopt { partition, step, reply })?
    }
}

/// Writes the partition database at `path`, which no store has open, as the copy of a transfer
/// stream, as [`Store::send_partition`] does for an open partition. Such a copy (a restored
/// replica) may lack states its owner showed: it carries no epoch, so its new owner gives it a
/// new one.
pub fn send_database(path: &Path, piece: usize, send: impl FnMut(Vec<u8>) -> Result<()>) -> Result<()> {
    send_snapshot(&sql::open_reader(path, &Config::inspection())?, None, 0, piece, send)
}

/// One read transaction on `conn` as a transfer stream of versions at `epoch`, in pieces of
/// about `piece` bytes: every record, or (`changed`) the records of those ids, a deletion for
/// each id no longer there.
fn send_snapshot(
    conn: &Connection,
    changed: Option<BTreeSet<u32>>,
    epoch: u64,
    piece: usize,
    send: impl FnMut(Vec<u8>) -> Result<()>,
) -> Result<()> {
    let (next_id, live) = sql::begin_snapshot(conn)?;
    stream_snapshot(conn, (next_id, live), changed, epoch, piece, send)
}

/// The read transaction under way on `conn` (the partition at `next_id` and `live` records) as
/// [`send_snapshot`] streams it.
pub(super) fn stream_snapshot(
    conn: &Connection,
    (next_id, live): (u64, u64),
    changed: Option<BTreeSet<u32>>,
    epoch: u64,
    piece: usize,
    mut send: impl FnMut(Vec<u8>) -> Result<()>,
) -> Result<()> {
    let (mut out, mut encoder) = (Vec::with_capacity(piece + 4096), Encoder::default());
    encoder.start(&mut out, next_id, live, epoch);
    let mut pass = |out: &mut Vec<u8>| match out.len() >= piece {
        true => send(std::mem::replace(out, Vec::with_capacity(piece + 4096))),
        false => Ok(()),
    };
    match changed {
        None => sql::scan_records(conn, 0, u64::MAX, true, |id, key, counter, value| {
            encoder.record(&mut out, id, counter, key, value);
            pass(&mut out)
        })?,
        Some(ids) => {
            for id in ids {
                match sql::row_by_id(conn, id)? {
                    Some(row) => encoder.record(&mut out, id, row.counter, &row.key, &row.value),
                    None => encoder.deleted(&mut out, id),
                }
                pass(&mut out)?;
            }
        }
    }
    encoder.end(&mut out);
    send(out)
}

/// A stream of a partition being taken in: feed it with [`Adoption::push`], then
/// [`Adoption::finish`]; on any failure [`Adoption::abandon`] empties the partition again.
#[derive(Debug)]
pub struct Adoption {
    partition: u32,
    part: MovePart,
    decoder: Decoder,
    /// Records received and not yet inserted.
    pending: Vec<Moved>,
    pending_bytes: usize,
}

impl Adoption {
    /// Takes the next piece of the stream.
    pub fn push(&mut self, store: &Store, piece: &[u8]) -> Result<()> {
        for record in self.decoder.push(piece)? {
            self.pending_bytes += record.key.len() + record.value.len();
            self.pending.push(record);
        }
        match self.pending_bytes >= ADOPT_BATCH {
            true => self.insert(store),
            false => Ok(()),
        }
    }

    fn insert(&mut self, store: &Store) -> Result<()> {
        self.pending_bytes = 0;
        let records = std::mem::take(&mut self.pending);
        let step = match self.part {
            MovePart::Copy => Adopt::Records(records),
            MovePart::Changes => Adopt::Changes(records),
        };
        store.adopt_step(self.partition, step)
    }

    /// The stream is over: checks it whole, takes in the rest, notes the partition's `next_id`
    /// and count durably and, after the copy, rebuilds its index. What the stream said.
    pub fn finish(mut self, store: &Store) -> Result<Received> {
        let decoder = std::mem::take(&mut self.decoder);
        let received = decoder.finish()?;
        self.insert(store)?;
        let (next_id, records, rebuild) = (received.next_id, received.live, self.part == MovePart::Copy);
        let epoch = received.epoch;
        store.adopt_step(self.partition, Adopt::Finish { next_id, records, rebuild, epoch })?;
        Ok(received)
    }

    /// Empties the partition again after a failed adoption.
    pub fn abandon(store: &Store, partition: u32) -> Result<()> {
        store.adopt_step(partition, Adopt::Empty)
    }
}
