//! An import's staged runs: the files its records wait in between staging and applying, the
//! layout of a staged record, and how a partition's share is cut into buckets.
//!
//! ```text
//!  staging:  record ──hash──> partition p, sub-run s ──> STAGING/pNNNN.run        (1 sub-run)
//!                                                        STAGING/pNNNN.sSSSS.run  (several)
//!  applying: p's sub-runs in order, grouped while they fit in a bucket ──> one bucket each
//!            a sub-run larger than a bucket alone ──split by key hash──> STAGING/pNNNN.bBBBB
//! ```
//!
//! Sub-runs are split by the key's hash, so every record of a key is in one sub-run, so in one
//! bucket, where its duplicates are resolved. The buckets depend only on the sub-runs' sizes and
//! the bucket size, which the plan records, so a resumed import cuts them as the interrupted one did.

use std::{
    fs::{self, File},
    io::{BufWriter, Read, Write},
    ops::Range,
    path::{Path, PathBuf},
};

use crate::{layout::Layout, Error, KeyHasher, Result};

/// Where a record came from: an input and a position in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// The input, as numbered by [`crate::import::Importer::add_source`].
    pub source: u32,
    /// The line (text formats) or byte offset (binary formats) of the record.
    pub position: u64,
}

impl Origin {
    /// Its place in the whole input: by input, then position.
    pub(crate) fn order(self) -> (u32, u64) {
        (self.source, self.position)
    }
}

/// Bytes before a staged record's key: key length u16, value length u32, counter u64 (0:
/// none), source u32, position u64; all little-endian.
pub(crate) const RUN_HEADER: usize = 2 + 4 + 8 + 4 + 8;

/// Sub-runs a staging aims at over all partitions: a directory of fewer partitions splits each
/// share into this many over its partitions (one partition: 256 sub-runs).
const STAGED_FILES: u32 = 256;

/// How an import's records are spread over run files: its partitions' hash and the sub-runs of
/// each partition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Runs {
    hasher: KeyHasher,
    subruns: u32,
}

impl Runs {
    /// The runs of a directory hashed by `hasher`, `subruns` to a partition.
    pub(crate) fn new(hasher: KeyHasher, subruns: u32) -> Self {
        Self { hasher, subruns: subruns.max(1) }
    }

    /// The sub-runs a new staging gives each of `partitions` partitions.
    pub(crate) fn subruns_for(partitions: u32) -> u32 {
        (STAGED_FILES / partitions).max(1)
    }

    /// The partition and sub-run of a key.
    pub(crate) fn locate(&self, key: &[u8]) -> (u32, u32) {
        let high = self.hasher.hash64(key) >> 32;
        let q = (high * u64::from(self.hasher.partitions()) * u64::from(self.subruns)) >> 32;
        ((q / u64::from(self.subruns)) as u32, (q % u64::from(self.subruns)) as u32)
    }

    /// Sub-runs to a partition.
    pub(crate) fn subruns(&self) -> u32 {
        self.subruns
    }

    /// The file of partition `p`'s sub-run `s`.
    pub(crate) fn path(&self, staging: &Path, p: u32, s: u32) -> PathBuf {
        match self.subruns {
            1 => Layout::import_run(staging, p),
            _ => Layout::import_subrun(staging, p, s),
        }
    }

    /// Bytes staged for partition `p`.
    pub(crate) fn share_bytes(&self, staging: &Path, p: u32) -> u64 {
        (0..self.subruns).map(|s| run_bytes(&self.path(staging, p, s))).sum()
    }

    /// Bytes of partition `p`'s largest sub-run.
    pub(crate) fn largest_subrun(&self, staging: &Path, p: u32) -> u64 {
        (0..self.subruns).map(|s| run_bytes(&self.path(staging, p, s))).max().unwrap_or(0)
    }

    /// Calls `f(b, buckets, records)` with the staged records of partition `p`'s buckets from
    /// `skip` on, in bucket order, each at most about `bucket` bytes. Nothing if the partition
    /// got no records.
    pub(crate) fn for_each_bucket(
        &self,
        staging: &Path,
        p: u32,
        bucket: u64,
        skip: u32,
        mut f: impl FnMut(u32, u32, Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        let sizes: Vec<u64> = (0..self.subruns).map(|s| run_bytes(&self.path(staging, p, s))).collect();
        let cut = cut(&sizes, bucket)?;
        let buckets = cut.len() as u32;
        for (b, part) in (0..buckets).zip(&cut) {
            match *part {
                Bucket::Runs(ref subruns) if b >= skip => {
                    let paths: Vec<_> = subruns.clone().map(|s| self.path(staging, p, s)).collect();
                    f(b, buckets, read_runs(&paths)?)?;
                }
                Bucket::Runs(_) => {}
                Bucket::Piece { subrun, piece, pieces } => {
                    let first = b - piece;
                    if piece == 0 && first + pieces > skip {
                        split_run(&self.path(staging, p, subrun), staging, p, &self.hasher, first..first + pieces)?;
                    }
                    let path = Layout::import_bucket(staging, p, b);
                    if b >= skip {
                        f(b, buckets, read_runs(std::slice::from_ref(&path))?)?;
                    }
                    remove_if_present(&path)?;
                }
            }
        }
        Ok(())
    }
}

/// A bucket of a share: sub-runs applied together, or a piece of a sub-run split in `pieces`.
#[derive(Debug, PartialEq, Eq)]
enum Bucket {
    Runs(Range<u32>),
    Piece { subrun: u32, piece: u32, pieces: u32 },
}

/// Cuts a share of sub-runs of `sizes` bytes into buckets of at most `bucket` bytes: sub-runs
/// in order, grouped while they fit; a larger one split in as many pieces as it needs.
fn cut(sizes: &[u64], bucket: u64) -> Result<Vec<Bucket>> {
    let mut buckets = Vec::new();
    let (mut start, mut bytes) = (0u32, 0u64);
    for (s, &size) in (0u32..).zip(sizes) {
        if bytes > 0 && (size > bucket || bytes + size > bucket) {
            buckets.push(Bucket::Runs(start..s));
            bytes = 0;
        }
        if bytes == 0 {
            start = s;
        }
        if size > bucket {
            let pieces =
                u32::try_from(size.div_ceil(bucket)).map_err(|_| Error::Import("a staged run is too large".into()))?;
            buckets.extend((0..pieces).map(|piece| Bucket::Piece { subrun: s, piece, pieces }));
            start = s + 1;
        } else {
            bytes += size;
        }
    }
    if bytes > 0 {
        buckets.push(Bucket::Runs(start..sizes.len() as u32));
    }
    Ok(buckets)
}

/// Splits a sub-run into the bucket files `buckets` by a hash of each record's key, in one
/// sequential pass.
fn split_run(run: &Path, staging: &Path, p: u32, hasher: &KeyHasher, buckets: Range<u32>) -> Result<()> {
    let mut input = std::io::BufReader::with_capacity(1 << 20, File::open(run).map_err(|e| Error::io(run, &e))?);
    let mut outputs = buckets
        .clone()
        .map(|b| {
            let path = Layout::import_bucket(staging, p, b);
            File::create(&path).map(|f| BufWriter::with_capacity(256 << 10, f)).map_err(|e| Error::io(&path, &e))
        })
        .collect::<Result<Vec<_>>>()?;
    let pieces = buckets.len() as u32;
    let mut header = [0u8; RUN_HEADER];
    let mut body = Vec::new();
    loop {
        match input.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(Error::io(run, &e)),
        }
        let klen = u16::from_le_bytes([header[0], header[1]]) as usize;
        let vlen = u32::from_le_bytes([header[2], header[3], header[4], header[5]]) as usize;
        body.resize(klen + vlen, 0);
        input.read_exact(&mut body).map_err(|e| Error::io(run, &e))?;
        let b = hasher.locate(&body[..klen]).fingerprint % pieces;
        let out = &mut outputs[b as usize];
        out.write_all(&header).and_then(|()| out.write_all(&body)).map_err(|e| Error::io(run, &e))?;
    }
    for out in &mut outputs {
        out.flush().map_err(|e| Error::io(run, &e))?;
    }
    Ok(())
}

/// A staged record, its key and value in its bucket's bytes.
pub(crate) struct RunRecord<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
    pub(crate) counter: Option<u64>,
    pub(crate) origin: Origin,
    /// Its offset in the bucket's bytes ([`record_at`] finds it again).
    pub(crate) at: usize,
}

/// Appends a staged record to `out`.
pub(crate) fn write_record(
    out: &mut impl Write,
    key: &[u8],
    value: &[u8],
    counter: Option<u64>,
    origin: Origin,
) -> std::io::Result<()> {
    let mut header = [0u8; RUN_HEADER];
    header[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    header[2..6].copy_from_slice(&(value.len() as u32).to_le_bytes());
    header[6..14].copy_from_slice(&counter.unwrap_or(0).to_le_bytes());
    header[14..18].copy_from_slice(&origin.source.to_le_bytes());
    header[18..26].copy_from_slice(&origin.position.to_le_bytes());
    out.write_all(&header).and_then(|()| out.write_all(key)).and_then(|()| out.write_all(value))
}

/// The staged record at offset `at` of `buf`, and the offset after it.
pub(crate) fn record_at(buf: &[u8], at: usize) -> Result<(RunRecord<'_>, usize)> {
    let truncated = || Error::Import("a staged run file is truncated".to_owned());
    let header = buf.get(at..at + RUN_HEADER).ok_or_else(truncated)?;
    let u32_at = |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
    let u64_at = |i: usize| u64::from(u32_at(i)) | u64::from(u32_at(i + 4)) << 32;
    let klen = u16::from_le_bytes([header[0], header[1]]) as usize;
    let vlen = u32_at(2) as usize;
    let counter = u64_at(6);
    let body = at + RUN_HEADER;
    let key_value = buf.get(body..body + klen + vlen).ok_or_else(truncated)?;
    let (key, value) = key_value.split_at(klen);
    let origin = Origin { source: u32_at(14), position: u64_at(18) };
    Ok((RunRecord { key, value, counter: (counter > 0).then_some(counter), origin, at }, body + klen + vlen))
}

/// The staged records of a bucket's bytes.
pub(crate) fn run_records(buf: &[u8]) -> impl Iterator<Item = Result<RunRecord<'_>>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= buf.len() {
            return None;
        }
        match record_at(buf, at) {
            Ok((record, next)) => {
                at = next;
                Some(Ok(record))
            }
            Err(e) => {
                at = buf.len();
                Some(Err(e))
            }
        }
    })
}

/// A run file's size (0 if the partition got no records).
fn run_bytes(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |m| m.len())
}

/// The bytes of run files one after another (a missing file: none).
fn read_runs(paths: &[PathBuf]) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(paths.iter().map(|p| run_bytes(p)).sum::<u64>() as usize);
    for path in paths {
        match File::open(path) {
            Ok(mut f) => f.read_to_end(&mut buf).map_err(|e| Error::io(path, &e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(Error::io(path, &e)),
        };
    }
    Ok(buf)
}

fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, &e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_cut_into_groups_of_subruns_and_pieces_of_large_ones() {
        let runs = |r: Range<u32>| Bucket::Runs(r);
        let piece = |subrun, piece, pieces| Bucket::Piece { subrun, piece, pieces };
        assert_eq!(cut(&[5], 10).unwrap(), vec![runs(0..1)]);
        assert_eq!(cut(&[25], 10).unwrap(), vec![piece(0, 0, 3), piece(0, 1, 3), piece(0, 2, 3)]);
        assert_eq!(cut(&[4, 4, 4, 0, 4], 10).unwrap(), vec![runs(0..2), runs(2..5)]);
        assert_eq!(cut(&[4, 15, 0, 3], 10).unwrap(), vec![runs(0..1), piece(1, 0, 2), piece(1, 1, 2), runs(3..4)]);
        assert_eq!(cut(&[0, 0], 10).unwrap(), vec![]);
    }

    #[test]
    fn a_subrun_is_within_the_partition_the_directory_hashes_the_key_to() {
        let hasher = KeyHasher::new(7, 3);
        let runs = Runs::new(hasher, 85);
        let mut seen = std::collections::HashSet::new();
        for i in 0..10_000u32 {
            let key = i.to_le_bytes();
            let (p, s) = runs.locate(&key);
            assert_eq!(p, hasher.locate(&key).partition);
            assert!(s < 85);
            seen.insert(s);
        }
        assert_eq!(seen.len(), 85, "keys spread over every sub-run");
    }
}
