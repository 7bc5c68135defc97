//! Copying one partition's snapshot into a backup directory: its database as a file when the
//! file alone is the snapshot (the usual case, at the disk's sequential speed, checksummed on
//! the way), else through SQLite's online backup API; either step by step at the backup's
//! pace; and its index file, merged so that it covers exactly the snapshot's records.

use std::{collections::HashSet, fs::File, io::Write, path::Path, time::Duration};

use rusqlite::backup::{Backup, StepResult};

use super::{read_chunks, FileEntry, Pacer, Progress};
use crate::{
    index::{self, entry},
    keyhash::KeyHasher,
    layout,
    partition::{snapshot::Snapshot, sql},
    Error, Result,
};

/// Pages copied per step of the backup API: 4 MiB at 4 KiB pages, so progress and pacing are
/// fine-grained while the per-step overhead stays negligible.
const STEP_PAGES: i32 = 1024;
/// A file copy syncs what it wrote every this many bytes, so that a partition of many gigabytes
/// never leaves them all dirty in the page cache for one flush (which the server's own fsyncs
/// would queue behind). On the 1.6 GB directory measured it changed neither rate.
const SYNC_EVERY: u64 = 64 << 20;

/// Copies the snapshot's database into `path` (a new file), synced; its entry for the manifest.
pub(crate) fn database(snap: &Snapshot, path: &Path, pacer: &mut Pacer, progress: &Progress) -> Result<FileEntry> {
    match snap.file_is_snapshot {
        true => copy_file(&snap.db_path, path, pacer, progress),
        false => through_backup_api(snap, path, pacer, progress),
    }
}

/// Copies the file `from` (unchanging meanwhile) into `to`, computing its crc32c on the way.
fn copy_file(from: &Path, to: &Path, pacer: &mut Pacer, progress: &Progress) -> Result<FileEntry> {
    let mut output = File::create(to).map_err(|e| Error::io(to, &e))?;
    let mut written = 0u64;
    let (bytes, crc) = read_chunks(from, |chunk| {
        progress.go_on()?;
        output.write_all(chunk).map_err(|e| Error::io(to, &e))?;
        written += chunk.len() as u64;
        if written % SYNC_EVERY < chunk.len() as u64 {
            output.sync_data().map_err(|e| Error::io(to, &e))?;
        }
        progress.wrote(chunk.len() as u64);
        pacer.wrote(chunk.len() as u64);
        Ok(())
    })?;
    output.sync_all().map_err(|e| Error::io(to, &e))?;
    let name = to.file_name().unwrap_or_default().to_string_lossy().into_owned();
    Ok(FileEntry::new(name, bytes, crc))
}

/// Copies the snapshot's database into `path` through SQLite's backup API.
fn through_backup_api(snap: &Snapshot, path: &Path, pacer: &mut Pacer, progress: &Progress) -> Result<FileEntry> {
    let page_size = sql::page_size(&snap.conn)?;
    let mut target = sql::open_backup_target(path)?;
    {
        // The backup reads inside the snapshot's open read transaction: every step sees the
        // same moment, however long the copy is paced out.
        let backup = Backup::new(&snap.conn, &mut target)?;
        let mut copied = 0u64;
        loop {
            progress.go_on()?;
            let step = backup.step(STEP_PAGES)?;
            let p = backup.progress();
            let now = (p.pagecount - p.remaining).max(0) as u64;
            let bytes = (now - copied.min(now)) * page_size;
            copied = now;
            progress.wrote(bytes);
            pacer.wrote(bytes);
            match step {
                StepResult::Done => break,
                StepResult::More => {}
                // The target is ours alone and the source is read in a transaction already
                // open: neither can be busy; retried all the same.
                StepResult::Busy | StepResult::Locked => std::thread::sleep(Duration::from_millis(1)),
                _ => return Err(Error::Backup(format!("{}: the backup API stopped unexpectedly", path.display()))),
            }
        }
    }
    target.close().map_err(|(_, e)| Error::from(e))?;
    layout::sync_file(path)?;
    file_entry(path)
}

/// Writes the snapshot's index file at `path`: the index file of the snapshot's moment, plus
/// the snapshot's records above its watermark, less its tombstones, covering every id up to
/// the last one assigned. `None` for a partition without the compact index.
pub(crate) fn index(snap: &Snapshot, path: &Path, hasher: KeyHasher) -> Result<Option<FileEntry>> {
    let Some(file) = &snap.index_file else { return Ok(None) };
    let mut recent = Vec::new();
    sql::scan_keys(&snap.conn, file.header().watermark, |id, key| {
        recent.push(entry(hasher.locate(key).fingerprint, id));
    })?;
    let dead: HashSet<u32> = sql::tombstones(&snap.conn)?.0.into_iter().collect();
    index::write_snapshot(path, file, recent, &dead, snap.next_id - 1)?;
    file_entry(path).map(Some)
}

fn file_entry(path: &Path) -> Result<FileEntry> {
    let (dir, name) = (path.parent().unwrap_or(Path::new(".")), path.file_name().unwrap_or_default());
    FileEntry::of(dir, &name.to_string_lossy())
}
