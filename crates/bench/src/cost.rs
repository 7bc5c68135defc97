//! What the throughput cost: sampled once a second from the server's `/stats` (records, WAL
//! bytes, its own I/O and CPU counters) and, when the server runs on this machine, from
//! `/proc` through crate `shardlite-proc` (the disk holding its data directory, the machine's
//! CPU busy / idle / iowait, the server process's RSS). A figure that cannot be had is `None`,
//! never a made-up zero.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use serde::Serialize;

use shardlite_proc::{rss_bytes, CpuTicks, DiskStats};

use crate::{cold::ColdServer, http::Target};

/// How long a control request (`/stats`, `/metrics`) may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);

/// What is known of a server on this machine.
#[derive(Debug, Clone, Default)]
pub struct Local {
    /// Its data directory (whose disk's counters are read).
    pub data_dir: Option<PathBuf>,
    /// Its process id (for the RSS).
    pub pid: Option<u32>,
    /// Spawned with `--cold`: its memory group and the device's ceilings.
    pub cold: Option<Arc<ColdServer>>,
}

/// The figures of `/stats` the report uses.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerStats {
    /// Records in the store.
    pub records: u64,
    /// WAL bytes over all partitions.
    pub wal_bytes: u64,
    /// Bytes the server caused to be read from storage (`/proc/self/io` `read_bytes`).
    pub read_bytes: u64,
    /// Bytes the server caused to be written to storage.
    pub write_bytes: u64,
    /// The server's CPU time, seconds.
    pub cpu_seconds: f64,
}

impl ServerStats {
    /// Reads `/stats`; `None` if the server has no such route (another server) or is down.
    pub async fn fetch(target: &Target) -> Option<Self> {
        let (status, body) = target.get("/stats", CONTROL_TIMEOUT).await.ok()?;
        if status != 200 {
            return None;
        }
        Self::parse(&serde_json::from_slice(&body).ok()?)
    }

    fn parse(v: &serde_json::Value) -> Option<Self> {
        let u = |a: &str, b: &str| v.get(a)?.get(b)?.as_u64();
        let f = |a: &str, b: &str| v.get(a)?.get(b)?.as_f64();
        Some(Self {
            records: u("totals", "records")?,
            wal_bytes: u("totals", "wal_bytes").unwrap_or(0),
            read_bytes: u("process", "read_bytes").unwrap_or(0),
            write_bytes: u("process", "write_bytes").unwrap_or(0),
            cpu_seconds: f("process", "cpu_user_seconds").unwrap_or(0.0)
                + f("process", "cpu_system_seconds").unwrap_or(0.0),
        })
    }
}

/// Requests the server has counted on `route` (`/metrics`, summed over methods and statuses).
pub async fn server_request_count(target: &Target, route: &str) -> Option<u64> {
    let (status, body) = target.get("/metrics", CONTROL_TIMEOUT).await.ok()?;
    if status != 200 {
        return None;
    }
    Some(parse_request_count(&String::from_utf8_lossy(&body), route))
}

fn parse_request_count(text: &str, route: &str) -> u64 {
    let label = format!("route=\"{route}\"");
    text.lines()
        .filter(|l| l.starts_with("shardlite_http_request_duration_seconds_count{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|n| n as u64)
        .sum()
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When.
    pub at: Instant,
    /// `/stats`, if the server has it.
    pub server: Option<ServerStats>,
    /// The data directory's disk, if local and found.
    pub disk: Option<DiskStats>,
    /// The machine's CPU, if local.
    pub cpu: Option<CpuTicks>,
    /// The server's RSS, if its pid is known.
    pub rss_bytes: Option<u64>,
}

impl Sample {
    /// Reads everything now.
    pub async fn take(target: &Target, local: &Local) -> Self {
        let server = ServerStats::fetch(target).await;
        let at = Instant::now();
        let disk = local.data_dir.as_deref().and_then(DiskStats::find_for_path);
        let cpu = if target.is_local() { CpuTicks::read() } else { None };
        let rss_bytes = local.pid.and_then(rss_bytes);
        Self { at, server, disk, cpu, rss_bytes }
    }
}

/// Samples at `start`, every second after it, and at `end`.
pub async fn sample_every_second(target: Target, local: Local, start: Instant, end: Instant) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut next = start;
    while next < end {
        tokio::time::sleep_until(next.into()).await;
        samples.push(Sample::take(&target, &local).await);
        next += Duration::from_secs(1);
    }
    tokio::time::sleep_until(end.into()).await;
    samples.push(Sample::take(&target, &local).await);
    samples
}

/// What an interval cost, per second where it is a rate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Cost {
    /// Disk reads plus writes completed per second (the data directory's whole disk).
    pub iops: Option<f64>,
    /// Disk reads per second.
    pub disk_reads_per_sec: Option<f64>,
    /// MB (10^6 bytes) read from the disk per second.
    pub mb_read_per_sec: Option<f64>,
    /// MB written to the disk per second.
    pub mb_written_per_sec: Option<f64>,
    /// MB the server process caused to be read from storage per second (`/proc/<pid>/io`).
    pub server_mb_read_per_sec: Option<f64>,
    /// MB the server process caused to be written to storage per second.
    pub server_mb_written_per_sec: Option<f64>,
    /// WAL bytes at the end of the interval.
    pub wal_bytes: Option<u64>,
    /// Records at the end of the interval.
    pub records: Option<u64>,
    /// The machine's CPU: percent busy, idle, and idle waiting for I/O.
    pub cpu_busy_pct: Option<f64>,
    /// Percent idle.
    pub cpu_idle_pct: Option<f64>,
    /// Percent iowait.
    pub cpu_iowait_pct: Option<f64>,
    /// The server's CPU use, percent of one core.
    pub server_cpu_pct: Option<f64>,
    /// The server's RSS at the end of the interval.
    pub server_rss_bytes: Option<u64>,
}

impl Cost {
    /// The cost between two samples.
    pub fn between(a: &Sample, b: &Sample) -> Self {
        let secs = b.at.saturating_duration_since(a.at).as_secs_f64().max(1e-3);
        let disk = a.disk.zip(b.disk).map(|(a, b)| b.since(&a));
        let server = a.server.zip(b.server);
        let cpu = a.cpu.zip(b.cpu).map(|(a, b)| {
            let (busy, idle, iowait) = (b.busy - a.busy, b.idle - a.idle, b.iowait - a.iowait);
            let total = (busy + idle + iowait).max(1) as f64;
            (100.0 * busy as f64 / total, 100.0 * idle as f64 / total, 100.0 * iowait as f64 / total)
        });
        let mb = |bytes: u64| bytes as f64 / 1e6 / secs;
        Self {
            iops: disk.map(|d| (d.reads + d.writes) as f64 / secs),
            disk_reads_per_sec: disk.map(|d| d.reads as f64 / secs),
            mb_read_per_sec: disk.map(|d| mb(d.sectors_read * 512)),
            mb_written_per_sec: disk.map(|d| mb(d.sectors_written * 512)),
            server_mb_read_per_sec: server.map(|(a, b)| mb(b.read_bytes.saturating_sub(a.read_bytes))),
            server_mb_written_per_sec: server.map(|(a, b)| mb(b.write_bytes.saturating_sub(a.write_bytes))),
            wal_bytes: b.server.map(|s| s.wal_bytes),
            records: b.server.map(|s| s.records),
            cpu_busy_pct: cpu.map(|c| c.0),
            cpu_idle_pct: cpu.map(|c| c.1),
            cpu_iowait_pct: cpu.map(|c| c.2),
            server_cpu_pct: server.map(|(a, b)| 100.0 * (b.cpu_seconds - a.cpu_seconds).max(0.0) / secs),
            server_rss_bytes: b.rss_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_metrics() {
        let metrics = "# TYPE x histogram\n\
            shardlite_http_request_duration_seconds_count{route=\"/kv/{key}\",method=\"GET\",status=\"200\"} 10\n\
            shardlite_http_request_duration_seconds_count{route=\"/kv/{key}\",method=\"PUT\",status=\"201\"} 5\n\
            shardlite_http_request_duration_seconds_count{route=\"/healthz\",method=\"GET\",status=\"200\"} 7\n\
            shardlite_http_request_duration_seconds_sum{route=\"/kv/{key}\",method=\"GET\",status=\"200\"} 0.5\n";
        assert_eq!(parse_request_count(metrics, "/kv/{key}"), 15);
        assert_eq!(parse_request_count(metrics, "/healthz"), 7);
    }

    #[test]
    fn parses_stats_json() {
        let v = serde_json::json!({
            "totals": {"records": 9, "wal_bytes": 4096},
            "process": {"read_bytes": 1, "write_bytes": 2, "cpu_user_seconds": 1.5, "cpu_system_seconds": 0.5}
        });
        let s = ServerStats::parse(&v).unwrap();
        assert_eq!(s, ServerStats { records: 9, wal_bytes: 4096, read_bytes: 1, write_bytes: 2, cpu_seconds: 2.0 });
        assert_eq!(ServerStats::parse(&serde_json::json!({"ok": true})), None);
    }

    #[test]
    fn cost_between_samples_is_per_second() {
        let t0 = Instant::now();
        let server = |records, wal_bytes, read_bytes, cpu_seconds| ServerStats {
            records,
            wal_bytes,
            read_bytes,
            write_bytes: 0,
            cpu_seconds,
        };
        let a = Sample {
            at: t0,
            server: Some(server(10, 0, 0, 1.0)),
            disk: Some(DiskStats { reads: 100, sectors_read: 0, writes: 0, sectors_written: 0 }),
            cpu: Some(CpuTicks { busy: 0, idle: 0, iowait: 0 }),
            rss_bytes: None,
        };
        let b = Sample {
            at: t0 + Duration::from_secs(2),
            server: Some(server(20, 8192, 4_000_000, 2.0)),
            disk: Some(DiskStats { reads: 300, sectors_read: 8000, writes: 100, sectors_written: 0 }),
            cpu: Some(CpuTicks { busy: 150, idle: 40, iowait: 10 }),
            rss_bytes: Some(1 << 20),
        };
        let c = Cost::between(&a, &b);
        assert_eq!(c.iops, Some(150.0));
        assert_eq!(c.disk_reads_per_sec, Some(100.0));
        assert_eq!(c.mb_read_per_sec, Some(8000.0 * 512.0 / 1e6 / 2.0));
        assert_eq!(c.server_mb_read_per_sec, Some(2.0));
        assert_eq!((c.wal_bytes, c.records, c.server_rss_bytes), (Some(8192), Some(20), Some(1 << 20)));
        assert_eq!((c.cpu_busy_pct, c.cpu_idle_pct, c.cpu_iowait_pct), (Some(75.0), Some(20.0), Some(5.0)));
        assert_eq!(c.server_cpu_pct, Some(50.0));
        // Without a local disk or /stats, those figures are absent, not zero.
        let bare = Sample { at: t0, server: None, disk: None, cpu: None, rss_bytes: None };
        let c = Cost::between(&bare, &Sample { at: t0 + Duration::from_secs(1), ..bare });
        assert_eq!(c, Cost::default());
    }
}
