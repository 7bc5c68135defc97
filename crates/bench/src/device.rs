//! The device's ceiling: how many random 4 KiB reads a second the disk under a data directory
//! answers at a given concurrency, measured the way a cold server reads — `pread`s of single
//! pages at random offsets of its `*.db` files — but with `O_DIRECT`, so that every read goes to
//! the device and none is answered (or left behind) in the page cache. One thread per
//! concurrent read (psync, as `fio --ioengine=psync --numjobs=N`), each with its own aligned
//! buffer, all reading the same open files until the time is up.

use std::{
    fs::File,
    io,
    os::unix::fs::{FileExt, OpenOptionsExt},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use nix::fcntl::OFlag;
use serde::Serialize;

use crate::workload::Rng;

/// Bytes of one read: a page, aligned as `O_DIRECT` wants.
pub const BLOCK: usize = 4096;

/// What the device answered.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DeviceCeiling {
    /// Random 4 KiB reads completed per second.
    pub reads_per_sec: f64,
    /// Threads reading at once (one read in flight each).
    pub threads: usize,
    /// How long they read, seconds.
    pub seconds: f64,
    /// Files read from.
    pub files: usize,
    /// Their bytes (whole 4 KiB blocks).
    pub bytes: u64,
}

/// The data files of a shardlite directory: its `*.db` files, the ones reads go to.
pub fn data_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.path()))
        .filter(|path| path.as_ref().map_or(true, |p| p.extension().is_some_and(|e| e == "db")))
        .collect::<io::Result<_>>()?;
    files.sort();
    Ok(files)
}

/// Reads random 4 KiB blocks of `paths` with `O_DIRECT` from `threads` threads for `duration`.
/// An error if a file cannot be opened so (a file system without direct I/O, such as tmpfs)
/// or read, or if the files hold no whole block.
pub fn measure(paths: &[PathBuf], threads: usize, duration: Duration) -> io::Result<DeviceCeiling> {
    let blocks = Blocks::open(paths)?;
    if blocks.total == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no data file holds a whole 4 KiB block"));
    }
    let threads = threads.max(1);
    let reads = AtomicU64::new(0);
    let start = Instant::now();
    let deadline = start + duration;
    let (blocks, reads) = (&blocks, &reads);
    std::thread::scope(|scope| {
        let workers: Vec<_> =
            (0..threads).map(|t| scope.spawn(move || read_until(blocks, deadline, t as u64 + 1, reads))).collect();
        workers.into_iter().try_for_each(|w| w.join().unwrap_or_else(|_| Err(io::Error::other("reader panicked"))))
    })?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(DeviceCeiling {
        reads_per_sec: reads.load(Ordering::Relaxed) as f64 / seconds,
        threads,
        seconds,
        files: blocks.files.len(),
        bytes: blocks.total * BLOCK as u64,
    })
}

/// One thread's reads: a random block at a time until `deadline`, each counted in `reads`.
fn read_until(blocks: &Blocks, deadline: Instant, seed: u64, reads: &AtomicU64) -> io::Result<()> {
    // An aligned block inside a buffer one block larger: O_DIRECT needs the memory aligned too.
    let mut raw = vec![0u8; 2 * BLOCK];
    let start = raw.as_ptr().align_offset(BLOCK);
    let buf = &mut raw[start..start + BLOCK];
    let mut rng = Rng::new(seed);
    while Instant::now() < deadline {
        let (file, offset) = blocks.locate(rng.below(blocks.total));
        file.read_exact_at(buf, offset)?;
        reads.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// The files opened for direct reads, their whole blocks numbered one after another.
struct Blocks {
    files: Vec<File>,
    /// `ends[i]`: the first block number after file `i`'s.
    ends: Vec<u64>,
    total: u64,
}

impl Blocks {
    fn open(paths: &[PathBuf]) -> io::Result<Self> {
        let (mut files, mut ends, mut total) = (Vec::new(), Vec::new(), 0);
        for path in paths {
            let file =
                File::options().read(true).custom_flags(OFlag::O_DIRECT.bits()).open(path).map_err(|e| {
                    io::Error::new(e.kind(), format!("opening {} for direct reads: {e}", path.display()))
                })?;
            total += file.metadata()?.len() / BLOCK as u64;
            files.push(file);
            ends.push(total);
        }
        Ok(Self { files, ends, total })
    }

    /// The file holding block `n` (< total), and the block's byte offset in it.
    fn locate(&self, n: u64) -> (&File, u64) {
        let i = self.ends.partition_point(|&end| end <= n);
        let first = if i == 0 { 0 } else { self.ends[i - 1] };
        (&self.files[i], (n - first) * BLOCK as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_file_gives_a_positive_rate() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p0000.db"), vec![7u8; 64 * BLOCK]).unwrap();
        std::fs::write(dir.path().join("p0001.db"), vec![9u8; 3 * BLOCK + 100]).unwrap();
        std::fs::write(dir.path().join("p0000.idx"), b"not a data file").unwrap();
        let files = data_files(dir.path()).unwrap();
        assert_eq!(files, [dir.path().join("p0000.db"), dir.path().join("p0001.db")]);
        let ceiling = measure(&files, 2, Duration::from_millis(200)).unwrap();
        assert!(ceiling.reads_per_sec > 0.0, "{ceiling:?}");
        assert_eq!((ceiling.threads, ceiling.files, ceiling.bytes), (2, 2, 67 * BLOCK as u64));
        assert!(ceiling.seconds >= 0.2);
    }

    #[test]
    fn blocks_are_found_in_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = [2, 0, 3]
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let path = dir.path().join(format!("p{i}.db"));
                std::fs::write(&path, vec![0u8; n * BLOCK]).unwrap();
                path
            })
            .collect();
        let blocks = Blocks::open(&paths).unwrap();
        assert_eq!(blocks.total, 5);
        let located: Vec<(usize, u64)> = (0..5)
            .map(|n| {
                let (file, offset) = blocks.locate(n);
                (blocks.files.iter().position(|f| std::ptr::eq(f, file)).unwrap(), offset / BLOCK as u64)
            })
            .collect();
        assert_eq!(located, [(0, 0), (0, 1), (2, 0), (2, 1), (2, 2)]);
        let empty = tempfile::tempdir().unwrap();
        assert!(measure(&data_files(empty.path()).unwrap(), 1, Duration::from_millis(10)).is_err());
    }
}
