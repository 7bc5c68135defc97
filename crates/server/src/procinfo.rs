//! What the server process has cost so far, for `/stats` and `/metrics`: its `/proc/self/io`
//! counters and its CPU time. (The server does not depend on the benchmark crate, which reads
//! the same files for its reports: the binary depends on both, never one on the other.)

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
        let mut stats = Self::parse_io(&std::fs::read_to_string("/proc/self/io").unwrap_or_default());
        if let Ok(usage) = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
            let secs = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            stats.cpu_user_seconds = secs(usage.user_time());
            stats.cpu_system_seconds = secs(usage.system_time());
        }
        stats
    }

    fn parse_io(text: &str) -> Self {
        let mut stats = Self::default();
        for line in text.lines() {
            let Some((name, value)) = line.split_once(':') else { continue };
            let value = value.trim().parse().unwrap_or(0);
            match name {
                "rchar" => stats.rchar = value,
                "wchar" => stats.wchar = value,
                "syscr" => stats.syscr = value,
                "syscw" => stats.syscw = value,
                "read_bytes" => stats.read_bytes = value,
                "write_bytes" => stats.write_bytes = value,
                "cancelled_write_bytes" => stats.cancelled_write_bytes = value,
                _ => {}
            }
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
    fn parses_proc_self_io() {
        let text = "rchar: 10\nwchar: 20\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 8192\n\
                    cancelled_write_bytes: 0\n";
        let s = ProcessStats::parse_io(text);
        assert_eq!((s.rchar, s.wchar, s.syscr, s.syscw, s.read_bytes, s.write_bytes), (10, 20, 3, 4, 4096, 8192));
    }

    #[test]
    fn reads_this_process() {
        let s = ProcessStats::read();
        assert!(s.cpu_seconds() > 0.0);
        assert!(s.rchar > 0, "{s:?}");
    }
}
