//! Index pages held in RAM: the budget's part for them ([`IndexPages`], shared by every
//! partition) and one file's pages read into it ([`Resident`]). Pages are whatever size the
//! file's format gives them (`format::PAGE`).
//!
//! A cold lookup needs one index page and one row: the index is what must stay in RAM. Left to
//! the OS page cache it does not: under uniform reads of data larger than memory, each index
//! page is touched once every few seconds, and the data pages streaming through the cache push
//! it out before its second touch. So the store reads index files into its own memory, up to
//! the budget's part, a whole file or (when the part runs short) its first pages; lookups of the
//! rest read the file. A file's pages return their bytes to the part when the file is dropped
//! (replaced by a merge and no lookup holds it any more).

use std::{
    fs::File,
    os::unix::fs::FileExt,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

/// The budget's part for index pages in RAM, shared by every partition.
#[derive(Debug)]
pub struct IndexPages {
    limit: u64,
    used: AtomicU64,
}

impl IndexPages {
    /// A part of `limit` bytes.
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self { limit, used: AtomicU64::new(0) })
    }

    /// Bytes of index pages held in RAM now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes up to `pages` whole pages of `page` bytes from the part: how many it got (maybe
    /// none).
    fn take(self: &Arc<Self>, pages: u64, page: usize) -> u64 {
        let mut got = 0;
        let _ = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            got = (self.limit.saturating_sub(used) / page as u64).min(pages);
            Some(used + got * page as u64)
        });
        got
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// The first pages of one index file's bucket pages, in RAM, charged to an [`IndexPages`].
#[derive(Debug)]
pub struct Resident {
    bytes: Box<[u8]>,
    page: usize,
    part: Arc<IndexPages>,
}

impl Resident {
    /// Reads as many of `file`'s `buckets` bucket pages of `page` bytes (the first after a
    /// header page) as `part` has room for; `None` if it has none (or the read fails: lookups
    /// then read the file, which reports the error).
    pub fn load(file: &File, buckets: u64, page: usize, part: &Arc<IndexPages>) -> Option<Self> {
        let pages = part.take(buckets, page);
        if pages == 0 {
            return None;
        }
        let bytes = vec![0u8; (pages as usize) * page].into_boxed_slice();
        let mut resident = Self { bytes, page, part: Arc::clone(part) };
        file.read_exact_at(&mut resident.bytes, page as u64).ok()?;
        Some(resident)
    }

    /// Bucket `b`'s page, if it is held.
    pub fn page(&self, b: u64) -> Option<&[u8]> {
        let at = usize::try_from(b).ok()?.checked_mul(self.page)?;
        self.bytes.get(at..at + self.page)
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes.len() as u64
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        self.part.give_back(self.bytes.len() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    #[test]
    fn files_take_whole_pages_up_to_the_limit_and_give_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let content: Vec<u8> = (0..5 * PAGE).map(|i| (i / PAGE) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let file = File::open(&path).unwrap();
        let part = IndexPages::new(3 * PAGE as u64 + 100);
        let first = Resident::load(&file, 2, PAGE, &part).unwrap();
        assert_eq!((first.bytes(), part.used()), (2 * PAGE as u64, 2 * PAGE as u64));
        assert_eq!(first.page(1).unwrap()[0], 2, "bucket 1 is the file's page 2 (page 0 is the header)");
        assert!(first.page(2).is_none());
        let second = Resident::load(&file, 4, PAGE, &part).unwrap();
        assert_eq!(second.bytes(), PAGE as u64, "only one page left in the part");
        assert!(Resident::load(&file, 1, PAGE, &part).is_none(), "the part is spent");
        drop(first);
        assert_eq!(part.used(), PAGE as u64);
        drop(second);
        assert_eq!(part.used(), 0);
    }
}
