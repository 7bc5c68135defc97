//! What the server process has cost so far, for `/stats` and `/metrics`: its `/proc/self/io`
//! counters (read with `procfs`, as the benchmark crate reads them) and its CPU time.

use serde::Serialize;

/// The process's I/O counters (`/proc/self/io`) and CPU time; zeros where unavailable.
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
    /// Reads the counters now.
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let s = ProcessStats::read();
        assert!(s.cpu_seconds() > 0.0);
        assert!(s.rchar > 0, "{s:?}");
    }
}
