//! `shardlite restore --from BACKUP --data NEWDIR`: every file of the backup verified against
//! its manifest while copied, a new epoch, the directory renamed into place
//! ([`shardlite_engine::backup::restore`]), with a progress bar.

use std::{path::Path, time::Instant};

use shardlite_engine::backup::{restore, Progress};

use crate::progress;

/// Restores the backup in `from` into `to`.
pub fn run(from: &Path, to: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let progress = Progress::default();
    let bar = progress::bytes("verified and copied", 0);
    let report = || {
        let r = progress.report();
        (r.bytes_done, r.bytes_total)
    };
    let restored = progress::watch(&bar, report, || restore(from, to, &progress));
    let (backup, epoch) = restored?;
    println!(
        "restored {} records in {} partitions ({:.1} MiB, every checksum verified) into {} in {:.1} s; new epoch {epoch}",
        backup.records(),
        backup.partitions.len(),
        backup.bytes() as f64 / 1048576.0,
        to.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
