//! The commit log's segment files: creating one (preallocated, its header synced, its name made
//! durable), adopting the spare, retiring one no longer needed.

use std::{
    fs::File,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
};

use super::format::{SegmentHeader, HEADER};
use crate::{
    layout::{self, Layout},
    Error, Result,
};

/// The least a segment is preallocated with when the disk has no room for the configured size
/// (`log_segment_mib`): the store still opens and writes on a nearly full disk, in smaller
/// segments. (A transaction bigger than a segment gets a segment of its own size.)
pub const SMALL_SEGMENT_BYTES: u64 = 1 << 20;

/// One segment file, open for writing.
#[derive(Debug)]
pub struct Segment {
    /// Its header.
    pub header: SegmentHeader,
    /// The LSN just past its preallocated space.
    pub limit: u64,
    /// The open file.
    pub file: File,
    /// Its path.
    pub path: PathBuf,
}

impl Segment {
    /// Creates segment `seq` starting at LSN `base` with room for `want` bytes of records (and
    /// at least `need`), or if the disk has no room for that, for less: `need`, but at least
    /// [`SMALL_SEGMENT_BYTES`].
    pub fn create_fitting(layout: &Layout, seq: u64, base: u64, want: u64, need: u64) -> Result<Self> {
        let need = need.div_ceil(HEADER) * HEADER;
        let size = want.max(need);
        match Self::create(layout, seq, base, size) {
            Err(err) if err.is_disk_full() && need.max(SMALL_SEGMENT_BYTES) < size => {
                let small = need.max(SMALL_SEGMENT_BYTES);
                tracing::warn!(%err, bytes = small, "the disk is nearly full: a small commit log segment");
                Self::create(layout, seq, base, small)
            }
            other => other,
        }
    }

    /// Creates segment `seq` starting at LSN `base` with room for `bytes` of records: the file
    /// preallocated, its header written and synced, and its name made durable.
    fn create(layout: &Layout, seq: u64, base: u64, bytes: u64) -> Result<Self> {
        let path = layout.log_segment(seq);
        let io = |e: std::io::Error| Error::io(&path, &e);
        let file = File::options().read(true).write(true).create(true).truncate(true).open(&path).map_err(io)?;
        let made = (|| {
            let len = i64::try_from(HEADER + bytes).map_err(|_| std::io::ErrorKind::InvalidInput)?;
            nix::fcntl::fallocate(&file, nix::fcntl::FallocateFlags::empty(), 0, len).map_err(std::io::Error::from)?;
            let header = SegmentHeader { seq, base };
            file.write_all_at(&header.encode(), 0)?;
            file.sync_all()?;
            layout::sync_dir(&path)
        })();
        if let Err(e) = made {
            let _ = std::fs::remove_file(&path);
            return Err(io(e));
        }
        Ok(Self { header: SegmentHeader { seq, base }, limit: base + bytes, file, path })
    }

    /// Makes the spare segment file `file` (at `layout.log_spare()`) segment `seq` starting at
    /// `base`, if it has room for `len` bytes: its header written and synced first, then renamed
    /// into place, then its name synced. Its old records cannot pass for new ones: their LSNs
    /// are not their new positions.
    pub fn adopt(layout: &Layout, file: File, seq: u64, base: u64, len: u64) -> Result<Option<Self>> {
        let (spare, path) = (layout.log_spare(), layout.log_segment(seq));
        let size = file.metadata().map_err(|e| Error::io(&spare, &e))?.len();
        if size <= HEADER + len {
            return Ok(None);
        }
        let header = SegmentHeader { seq, base };
        file.write_all_at(&header.encode(), 0)
            .and_then(|()| file.sync_data())
            .and_then(|()| std::fs::rename(&spare, &path))
            .and_then(|()| layout::sync_dir(&path))
            .map_err(|e| Error::io(&path, &e))?;
        Ok(Some(Self { header, limit: base + size - HEADER, file, path }))
    }

    pub fn offset(&self, lsn: u64) -> u64 {
        lsn - self.header.base + HEADER
    }
}

/// Renames a segment file no longer needed to the spare's name if there is no spare yet (its
/// blocks are written: it makes a good next segment), else removes it.
pub fn retire(layout: &Layout, path: &Path) -> Result<()> {
    let spare = layout.log_spare();
    if !spare.exists() && std::fs::rename(path, &spare).is_ok() {
        return Ok(());
    }
    remove(path)
}

pub fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, &e)),
    }
}
