//! Restoring a backup into a new data directory: every file verified against the backup's
//! manifest as it is copied, a new epoch, then the directory renamed into place.

use std::{
    fs::File,
    io::Write,
    path::{Path, PathBuf},
};

use super::{read_chunks, BackupManifest, Destination, FileEntry, Progress};
use crate::{
    layout::{Layout, MANIFEST},
    Error, Manifest, Result,
};

/// Restores the backup in `from` into `to` (which must not exist, or be an empty directory),
/// reporting to `progress`. Refuses an incomplete or damaged backup, naming the file, and then
/// leaves nothing at `to`. Returns the backup's manifest and the restored directory's epoch.
pub fn restore(from: &Path, to: &Path, progress: &Progress) -> Result<(BackupManifest, u64)> {
    let backup = BackupManifest::read(from)?;
    check_complete(&backup, from)?;
    let destination = Destination::prepare(to)?;
    progress.start(backup.partitions.len() as u32, backup.bytes());
    match copy_all(&backup, from, destination.partial(), progress) {
        Ok(epoch) => {
            destination.complete()?;
            Ok((backup, epoch))
        }
        Err(err) => {
            destination.abandon();
            Err(err)
        }
    }
}

/// Refuses a backup whose manifest lacks a partition the directory's manifest has, or a
/// partition's database.
fn check_complete(backup: &BackupManifest, from: &Path) -> Result<()> {
    let incomplete = |what: String| Error::Backup(format!("{}: {what}: the backup is incomplete", from.display()));
    let listed: Vec<u32> = backup.partitions.iter().map(|p| p.partition).collect();
    if listed != (0..listed.len() as u32).collect::<Vec<_>>() {
        return Err(incomplete(format!("its manifest lists partitions {listed:?}")));
    }
    let layout = Layout::new(from);
    for p in &backup.partitions {
        let db = name_of(&layout.db(p.partition));
        if !p.files.iter().any(|f| f.name == db) {
            return Err(incomplete(format!("partition {} has no database file", p.partition)));
        }
    }
    if !backup.files.iter().any(|f| f.name == MANIFEST) {
        return Err(incomplete(format!("its manifest does not list {MANIFEST}")));
    }
    Ok(())
}

fn name_of(path: &Path) -> String {
    path.file_name().unwrap_or_default().to_string_lossy().into_owned()
}

/// Copies and verifies every file into `partial`, then gives the directory a new epoch and
/// checks it is the directory the backup says (its partition count).
fn copy_all(backup: &BackupManifest, from: &Path, partial: &Path, progress: &Progress) -> Result<u64> {
    for file in &backup.files {
        copy_verified(file, from, partial, progress)?;
    }
    for part in &backup.partitions {
        for file in &part.files {
            copy_verified(file, from, partial, progress)?;
        }
        progress.partition_done(0, 0);
    }
    let path = Layout::new(partial).manifest();
    let mut manifest = Manifest::read(&path)?;
    if manifest.partitions as usize != backup.partitions.len() {
        return Err(Error::Backup(format!(
            "{}: the directory has {} partitions, the backup holds {}: the backup is incomplete",
            from.display(),
            manifest.partitions,
            backup.partitions.len()
        )));
    }
    // Versions the original gave after the backup name its epoch: the restored directory must
    // never give them again, to other states.
    manifest.start_epoch();
    manifest.write(&path)?;
    Ok(manifest.epoch)
}

/// Copies one file of the backup into `to`, checking its length and crc32c on the way; synced.
fn copy_verified(entry: &FileEntry, from: &Path, to: &Path, progress: &Progress) -> Result<()> {
    let source = entry.path(from);
    if !source.exists() {
        return Err(Error::Backup(format!("{}: missing: the backup is incomplete", source.display())));
    }
    let target: PathBuf = entry.path(to);
    let mut output = File::create(&target).map_err(|e| Error::io(&target, &e))?;
    let (bytes, crc) = read_chunks(&source, |chunk| {
        output.write_all(chunk).map_err(|e| Error::io(&target, &e))?;
        progress.wrote(chunk.len() as u64);
        Ok(())
    })?;
    entry.verify(&source, bytes, crc)?;
    output.sync_all().map_err(|e| Error::io(&target, &e))
}
