//! `bench --cold[=MEM]`: a spawned server that starts with none of its data in the page cache
//! and runs inside a memory group of MEM bytes (page cache included: `shardlite_proc::cgroup`),
//! so that a data set bigger than MEM is read from the disk as on a machine with that much RAM;
//! and, measured just before, the device's ceiling ([`crate::device`]) at each concurrency the
//! workloads run at, which every run's disk reads are set against.
//!
//! Where no writable memory controller exists the run goes on without a limit, and says so.

use std::{
    path::{Path, PathBuf},
    process::Command,
    str::FromStr,
    time::{Duration, Instant},
};

use serde::Serialize;
use shardlite_proc::{cgroup::MemoryGroup, evict_page_cache};

use crate::{device, http::Target};

/// How long the device is read at each concurrency.
const CEILING_DURATION: Duration = Duration::from_secs(3);

/// How often `ColdServer::settle` looks at the server's `/stats`.
const SETTLE_POLL: Duration = Duration::from_secs(1);
/// The longest `ColdServer::settle` waits.
const SETTLE_LIMIT: Duration = Duration::from_secs(600);
/// What a server with nothing to do reads between two looks, at most.
const SETTLED_READ_BYTES: u64 = 1 << 20;

/// The default limit is the data directory's bytes divided by this: the data is 8 times the
/// memory, as a big data set on a real machine would be.
const DATA_PER_LIMIT: u64 = 8;

/// The least default limit: room for the server itself when the data is small.
const MIN_DEFAULT_LIMIT: u64 = 64 << 20;

/// The memory limit `--cold` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `--cold`: an eighth of the data directory's bytes, at least 64 MiB.
    OfData,
    /// `--cold=MEM`.
    Bytes(u64),
}

impl Limit {
    /// The limit for a data directory of `data_bytes`.
    pub fn bytes(self, data_bytes: u64) -> u64 {
        match self {
            Self::OfData => (data_bytes / DATA_PER_LIMIT).max(MIN_DEFAULT_LIMIT),
            Self::Bytes(bytes) => bytes,
        }
    }
}

/// A byte count as written on the command line: `200MiB`, `1.5GiB`, `64M` (K, M, G, T: binary,
/// as cgroup files read them), `500MB` (KB, MB, GB, TB: decimal), or plain bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: f64 = number.parse().map_err(|_| format!("{text:?}: not a size such as 200MiB"))?;
        let unit = unit.trim().to_ascii_lowercase();
        let scale: u64 = match unit.as_str() {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "t" | "tib" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            _ => return Err(format!("{text:?}: unknown unit {unit:?} (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)")),
        };
        Ok(Self((number * scale as f64) as u64))
    }
}

/// A cold server's setting: its memory group, if one could be made, and the device's ceilings.
#[derive(Debug)]
pub struct ColdServer {
    group: Option<MemoryGroup>,
    limit: u64,
    evicted_files: usize,
    /// Per concurrency, the device's ceiling at it (`None`: it could not be measured).
    ceilings: Vec<(usize, Option<device::DeviceCeiling>)>,
}

/// What a run's report says of its cold server.
#[derive(Debug, Clone, Serialize)]
pub struct ColdReport {
    /// The memory limit asked for, bytes.
    pub limit_bytes: u64,
    /// Whether the server ran under it (false: no memory controller could be used).
    pub limited: bool,
    /// The group's most memory since the server started, page cache included, bytes.
    pub group_peak_bytes: Option<u64>,
    /// Processes of the group killed for want of memory since the server started.
    pub oom_kills: Option<u64>,
    /// Files of the data directory evicted from the page cache before the server started.
    pub evicted_files: usize,
    /// The device's ceiling at this run's concurrency.
    pub device: Option<device::DeviceCeiling>,
    /// The run's disk reads per second, percent of the ceiling.
    pub device_use_pct: Option<f64>,
}

impl ColdServer {
    /// Evicts `dir`'s files from the page cache, measures the device under them at each of
    /// `concurrency`, and makes a memory group of `limit` for the server, printing each step.
    pub fn prepare(dir: &Path, limit: Limit, concurrency: &[usize]) -> anyhow::Result<Self> {
        let limit = limit.bytes(dir_bytes(dir)?);
        let evicted_files = evict_page_cache(dir)?;
        eprintln!("cold: evicted {evicted_files} files of {} from the page cache", dir.display());
        let files = device::data_files(dir)?;
        let mut ceilings: Vec<(usize, Option<device::DeviceCeiling>)> = Vec::new();
        for &threads in concurrency {
            if ceilings.iter().all(|&(t, _)| t != threads) {
                ceilings.push((threads, measure_ceiling(&files, threads)));
            }
        }
        let group = match MemoryGroup::create(limit) {
            Ok(group) => {
                eprintln!("cold: memory limited to {} MiB ({})", limit >> 20, group.dir().display());
                Some(group)
            }
            Err(e) => {
                eprintln!("cold: {e}; the server runs without a memory limit");
                None
            }
        };
        Ok(Self { group, limit, evicted_files, ceilings })
    }

    /// A command that runs `exe`: inside the memory group, if there is one.
    pub fn command(&self, exe: &Path) -> Command {
        self.group.as_ref().map_or_else(|| Command::new(exe), |group| group.command(exe))
    }

    /// Why the server failed to start, if the memory limit is to blame (it was OOM-killed).
    pub fn explain_failed_start(&self) -> Option<String> {
        let killed = self.group.as_ref()?.oom_kills()?;
        (killed > 0).then(|| {
            format!(
                "the server was killed for want of memory: --cold={}MiB is too little to start it",
                self.limit >> 20
            )
        })
    }

    /// Waits until the server has read its index files' pages into RAM, as a server does once
    /// after it starts (measured meanwhile, the workloads would share the disk with that one-off
    /// read): until, from one look at its `/stats` to the next, the pages held
    /// (`store.memory.index_pages_bytes`) stay the same and the server read less than
    /// [`SETTLED_READ_BYTES`]. Bounded by [`SETTLE_LIMIT`]; prints what it waited for.
    pub async fn settle(&self, target: &Target) {
        let started = Instant::now();
        let mut last = None;
        while started.elapsed() < SETTLE_LIMIT {
            tokio::time::sleep(SETTLE_POLL).await;
            let Some(now) = startup_reads(target).await else { break };
            if last.is_some_and(|(held, read)| held == now.0 && now.1 < read + SETTLED_READ_BYTES) {
                break;
            }
            last = Some(now);
        }
        let mib = last.map_or(0, |(held, _)| held) as f64 / f64::from(1 << 20);
        eprintln!("cold: index pages held in RAM: {mib:.0} MiB after {:.1} s", started.elapsed().as_secs_f64());
    }

    /// What a run at `connections` that read the disk `disk_reads_per_sec` times a second
    /// reports of this server.
    pub fn report(&self, connections: usize, disk_reads_per_sec: Option<f64>) -> ColdReport {
        let device = self.ceilings.iter().find(|&&(t, _)| t == connections).and_then(|&(_, c)| c);
        let device_use_pct = device.zip(disk_reads_per_sec).map(|(d, reads)| 100.0 * reads / d.reads_per_sec);
        ColdReport {
            limit_bytes: self.limit,
            limited: self.group.is_some(),
            group_peak_bytes: self.group.as_ref().and_then(MemoryGroup::peak),
            oom_kills: self.group.as_ref().and_then(MemoryGroup::oom_kills),
            evicted_files: self.evicted_files,
            device,
            device_use_pct,
        }
    }
}

/// The server's index pages held in RAM and bytes read from storage so far (`/stats`);
/// `None` without them.
async fn startup_reads(target: &Target) -> Option<(u64, u64)> {
    let (status, body) = target.get("/stats", SETTLE_POLL).await.ok()?;
    let stats: serde_json::Value = serde_json::from_slice(&body).ok().filter(|_| status == 200)?;
    let held = stats.get("store")?.get("memory")?.get("index_pages_bytes")?.as_u64()?;
    Some((held, stats.get("process")?.get("read_bytes")?.as_u64()?))
}

/// The device's ceiling at `threads`, printed; `None` (and why) if it cannot be measured.
fn measure_ceiling(files: &[PathBuf], threads: usize) -> Option<device::DeviceCeiling> {
    eprintln!(
        "cold: the device's ceiling: random 4 KiB O_DIRECT reads of {} data files, {threads} threads, {:.0} s",
        files.len(),
        CEILING_DURATION.as_secs_f64()
    );
    match device::measure(files, threads, CEILING_DURATION) {
        Ok(ceiling) => {
            eprintln!("cold: {:.0} reads/s", ceiling.reads_per_sec);
            Some(ceiling)
        }
        Err(e) => {
            eprintln!("cold: the device's ceiling could not be measured: {e}");
            None
        }
    }
}

/// The bytes of the files in `dir` and below.
fn dir_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        bytes += if meta.is_dir() { dir_bytes(&entry.path())? } else { meta.len() };
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_and_decimal_units() {
        let parse = |s: &str| s.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(parse("200MiB"), Ok(200 << 20));
        assert_eq!(parse("200M"), Ok(200 << 20));
        assert_eq!(parse("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse("500mb"), Ok(500_000_000));
        assert_eq!(parse("65536"), Ok(65536));
        assert!(parse("MiB").is_err());
        assert!(parse("200 furlongs").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn the_default_limit_is_an_eighth_of_the_data_but_not_too_little() {
        assert_eq!(Limit::OfData.bytes(1_600_000_000), 200_000_000);
        assert_eq!(Limit::OfData.bytes(20_000_000), 64 << 20);
        assert_eq!(Limit::Bytes(1 << 30).bytes(20_000_000), 1 << 30);
    }
}
