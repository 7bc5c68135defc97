//! What a run cost, read from `/proc`: the process's own I/O (`/proc/self/io`), the disk's
//! (`/proc/diskstats` of the device holding a path) and CPU time; and eviction of files from
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
        Self::parse(&fs::read_to_string("/proc/self/io").unwrap_or_default())
    }

    /// Reads `/proc/<pid>/io`.
    pub fn of_pid(pid: u32) -> Self {
        Self::parse(&fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default())
    }

    fn parse(text: &str) -> Self {
        let mut io = Self::default();
        for line in text.lines() {
            let Some((name, v)) = line.split_once(':') else { continue };
            let v = v.trim().parse().unwrap_or(0);
            match name {
                "read_bytes" => io.read_bytes = v,
                "write_bytes" => io.write_bytes = v,
                "syscr" => io.syscr = v,
                "syscw" => io.syscw = v,
                _ => {}
            }
        }
        io
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
        let (major, minor) = (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff), (dev & 0xff) | ((dev >> 12) & !0xff));
        Self::parse(&fs::read_to_string("/proc/diskstats").ok()?, major, minor)
    }

    fn parse(text: &str, major: u64, minor: u64) -> Option<Self> {
        text.lines().find_map(|line| {
            let f: Vec<u64> = line.split_whitespace().map(|w| w.parse().unwrap_or(0)).collect();
            (f.len() >= 10 && f[0] == major && f[1] == minor).then(|| Self {
                reads: f[3],
                sectors_read: f[5],
                writes: f[7],
                sectors_written: f[9],
            })
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
    fn parses_proc_io_and_diskstats() {
        let io = ProcIo::parse("rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 8192\n");
        assert_eq!(io, ProcIo { read_bytes: 4096, write_bytes: 8192, syscr: 3, syscw: 4 });
        let line = " 254       0 vda 36237 6269 3900754 20578 73142 26296 3167824 12664 2 9740 35039";
        let d = DiskStats::parse(line, 254, 0);
        assert_eq!(d, Some(DiskStats { reads: 36237, sectors_read: 3900754, writes: 73142, sectors_written: 3167824 }));
        assert_eq!(DiskStats::parse(line, 8, 0), None);
    }

    #[test]
    fn the_running_process_has_counters() {
        assert!(cpu_seconds() > 0.0);
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("f"), b"x").unwrap();
        assert_eq!(evict_page_cache(dir.path()).unwrap(), 1);
    }
}
