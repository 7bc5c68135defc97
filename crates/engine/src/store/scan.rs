//! Reading a partition's records in id order, a page at a time or all of them, each page from
//! one read transaction (a consistent snapshot that never holds the writer up): the key listing
//! of the HTTP server, `shardlite export` and `GET /export`. The writes the partition's writer
//! answered but holds uncommitted are committed first (`crate::partition::held`).

use super::Store;
use crate::{partition::sql, Error, Result, Version};

/// A record as a scan sees it.
#[derive(Debug)]
pub struct Scanned<'a> {
    /// Its version (the entity tag of the HTTP API).
    pub version: Version,
    /// The key.
    pub key: &'a [u8],
    /// The value (empty when the scan asked for keys only).
    pub value: &'a [u8],
}

impl Store {
    /// Calls `f` with each record of partition `partition` whose id is above `after`, in id
    /// order, at most `limit` of them, all from one read transaction; with their values if
    /// `values`. Ids never change and are never reused, so `after` = the last id seen pages
    /// through a partition in a stable order.
    pub fn scan(
        &self,
        partition: u32,
        after: u64,
        limit: u64,
        values: bool,
        mut f: impl FnMut(Scanned<'_>) -> Result<()>,
    ) -> Result<()> {
        let part = self.partition(partition)?;
        self.shared.settle(part)?;
        part.readers.with(|conn| {
            sql::scan_records(conn, after, limit, values, |id, key, counter, value| {
                f(Scanned { version: part.version(id, counter), key, value })
            })
        })
    }

    /// Calls `f` with every record of partition `partition`, values included, in id order,
    /// all from one read transaction on a connection of the scan's own: a long export keeps
    /// no pooled reader from lookups. Writers never wait for it; checkpoints cannot restart
    /// the partition's WAL until it ends, so the WAL grows meanwhile, and a new one waits for
    /// the WAL to start over first if it grew past its bound ([`crate::partition::Partition::long_read`]).
    pub fn snapshot(&self, partition: u32, mut f: impl FnMut(Scanned<'_>) -> Result<()>) -> Result<()> {
        let part = self.partition(partition)?;
        self.shared.settle(part)?;
        let _reading = part.long_read();
        let conn = part.readers.open_own()?;
        sql::scan_records(&conn, 0, u64::MAX, true, |id, key, counter, value| {
            f(Scanned { version: part.version(id, counter), key, value })
        })
    }

    pub(super) fn partition(&self, partition: u32) -> Result<&crate::partition::Partition> {
        self.shared
            .partitions
            .get(partition as usize)
            .map(|p| &**p)
            .ok_or_else(|| Error::Config(format!("partition {partition} does not exist")))
    }
}
