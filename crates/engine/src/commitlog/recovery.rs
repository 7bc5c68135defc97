//! What opening a directory finds of its commit log ([`Recovery::read`]): each partition's
//! logged transactions to replay, the base file, where a new log starts; and, once the
//! partitions replayed what they lacked, making that durable and letting the old log go
//! ([`finish_recovery`]).

use std::{collections::HashSet, fs::File, path::PathBuf};

use super::{
    base::{self, Durable},
    format::{self, LoggedTx, Record, SegmentHeader, HEADER},
    segment::{remove, retire},
};
use crate::{
    layout::{self, Layout},
    Error, Result,
};

/// What opening a directory finds of its log: the transactions to replay and where a new log
/// starts.
#[derive(Debug)]
pub struct Recovery {
    /// How far each partition was durable at the last trim, if the directory has a base file
    /// (then the log, not the WAL check, judges what a missing WAL lost).
    pub base: Option<Vec<Durable>>,
    /// Per partition, its logged transactions in LSN order, cancelled ones left out.
    pub txs: Vec<Vec<LoggedTx>>,
    /// The LSN just past the last record read (where a new log may start, at the earliest).
    pub end: u64,
    /// The sequence number a new segment gets.
    pub next_seq: u64,
    /// Every segment file found, to be removed once the replay is durable.
    segments: Vec<PathBuf>,
    /// The data directory, opened before anything is replayed (see [`CommitLog`]'s `dir`).
    pub(super) dir: File,
}

impl Recovery {
    /// Reads the base file and every segment of `layout` (a directory of `partitions`).
    /// Records are read in LSN order until the first one that is not whole and valid; a segment
    /// that does not start where the one before it ends starts after a torn flush, and nothing
    /// from it on was ever durable.
    pub fn read(layout: &Layout, partitions: u32) -> Result<Self> {
        let dir = File::open(layout.dir()).map_err(|e| Error::io(layout.dir(), &e))?;
        let base = base::read(&layout.log_base(), partitions)?;
        let applied = base.iter().flat_map(|b| &b.durable).map(|d| d.applied).max().unwrap_or(0);
        let segments = layout.log_segments()?;
        let mut recovery = Self {
            dir,
            txs: vec![Vec::new(); partitions as usize],
            end: base.as_ref().map_or(0, |b| b.end).max(applied),
            next_seq: segments.last().map_or(1, |(seq, _)| seq + 1),
            segments: segments.iter().map(|(_, path)| path.clone()).collect(),
            base: base.map(|b| b.durable),
        };
        let mut records = Vec::new();
        let mut expected: Option<u64> = None;
        for (seq, path) in &segments {
            let bytes = std::fs::read(path).map_err(|e| Error::io(path, &e))?;
            let header = SegmentHeader::decode(&bytes, path)?;
            if header.seq != *seq {
                return Err(Error::Corrupt { path: path.clone(), what: format!("header says segment {}", header.seq) });
            }
            if expected.is_some_and(|end| end != header.base) {
                tracing::warn!(
                    path = %path.display(),
                    "a commit log segment after a torn flush: nothing in it was durable"
                );
                break;
            }
            let data = bytes.get(HEADER as usize..).unwrap_or_default();
            let (read, end) = format::read_records(data, header.base);
            records.extend(read);
            expected = Some(end);
            recovery.end = recovery.end.max(end);
        }
        recovery.sort(records, partitions)?;
        Ok(recovery)
    }

    fn sort(&mut self, records: Vec<Record>, partitions: u32) -> Result<()> {
        let cancelled: HashSet<(u32, u64)> = records
            .iter()
            .filter_map(|r| match r {
                Record::Cancel { partition, lsn } => Some((*partition, *lsn)),
                Record::Tx(_) => None,
            })
            .collect();
        for record in records {
            let Record::Tx(tx) = record else { continue };
            if cancelled.contains(&(tx.partition, tx.lsn)) {
                continue;
            }
            let Some(list) = self.txs.get_mut(tx.partition as usize) else {
                return Err(Error::Config(format!(
                    "the commit log holds a transaction of partition {} but the directory has {partitions}",
                    tx.partition
                )));
            };
            list.push(tx);
        }
        Ok(())
    }

    /// Whether there is anything of a log at all.
    pub fn found_log(&self) -> bool {
        self.base.is_some() || !self.segments.is_empty()
    }
}

/// After every partition replayed what it lacked: makes it durable (`syncfs`), removes the old
/// segments, and records `durable` and `start` (where the new log begins) in the base file if a
/// log will run (`keep_base`), or removes the base file if none will (then the WAL check judges
/// missing WALs again).
pub fn finish_recovery(
    layout: &Layout,
    recovery: &Recovery,
    durable: &[Durable],
    start: u64,
    keep_base: bool,
) -> Result<()> {
    if !keep_base {
        remove(&layout.log_spare())?;
    }
    if !recovery.found_log() && !keep_base {
        return Ok(());
    }
    layout::sync_filesystem(&recovery.dir, layout.dir())?;
    if keep_base {
        base::write(&layout.log_base(), start, durable)?;
    }
    for path in &recovery.segments {
        match keep_base {
            true => retire(layout, path)?,
            false => remove(path)?,
        }
    }
    if !keep_base {
        remove(&layout.log_base())?;
    }
    layout::sync_dir(&layout.log_base()).map_err(|e| Error::io(layout.dir(), &e))
}
