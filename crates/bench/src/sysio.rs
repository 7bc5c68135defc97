//! What a run cost, read from `/proc` with `procfs`: the process's own I/O (`/proc/self/io`),
//! the disk's (`/proc/diskstats` of the device holding a path) and CPU time; and eviction of files from
//! the page cache, so that the next reads really go to the disk.

use std::{fs, os::unix::fs::MetadataExt, path::Path};

/// Counters of `/proc/<pid>/io`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcIo {
    /// Bytes the process caused to be read from storage.
    pub read_bytes: u64,
    /// Bytes the process caused to be written to storage.
    pub write_bytes: u64,
    /// Read system calls.
    pub syscr: u64,
    /// Write system calls.
    pub syscw: u64,
}

impl ProcIo {
    /// Reads `/proc/self/io` (zeros where it is unavailable).
    pub fn of_self() -> Self {
        procfs::process::Process::myself().and_then(|me| me.io()).map_or_else(
            |_| Self::default(),
            |io| Self { read_bytes: io.read_bytes, write_bytes: io.write_bytes, syscr: io.syscr, syscw: io.syscw },
        )
    }

    /// The change from `earlier` to `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            syscr: self.syscr.saturating_sub(earlier.syscr),
            syscw: self.syscw.saturating_sub(earlier.syscw),
        }
    }
}

/// Counters of one line of `/proc/diskstats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Reads completed.
    pub reads: u64,
    /// Sectors (512 B) read.
    pub sectors_read: u64,
    /// Writes completed.
    pub writes: u64,
    /// Sectors written.
    pub sectors_written: u64,
}

impl DiskStats {
    /// The counters of the whole disk holding `path` (zeros where they cannot be found).
    pub fn for_path(path: &Path) -> Self {
        Self::find_for_path(path).unwrap_or_default()
    }

    /// The counters of the disk holding `path`, or `None` if it has no line in
    /// `/proc/diskstats` (tmpfs, overlay and other virtual file systems).
    pub fn find_for_path(path: &Path) -> Option<Self> {
        let dev = fs::metadata(path).ok()?.dev();
        let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
        procfs::diskstats().ok()?.into_iter().find(|d| (d.major as u64, d.minor as u64) == (major, minor)).map(|d| {
            Self { reads: d.reads, sectors_read: d.sectors_read, writes: d.writes, sectors_written: d.sectors_written }
        })
    }

    /// The change from `earlier` to `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            reads: self.reads.saturating_sub(earlier.reads),
            sectors_read: self.sectors_read.saturating_sub(earlier.sectors_read),
            writes: self.writes.saturating_sub(earlier.writes),
            sectors_written: self.sectors_written.saturating_sub(earlier.sectors_written),
        }
    }
}

/// CPU time this process has used (user + system), seconds.
pub fn cpu_seconds() -> f64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF);
    usage.map_or(0.0, |u| {
        let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
        t(u.user_time()) + t(u.system_time())
    })
}

/// Drops every file below `dir` from the page cache (fsync first: dirty pages stay). Returns
/// the files evicted.
pub fn evict_page_cache(dir: &Path) -> std::io::Result<usize> {
    let mut evicted = 0;
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            evicted += evict_page_cache(&path)?;
            continue;
        }
        let file = fs::File::open(&path)?;
        file.sync_all()?;
        nix::fcntl::posix_fadvise(&file, 0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED)
            .map_err(std::io::Error::from)?;
        evicted += 1;
    }
    Ok(evicted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_process_has_counters() {
        assert!(cpu_seconds() > 0.0);
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("f"), b"x").unwrap();
        assert_eq!(evict_page_cache(dir.path()).unwrap(), 1);
    }
}
