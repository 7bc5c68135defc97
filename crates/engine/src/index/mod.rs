//! The compact hash index of one partition: fingerprint -> record ids.
//!
//! Three parts, newest last, all consulted by a lookup:
//! - `main`: the file `pNNNN.idx` ([`format`](mod@format)), covering every record id up to its watermark;
//! - `frozen`: recent entries being merged into a new file right now (or none);
//! - `active`: entries of records committed since, in RAM, sorted.
//!
//! Only the partition's writer thread changes `active` and freezes it, so nothing changes under a
//! transaction; merges run on the maintenance thread and never block the writer. Nothing in the
//! file is ever ahead of SQLite. Deleted records leave stale entries, harmless (a lookup compares
//! the full key) until the next merge drops them (`tombstones`). Index pages held in RAM within
//! the memory budget: [`resident`].

pub mod format;
pub mod resident;

use std::{
    collections::{BTreeSet, HashSet},
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock, RwLock},
};

pub use format::{entry, entry_fingerprint, entry_id, MainIndex};
pub use resident::IndexPages;

use crate::{Error, Result};

/// One partition's compact index.
#[derive(Debug)]
pub struct HashIndex {
    path: PathBuf,
    fingerprint_bits: u32,
    state: RwLock<State>,
    /// Held while a merge or rebuild writes a new file, so only one does at a time.
    maintenance: Mutex<()>,
    /// Where the file's pages are held in RAM, once the store has said ([`HashIndex::keep_in_ram`]).
    in_ram: OnceLock<Arc<IndexPages>>,
}

#[derive(Debug)]
struct State {
    main: Arc<MainIndex>,
    frozen: Option<Arc<BTreeSet<u64>>>,
    /// Every id up to this one is in `main` or `frozen` (when frozen is set).
    frozen_watermark: u64,
    active: BTreeSet<u64>,
    /// The highest id the writer has indexed.
    indexed_max: u64,
}

/// What a merge needs to know of the tombstones table.
#[derive(Debug, Default)]
pub struct Tombstones {
    /// Deleted record ids whose entries the merge drops.
    pub ids: HashSet<u32>,
    /// The highest tombstone sequence number read; rows up to it may be cleared after the merge.
    pub max_seq: i64,
}

/// Index sizes for statistics.
#[derive(Debug, Clone, Copy, Default)]
pub struct IndexSizes {
    /// Bytes of the index file.
    pub file_bytes: u64,
    /// Entries in the index file.
    pub file_entries: u64,
    /// Entries held in RAM (frozen + active).
    pub recent_entries: u64,
    /// The file's watermark.
    pub watermark: u64,
}

impl HashIndex {
    /// Opens the index file at `path`; `Err(Corrupt)` if it exists but is damaged. A missing
    /// file is an empty index covering nothing.
    pub fn open(path: &Path, fingerprint_bits: u32) -> Result<Self> {
        let main = if path.exists() { MainIndex::open(path)? } else { MainIndex::empty(path, fingerprint_bits) };
        if main.header().fingerprint_bits != fingerprint_bits && main.file_bytes() > 0 {
            return Err(Error::Corrupt {
                path: path.to_owned(),
                what: format!(
                    "built with {}-bit fingerprints, the manifest says {fingerprint_bits}",
                    main.header().fingerprint_bits
                ),
            });
        }
        Ok(Self::with_main(path, fingerprint_bits, main))
    }

    /// An index whose file is missing or damaged: covers nothing until rebuilt.
    pub fn empty(path: &Path, fingerprint_bits: u32) -> Self {
        Self::with_main(path, fingerprint_bits, MainIndex::empty(path, fingerprint_bits))
    }

    fn with_main(path: &Path, fingerprint_bits: u32, main: MainIndex) -> Self {
        let watermark = main.header().watermark;
        Self {
            path: path.to_owned(),
            fingerprint_bits,
            state: RwLock::new(State {
                main: Arc::new(main),
                frozen: None,
                frozen_watermark: 0,
                active: BTreeSet::new(),
                indexed_max: watermark,
            }),
            maintenance: Mutex::new(()),
            in_ram: OnceLock::new(),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The file's watermark: ids above it must come from SQLite into `active` at open.
    pub fn watermark(&self) -> u64 {
        self.read().main.header().watermark
    }

    /// Holds the file's pages in RAM, charged to `part`, from now on: this file's now (as many
    /// pages as the part has room for), and each file a merge or rebuild writes later.
    pub fn keep_in_ram(&self, part: Arc<IndexPages>) {
        let part = self.in_ram.get_or_init(|| part);
        self.file().keep_in_ram(part);
    }

    /// Bytes of the file's pages held in RAM.
    pub fn resident_bytes(&self) -> u64 {
        self.read().main.resident_bytes()
    }

    /// Swaps in the file just written at `path` (with `update` for the rest of the state) and
    /// holds its pages in RAM if the store asked for that, once the old file's are given back.
    fn swap_in(&self, update: impl FnOnce(&mut State)) -> Result<()> {
        let new_main = Arc::new(MainIndex::open(&self.path)?);
        let old = {
            let mut state = self.write();
            update(&mut state);
            std::mem::replace(&mut state.main, Arc::clone(&new_main))
        };
        // Lookups still holding the old file keep its pages until they finish.
        drop(old);
        if let Some(part) = self.in_ram.get() {
            new_main.keep_in_ram(part);
        }
        Ok(())
    }

    /// The index file as it is now; it stays readable if a merge replaces it meanwhile.
    pub fn file(&self) -> Arc<MainIndex> {
        Arc::clone(&self.read().main)
    }

    /// Fills `out` with every id whose entry has fingerprint `fp`, newest first, without
    /// duplicates.
    pub fn candidates(&self, fp: u32, out: &mut Vec<u32>) -> Result<()> {
        out.clear();
        let main = {
            let state = self.read();
            let range = format::fingerprint_range(fp);
            out.extend(state.active.range(range.clone()).rev().map(|e| entry_id(*e)));
            if let Some(frozen) = &state.frozen {
                out.extend(frozen.range(range).rev().map(|e| entry_id(*e)));
            }
            Arc::clone(&state.main)
        };
        main.lookup(fp, out)?;
        out.sort_unstable_by(|a, b| b.cmp(a));
        out.dedup();
        Ok(())
    }

    /// Starts reading, in the background, the file pages that lookups of `fingerprints` need.
    pub fn prefetch(&self, fingerprints: impl Iterator<Item = u32>) {
        let main = Arc::clone(&self.read().main);
        for fp in fingerprints {
            main.prefetch(fp);
        }
    }

    /// Ids at or below this are covered by the file or the frozen part: a delete of one of
    /// them needs a tombstone. Only meaningful on the writer thread.
    pub fn tombstone_floor(&self) -> u64 {
        let state = self.read();
        if state.frozen.is_some() {
            state.frozen_watermark
        } else {
            state.main.header().watermark
        }
    }

    /// Records a committed batch: new entries, entries of deleted ids above the floor, and the
    /// highest id assigned so far. Called by the writer after each commit.
    pub fn apply(&self, added: &[u64], removed: &[u64], max_id: u64) {
        let mut state = self.write();
        state.active.extend(added.iter().copied());
        for e in removed {
            state.active.remove(e);
        }
        state.indexed_max = state.indexed_max.max(max_id);
    }

    /// Freezes `active` for a merge if it holds at least `threshold` entries and no merge is
    /// under way. Called by the writer between batches. Returns whether it froze.
    pub fn freeze_if(&self, threshold: usize) -> bool {
        let mut state = self.write();
        if state.frozen.is_some() || state.active.len() < threshold.max(1) {
            return false;
        }
        let active = std::mem::take(&mut state.active);
        state.frozen = Some(Arc::new(active));
        state.frozen_watermark = state.indexed_max;
        true
    }

    /// Writes a new file from the file and the frozen entries, less the tombstoned ids, and
    /// swaps it in. `tombstones` is called once, after the merge has the lock.
    pub fn merge(&self, tombstones: impl FnOnce() -> Result<Tombstones>) -> Result<Option<Tombstones>> {
        let _guard = self.maintenance.lock().unwrap_or_else(|p| p.into_inner());
        let (main, frozen, watermark) = {
            let state = self.read();
            match &state.frozen {
                Some(frozen) => (Arc::clone(&state.main), Arc::clone(frozen), state.frozen_watermark),
                None => return Ok(None),
            }
        };
        let dead = tombstones()?;
        let expected = main.header().entries + frozen.len() as u64;
        let merged = merge_sorted(main.scan()?, frozen.iter().copied().map(Ok))
            .filter(|e| !matches!(e, Ok(e) if dead.ids.contains(&entry_id(*e))));
        format::write(&self.path, expected, watermark, self.fingerprint_bits, merged)?;
        drop(main);
        self.swap_in(|state| state.frozen = None)?;
        Ok(Some(dead))
    }

    /// Replaces the file with one built from `entries` (every live record, any order) and
    /// empties the recent part: the repair for a damaged file.
    /// Only the writer thread (or an offline caller) may rebuild, so no commit races it.
    pub fn rebuild(&self, mut entries: Vec<u64>, watermark: u64) -> Result<()> {
        let _guard = self.maintenance.lock().unwrap_or_else(|p| p.into_inner());
        entries.sort_unstable();
        entries.dedup();
        let count = entries.len() as u64;
        format::write(&self.path, count, watermark, self.fingerprint_bits, entries.into_iter().map(Ok))?;
        self.replace_everything(watermark)
    }

    /// Writes a new file from the file, the recent part and `new` (ascending, every id above
    /// the others) with `watermark`, and empties the recent part: the bulk loader's last step,
    /// one sequential pass. Offline only: no writer may be running.
    pub fn bulk_merge(&self, new: Vec<u64>, watermark: u64) -> Result<()> {
        let _guard = self.maintenance.lock().unwrap_or_else(|p| p.into_inner());
        let (main, recent) = {
            let state = self.read();
            let mut recent: Vec<u64> = state.active.iter().copied().collect();
            recent.extend(state.frozen.iter().flat_map(|f| f.iter().copied()));
            recent.sort_unstable();
            (Arc::clone(&state.main), recent)
        };
        let expected = main.header().entries + (recent.len() + new.len()) as u64;
        let merged = merge_sorted(merge_sorted(main.scan()?, recent.into_iter().map(Ok)), new.into_iter().map(Ok));
        format::write(&self.path, expected, watermark, self.fingerprint_bits, merged)?;
        drop(main);
        self.replace_everything(watermark)
    }

    /// Swaps in the file just written as the whole index: it covers everything up to
    /// `watermark`, so the recent part is emptied.
    fn replace_everything(&self, watermark: u64) -> Result<()> {
        self.swap_in(|state| {
            state.frozen = None;
            state.active.clear();
            state.indexed_max = state.indexed_max.max(watermark);
        })
    }

    /// Sizes for statistics.
    pub fn sizes(&self) -> IndexSizes {
        let state = self.read();
        IndexSizes {
            file_bytes: state.main.file_bytes(),
            file_entries: state.main.header().entries,
            recent_entries: (state.active.len() + state.frozen.as_ref().map_or(0, |f| f.len())) as u64,
            watermark: state.main.header().watermark,
        }
    }

    /// A consistent copy of every entry (file and recent) with the file's watermark, for
    /// `check`. Only the writer thread calls it, so nothing changes meanwhile.
    pub fn snapshot(&self) -> Result<(Vec<u64>, Vec<u64>, u64)> {
        let state = self.read();
        let file: Vec<u64> = state.main.scan()?.collect::<Result<_>>()?;
        let mut recent: Vec<u64> = state.active.iter().copied().collect();
        if let Some(frozen) = &state.frozen {
            recent.extend(frozen.iter().copied());
        }
        recent.sort_unstable();
        Ok((file, recent, state.main.header().watermark))
    }
}

/// Writes at `path` the index of a partition's snapshot: the entries of `file` (the index file of
/// the snapshot's moment) and `recent` (those of its records above the file's watermark, any
/// order), less the ids in `dead` (its tombstones), covering every id up to `watermark`.
pub fn write_snapshot(
    path: &Path,
    file: &MainIndex,
    mut recent: Vec<u64>,
    dead: &HashSet<u32>,
    watermark: u64,
) -> Result<()> {
    recent.sort_unstable();
    let expected = file.header().entries + recent.len() as u64;
    let merged = merge_sorted(file.scan()?, recent.into_iter().map(Ok))
        .filter(|e| !matches!(e, Ok(e) if dead.contains(&entry_id(*e))));
    format::write(path, expected, watermark, file.header().fingerprint_bits, merged)?;
    Ok(())
}

/// Merges two ascending streams into one ascending stream.
fn merge_sorted<A, B>(a: A, b: B) -> impl Iterator<Item = Result<u64>>
where
    A: Iterator<Item = Result<u64>>,
    B: Iterator<Item = Result<u64>>,
{
    let mut a = a.peekable();
    let mut b = b.peekable();
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(Ok(x)), Some(Ok(y))) => {
            if x <= y {
                a.next()
            } else {
                b.next()
            }
        }
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(index: &HashIndex, fp: u32) -> Vec<u32> {
        let mut out = Vec::new();
        index.candidates(fp, &mut out).unwrap();
        out
    }

    #[test]
    fn merge_moves_recent_entries_into_the_file_and_drops_tombstones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let index = HashIndex::open(&path, 32).unwrap();
        index.apply(&[entry(10, 1), entry(20, 2), entry(10, 3)], &[], 3);
        assert_eq!(ids(&index, 10), vec![3, 1]);
        assert!(index.freeze_if(1));
        assert!(!index.freeze_if(1), "one merge at a time");
        assert_eq!(index.tombstone_floor(), 3);
        index.apply(&[entry(10, 4)], &[], 4);
        let dead = Tombstones { ids: HashSet::from([1]), max_seq: 9 };
        let done = index.merge(|| Ok(dead)).unwrap().unwrap();
        assert_eq!(done.max_seq, 9);
        assert_eq!(index.watermark(), 3);
        assert_eq!(ids(&index, 10), vec![4, 3]);
        assert_eq!(ids(&index, 20), vec![2]);
        assert_eq!(index.sizes().file_entries, 2);

        let reopened = HashIndex::open(&path, 32).unwrap();
        assert_eq!(ids(&reopened, 10), vec![3]);
        assert!(index.merge(|| unreachable!("nothing frozen")).unwrap().is_none());
    }

    /// Pages held in RAM answer as the file does, follow the index through merges, and are
    /// charged to the part: what one file gives back, the next takes.
    #[test]
    fn pages_in_ram_follow_merges_within_their_part() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let index = HashIndex::open(&path, 32).unwrap();
        let spread = |range: std::ops::Range<u32>| -> Vec<u64> {
            range.map(|i| entry(i.wrapping_mul(2_654_435_761), i)).collect()
        };
        index.rebuild(spread(1..5_000), 5_000).unwrap();
        let part = IndexPages::new(1 << 30);
        index.keep_in_ram(Arc::clone(&part));
        let pages = index.file().header().buckets * format::PAGE as u64;
        assert_eq!((index.resident_bytes(), part.used()), (pages, pages));
        assert_eq!(ids(&index, 2_654_435_761u32.wrapping_mul(77)), vec![77]);

        index.apply(&spread(5_000..20_000), &[], 19_999);
        assert!(index.freeze_if(1));
        index.merge(|| Ok(Tombstones { ids: HashSet::from([77]), max_seq: 1 })).unwrap();
        let pages = index.file().header().buckets * format::PAGE as u64;
        assert_eq!((index.resident_bytes(), part.used()), (pages, pages), "the old file's pages were given back");
        assert!(ids(&index, 2_654_435_761u32.wrapping_mul(77)).is_empty());
        assert_eq!(ids(&index, 2_654_435_761u32.wrapping_mul(19_000)), vec![19_000]);

        // A part too small for the whole file holds its first pages; lookups of the rest read it.
        let small = IndexPages::new(3 * format::PAGE as u64);
        let other = HashIndex::open(&path, 32).unwrap();
        other.keep_in_ram(Arc::clone(&small));
        assert_eq!(other.resident_bytes(), 3 * format::PAGE as u64);
        for i in (1..20_000).step_by(97).filter(|i| *i != 77) {
            assert_eq!(ids(&other, 2_654_435_761u32.wrapping_mul(i)), vec![i]);
        }
    }

    #[test]
    fn merge_streams_in_order() {
        let a = [1u64, 4, 6].map(Ok).into_iter();
        let b = [2u64, 3, 7].map(Ok).into_iter();
        let merged: Vec<u64> = merge_sorted(a, b).map(|e| e.unwrap()).collect();
        assert_eq!(merged, vec![1, 2, 3, 4, 6, 7]);
    }

    #[test]
    fn rebuild_replaces_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let index = HashIndex::open(&path, 32).unwrap();
        index.apply(&[entry(5, 1)], &[], 1);
        index.rebuild(vec![entry(6, 2), entry(5, 7)], 7).unwrap();
        assert_eq!(ids(&index, 5), vec![7]);
        assert_eq!(index.sizes().recent_entries, 0);
        let (file, recent, watermark) = index.snapshot().unwrap();
        assert_eq!((file, recent, watermark), (vec![entry(5, 7), entry(6, 2)], vec![], 7));
    }
}
