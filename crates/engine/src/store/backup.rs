//! [`Store::backup`]: a backup of the open store, partition after partition, while it serves
//! (the format and the promises: [`crate::backup`]).

use std::{path::Path, time::Instant};

use super::Store;
use crate::{
    backup::{self, BackupManifest, BackupOptions, Destination, FileEntry, Pacer, PartitionEntry, Progress, Summary},
    layout::{Layout, MANIFEST},
    manifest::unix_seconds,
    partition::{sql, writer::Job},
    Error, JournalMode, Result,
};

impl Store {
    /// Writes a backup of every partition into `to` (a new or empty directory), each from a
    /// snapshot its writer takes between two commits, at most `options.max_rate` bytes per
    /// second, reporting to `progress` (which may cancel it). Writes go on meanwhile. On any
    /// failure nothing is left at `to`.
    pub fn backup(&self, to: &Path, options: &BackupOptions, progress: &Progress) -> Result<Summary> {
        if self.config.journal != JournalMode::Wal {
            return Err(Error::Backup(
                "backups need journal = wal: with the rollback journal, a partition's snapshot would hold its \
                 writer up for the whole copy"
                    .into(),
            ));
        }
        let started = Instant::now();
        let destination = Destination::prepare(to)?;
        let estimates: Vec<u64> = self.shared.partitions.iter().map(|p| estimate(p)).collect();
        progress.start(self.manifest.partitions, estimates.iter().sum());
        match self.write_backup(destination.partial(), options, progress, &estimates) {
            Ok(manifest) => {
                let dir = destination.complete()?;
                let report = progress.report();
                let bytes = manifest.bytes();
                tracing::info!(dir = %dir.display(), bytes, records = manifest.records(), "backup written");
                Ok(Summary {
                    dir,
                    manifest,
                    bytes,
                    seconds: started.elapsed().as_secs_f64(),
                    longest_stall_us: report.longest_stall_us,
                })
            }
            Err(err) => {
                destination.abandon();
                Err(err)
            }
        }
    }

    /// Writes every file of the backup into `dir`, its manifest last.
    fn write_backup(
        &self,
        dir: &Path,
        options: &BackupOptions,
        progress: &Progress,
        estimates: &[u64],
    ) -> Result<BackupManifest> {
        let target = Layout::new(dir);
        self.manifest.write(&target.manifest())?;
        let files = vec![FileEntry::of(dir, MANIFEST)?];
        let mut pacer = Pacer::new(options.max_rate, self.log.clone());
        let mut partitions = Vec::with_capacity(self.shared.partitions.len());
        for (partition, estimated) in self.shared.partitions.iter().zip(estimates) {
            let entry = self.backup_partition(partition.id, &target, &mut pacer, progress)?;
            progress.partition_done(*estimated, entry.files.iter().map(|f| f.bytes).sum());
            partitions.push(entry);
        }
        let manifest = BackupManifest {
            format_version: backup::BACKUP_FORMAT_VERSION,
            created_unix: unix_seconds(),
            source: self.layout.dir().display().to_string(),
            files,
            partitions,
        };
        manifest.write(&target)?;
        Ok(manifest)
    }

    /// Copies one partition from a snapshot its writer takes.
    fn backup_partition(
        &self,
        p: u32,
        target: &Layout,
        pacer: &mut Pacer,
        progress: &Progress,
    ) -> Result<PartitionEntry> {
        progress.go_on()?;
        let partition = &self.shared.partitions[p as usize];
        // Most of the WAL into the database now, off the writer: its own checkpoint when it
        // takes the snapshot then only copies what is committed meanwhile.
        let precheckpoint = sql::open_checkpointer(&partition.db_path, &self.config);
        if let Err(err) = precheckpoint.and_then(|conn| partition.checkpoint_passive(&conn)) {
            tracing::warn!(partition = p, %err, "checkpoint before the backup's snapshot failed");
        }
        let conn = Box::new(sql::open_reader(&partition.db_path, &self.config)?);
        let snap = self.shared.control(p, |reply| Job::Snapshot { partition: p, conn, reply })??;
        progress.stalled(snap.stalled);
        let mut files = vec![backup::database(&snap, &target.db(p), pacer, progress)?];
        files.extend(backup::index(&snap, &target.index(p), self.shared.hasher, pacer, progress)?);
        Ok(PartitionEntry { partition: p, records: snap.records, next_id: snap.next_id, files })
    }
}

/// What a partition's files take now: its share of the backup's expected bytes.
fn estimate(partition: &crate::partition::Partition) -> u64 {
    let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len());
    size(&partition.db_path) + partition.index.as_ref().map_or(0, |i| i.sizes().file_bytes)
}
