//! A partition moving between nodes through the open store (docs/cluster.md, "Moving a
//! partition"): [`Store::send_partition`] writes it as a transfer stream ([`crate::transfer`])
//! on the old owner, [`send_database`] writes one from a partition's database file outside any
//! store (a partition restored from its Litestream replica for a failover), an [`Adoption`]
//! takes one in on the new owner through the partition's writer ([`Adopt`]).

use std::path::Path;

use rusqlite::Connection;

use super::Store;
use crate::{
    partition::{sql, writer::Adopt, writer::Job},
    transfer::{Decoder, Encoder, Moved},
    Config, Result,
};

/// Bytes of records an adoption inserts per transaction.
const ADOPT_BATCH: usize = 4 << 20;

impl Store {
    /// Writes partition `partition` as a transfer stream, from one read transaction (the
    /// records and `next_id` of one moment), handing `send` pieces of about `piece` bytes.
    pub fn send_partition(&self, partition: u32, piece: usize, send: impl FnMut(Vec<u8>) -> Result<()>) -> Result<()> {
        let part = self.partition(partition)?;
        let _reading = part.long_read();
        send_snapshot(&part.readers.open_own()?, piece, send)
    }

    /// Starts taking partition `partition` in from another node: empties it first.
    pub fn adopt(&self, partition: u32) -> Result<Adoption> {
        self.adopt_step(partition, Adopt::Empty)?;
        Ok(Adoption { partition, decoder: Decoder::default(), pending: Vec::new(), pending_bytes: 0 })
    }

    fn adopt_step(&self, partition: u32, step: Adopt) -> Result<()> {
        self.partition(partition)?;
        self.shared.control(partition, |reply| Job::Adopt { partition, step, reply })?
    }
}

/// Writes the partition database at `path`, which no store has open, as a transfer stream, as
/// [`Store::send_partition`] does for an open partition.
pub fn send_database(path: &Path, piece: usize, send: impl FnMut(Vec<u8>) -> Result<()>) -> Result<()> {
    send_snapshot(&sql::open_reader(path, &Config::inspection())?, piece, send)
}

/// The records and `next_id` of one read transaction on `conn` as a transfer stream, in pieces
/// of about `piece` bytes.
fn send_snapshot(conn: &Connection, piece: usize, mut send: impl FnMut(Vec<u8>) -> Result<()>) -> Result<()> {
    let (next_id, _) = sql::begin_snapshot(conn)?;
    let (mut out, mut encoder) = (Vec::with_capacity(piece + 4096), Encoder::default());
    encoder.start(&mut out, next_id);
    sql::scan_records(conn, 0, u64::MAX, true, |id, key, counter, value| {
        encoder.record(&mut out, id, counter, key, value);
        match out.len() >= piece {
            true => send(std::mem::replace(&mut out, Vec::with_capacity(piece + 4096))),
            false => Ok(()),
        }
    })?;
    encoder.end(&mut out);
    send(out)
}

/// A partition being taken in: feed it the transfer stream with [`Adoption::push`], then
/// [`Adoption::finish`]; on any failure [`Adoption::abandon`] empties the partition again.
#[derive(Debug)]
pub struct Adoption {
    partition: u32,
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
        store.adopt_step(self.partition, Adopt::Records(records))
    }

    /// The stream is over: checks it whole, inserts the rest, notes the partition's `next_id`
    /// and count durably and rebuilds its index. Returns the records taken in.
    pub fn finish(mut self, store: &Store) -> Result<u64> {
        let decoder = std::mem::take(&mut self.decoder);
        let (next_id, records) = decoder.finish()?;
        self.insert(store)?;
        store.adopt_step(self.partition, Adopt::Finish { next_id, records })?;
        Ok(records)
    }

    /// Empties the partition again after a failed adoption.
    pub fn abandon(store: &Store, partition: u32) -> Result<()> {
        store.adopt_step(partition, Adopt::Empty)
    }
}
