//! `check` for one partition: SQLite's own `quick_check`, the stored record count, and full
//! agreement of the compact index with the data, both ways.
//!
//! Runs on the partition's writer thread, so nothing commits while it looks. Every record
//! must have its entry (in the file if its id is at or below the watermark, in the recent part
//! otherwise); every entry must belong to a record, unless its id is tombstoned (a delete the
//! next merge will drop). Entries are compared as sorted vectors, so the pass is sequential.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use rusqlite::Connection;

use super::{sql, Partition};
use crate::{config::IndexMode, index::entry, KeyHasher, Result};

/// What `check` found in one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionCheck {
    /// The partition.
    pub partition: u32,
    /// SQLite's verdict: `"ok"` or its findings.
    pub sqlite: String,
    /// Records found by scanning.
    pub records: u64,
    /// Records according to the partition's `meta` table (with the inserts since its last note).
    pub counted_records: u64,
    /// Entries in the index file.
    pub index_file_entries: u64,
    /// Entries in the recent part (RAM).
    pub index_recent_entries: u64,
    /// Records with no index entry.
    pub missing_entries: u64,
    /// Index entries with no record and no tombstone.
    pub extra_entries: u64,
    /// Entries of deleted records awaiting the next merge (harmless).
    pub stale_entries: u64,
    /// A few examples of what is wrong.
    pub problems: Vec<String>,
}

impl PartitionCheck {
    /// Whether the partition passed.
    pub fn is_ok(&self) -> bool {
        self.sqlite == "ok"
            && self.records == self.counted_records
            && self.missing_entries == 0
            && self.extra_entries == 0
    }
}

const EXAMPLES: usize = 10;

/// Checks partition `part` through its writer's connection `conn`.
pub fn run(part: &Partition, conn: &Connection, hasher: KeyHasher) -> Result<PartitionCheck> {
    let mut report = PartitionCheck { partition: part.id, sqlite: sql::quick_check(conn)?, ..Default::default() };
    if part.mode == IndexMode::Sqlite {
        let full = sql::integrity_check_table(conn, "records")?;
        if full != "ok" {
            report.sqlite = full;
        }
    }
    report.counted_records = sql::read_meta(conn)?.1;
    let mut rows = Vec::new();
    sql::scan_keys(conn, 0, |id, key| rows.push(entry(hasher.locate(key).fingerprint, id)))?;
    report.records = rows.len() as u64;
    if report.records != report.counted_records {
        report
            .problems
            .push(format!("meta counts {} records, the table holds {}", report.counted_records, report.records));
    }
    let Some(index) = &part.index else { return Ok(report) };
    let (file, recent, watermark) = index.snapshot()?;
    report.index_file_entries = file.len() as u64;
    report.index_recent_entries = recent.len() as u64;
    let tombstones: HashSet<u32> = sql::tombstones(conn)?.0.into_iter().collect();
    let (mut in_file, mut in_recent): (Vec<u64>, Vec<u64>) =
        rows.into_iter().partition(|e| u64::from(*e as u32) <= watermark);
    in_file.sort_unstable();
    in_recent.sort_unstable();
    for (expected, actual, part_name) in [(&in_file, &file, "file"), (&in_recent, &recent, "recent part")] {
        let (missing, extra) = sorted_difference(expected, actual);
        for e in missing {
            report.missing_entries += 1;
            if report.problems.len() < EXAMPLES {
                report.problems.push(format!("record id {} has no entry in the index {part_name}", e as u32));
            }
        }
        for e in extra {
            if tombstones.contains(&(e as u32)) {
                report.stale_entries += 1;
            } else {
                report.extra_entries += 1;
                if report.problems.len() < EXAMPLES {
                    report.problems.push(format!("index {part_name} entry {e:#018x} has no record"));
                }
            }
        }
    }
    Ok(report)
}

/// Items only in `a` and items only in `b`, for two ascending slices.
fn sorted_difference(a: &[u64], b: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let (mut only_a, mut only_b) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x < y => {
                only_a.push(*x);
                i += 1;
            }
            (Some(_), Some(y)) | (None, Some(y)) => {
                only_b.push(*y);
                j += 1;
            }
            (Some(x), None) => {
                only_a.push(*x);
                i += 1;
            }
            (None, None) => unreachable!("loop condition"),
        }
    }
    (only_a, only_b)
}

#[cfg(test)]
mod tests {
    use super::sorted_difference;

    #[test]
    fn difference_of_sorted_slices() {
        assert_eq!(sorted_difference(&[1, 2, 4, 7], &[2, 3, 4, 8]), (vec![1, 7], vec![3, 8]));
        assert_eq!(sorted_difference(&[], &[5]), (vec![], vec![5]));
    }
}
