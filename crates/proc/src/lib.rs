//! What a process and its machine cost, read in one place for the server (`/stats`,
//! `/metrics`) and the benchmarks: every `/proc` file through `procfs` — a process's I/O
//! counters (`/proc/<pid>/io`) and resident memory (`VmRSS` of `/proc/<pid>/status`), the
//! machine's CPU (`/proc/stat`) and a disk's counters (`/proc/diskstats`) — and the process's
//! own CPU time, from `getrusage`, which counts microseconds where `/proc` counts ticks of 10 ms.
//! Also eviction of files from the page cache, so that the next reads really go to the disk, and
//! the memory this process may use ([`cgroup`]), and the depth of the disk queue under a path
//! ([`block`]).

pub mod block;
pub mod cgroup;

use std::{fs, os::unix::fs::MetadataExt, path::Path};

use procfs::{CpuTime, CurrentSI};
use serde::Serialize;

/// This process's I/O counters (`/proc/self/io`) and CPU time; zeros where unavailable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ProcessStats {
    /// Bytes read through read-like system calls, from storage or the page cache.
    pub rchar: u64,
    /// Bytes written through write-like system calls.
    pub wchar: u64,
    /// Read system calls.
    pub syscr: u64,
    /// Write system calls.
    pub syscw: u64,
    /// Bytes the process caused to be fetched from storage.
    pub read_bytes: u64,
    /// Bytes the process caused to be sent to storage.
    pub write_bytes: u64,
    /// Bytes of page cache the process dirtied and then truncated away (not written).
    pub cancelled_write_bytes: u64,
    /// CPU time in user mode, seconds.
    pub cpu_user_seconds: f64,
    /// CPU time in the kernel, seconds.
    pub cpu_system_seconds: f64,
}

impl ProcessStats {
    /// Reads this process's counters now.
    pub fn read() -> Self {
        let mut stats = match procfs::process::Process::myself().and_then(|me| me.io()) {
            Ok(io) => Self {
                rchar: io.rchar,
                wchar: io.wchar,
                syscr: io.syscr,
                syscw: io.syscw,
                read_bytes: io.read_bytes,
                write_bytes: io.write_bytes,
                cancelled_write_bytes: io.cancelled_write_bytes,
                ..Self::default()
            },
            Err(_) => Self::default(),
        };
        if let Ok(usage) = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
            let secs = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            stats.cpu_user_seconds = secs(usage.user_time());
            stats.cpu_system_seconds = secs(usage.system_time());
        }
        stats
    }

    /// User plus system CPU time, seconds.
    pub fn cpu_seconds(&self) -> f64 {
        self.cpu_user_seconds + self.cpu_system_seconds
    }

    /// The change from `earlier` to `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            rchar: self.rchar.saturating_sub(earlier.rchar),
            wchar: self.wchar.saturating_sub(earlier.wchar),
            syscr: self.syscr.saturating_sub(earlier.syscr),
            syscw: self.syscw.saturating_sub(earlier.syscw),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            cancelled_write_bytes: self.cancelled_write_bytes.saturating_sub(earlier.cancelled_write_bytes),
            cpu_user_seconds: (self.cpu_user_seconds - earlier.cpu_user_seconds).max(0.0),
            cpu_system_seconds: (self.cpu_system_seconds - earlier.cpu_system_seconds).max(0.0),
        }
    }
}

/// What the Prometheus process collector reports about this process besides its CPU time:
/// memory, file descriptors, threads and its start; zeros where unavailable.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessFacts {
    /// Resident memory (`VmRSS`), bytes.
    pub resident_memory_bytes: u64,
    /// Virtual memory size, bytes.
    pub virtual_memory_bytes: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors (`u64::MAX`: unlimited).
    pub max_fds: u64,
    /// Threads.
    pub threads: u64,
    /// When the process started, seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

impl ProcessFacts {
    /// Reads this process's facts now (`/proc/self/stat`, `fd`, `limits`, `status`).
    pub fn read() -> Self {
        let Ok(me) = procfs::process::Process::myself() else { return Self::default() };
        let mut facts = Self {
            resident_memory_bytes: rss_bytes(std::process::id()).unwrap_or(0),
            open_fds: me.fd_count().map_or(0, |n| n as u64),
            ..Self::default()
        };
        if let Ok(limits) = me.limits() {
            facts.max_fds = match limits.max_open_files.soft_limit {
                procfs::process::LimitValue::Value(n) => n,
                procfs::process::LimitValue::Unlimited => u64::MAX,
            };
        }
        if let Ok(stat) = me.stat() {
            facts.virtual_memory_bytes = stat.vsize;
            facts.threads = u64::try_from(stat.num_threads).unwrap_or(0);
            if let Ok(boot) = procfs::boot_time_secs() {
                facts.start_time_seconds = boot as f64 + stat.starttime as f64 / procfs::ticks_per_second() as f64;
            }
        }
        facts
    }
}

/// The resident memory of process `pid` in bytes (`VmRSS`); `None` if it is gone.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = procfs::process::Process::new(i32::try_from(pid).ok()?).ok()?.status().ok()?;
    status.vmrss.map(|kib| kib * 1024)
}

/// The machine's CPU since boot (`/proc/stat`, all CPUs), in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// Ticks neither idle nor waiting for I/O.
    pub busy: u64,
    /// Idle ticks.
    pub idle: u64,
    /// Ticks idle with I/O outstanding.
    pub iowait: u64,
}

impl CpuTicks {
    /// Reads `/proc/stat`.
    pub fn read() -> Option<Self> {
        procfs::KernelStats::current().ok().map(|stats| Self::from(&stats.total))
    }
}

impl From<&CpuTime> for CpuTicks {
    fn from(t: &CpuTime) -> Self {
        let more = |v: Option<u64>| v.unwrap_or(0);
        // Guest time is already counted in user time.
        let busy = t.user + t.nice + t.system + more(t.irq) + more(t.softirq) + more(t.steal);
        Self { busy, idle: t.idle, iowait: more(t.iowait) }
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
    use procfs::{ExplicitSystemInfo, FromBufReadSI, KernelStats};

    use super::*;

    #[test]
    fn the_running_process_has_counters() {
        let s = ProcessStats::read();
        assert!(s.cpu_seconds() > 0.0);
        assert!(s.rchar > 0, "{s:?}");
        assert!(rss_bytes(std::process::id()).is_some_and(|b| b > 0));
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("f"), b"x").unwrap();
        assert_eq!(evict_page_cache(dir.path()).unwrap(), 1);
    }

    #[test]
    fn busy_is_every_tick_but_idle_and_iowait() {
        let stat = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nctxt 1\nbtime 2\nprocesses 3\n";
        let system =
            ExplicitSystemInfo { boot_time_secs: 0, ticks_per_second: 100, page_size: 4096, is_little_endian: true };
        let stats = KernelStats::from_buf_read(stat.as_bytes(), &system).unwrap();
        assert_eq!(CpuTicks::from(&stats.total), CpuTicks { busy: 160, idle: 800, iowait: 40 });
        assert!(CpuTicks::read().is_some_and(|t| t.busy + t.idle > 0));
    }
}
