//! Copying one partition's snapshot into a backup directory: its database as a file when the
//! file alone is the snapshot (the usual case, at the disk's sequential speed, checksummed on
//! the way), else through SQLite's online backup API; either step by step at the backup's
//! pace; and its index file, merged so that it covers exactly the snapshot's records (copied
//! as a file when it alone covers them).

use std::{collections::HashSet, fs::File, io::Write, path::Path, sync::mpsc, time::Duration};

use rusqlite::backup::{Backup, StepResult};

use super::{read_chunks_of, FileEntry, Pacer, Progress};
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
        true => {
            let file = File::open(&snap.db_path).map_err(|e| Error::io(&snap.db_path, &e))?;
            copy_file(&file, &snap.db_path, path, pacer, progress)
        }
        false => through_backup_api(snap, path, pacer, progress),
    }
}

/// Copies the file `from` (open at `from_path`, unchanging meanwhile) into `to`, computing its
/// crc32c on the way. Every [`SYNC_EVERY`] bytes written, a thread of its own syncs the file
/// while the copy goes on reading (the disk reads and writes at once, as it does under `dd`); a
/// sync is asked for only once the one before it finished, so at most twice [`SYNC_EVERY`]
/// bytes are dirty. While the backup yields to durable writes the copy syncs in its own loop
/// instead: when the pacer pauses it to time the commit log's flushes alone, no sync of the
/// backup's may still be running. The last sync, after the last byte, is the copy's own.
fn copy_file(from: &File, from_path: &Path, to: &Path, pacer: &mut Pacer, progress: &Progress) -> Result<FileEntry> {
    let mut output = File::create(to).map_err(|e| Error::io(to, &e))?;
    let behind = output.try_clone().map_err(|e| Error::io(to, &e))?;
    let in_loop = pacer.yields();
    let (bytes, crc) = std::thread::scope(|s| {
        let (ask, asked) = mpsc::sync_channel::<()>(0);
        let syncer = s.spawn(move || asked.iter().try_for_each(|()| behind.sync_data()));
        let mut written = 0u64;
        let copied = read_chunks_of(from, from_path, |chunk| {
            progress.go_on()?;
            output.write_all(chunk).map_err(|e| Error::io(to, &e))?;
            written += chunk.len() as u64;
            if written % SYNC_EVERY < chunk.len() as u64 {
                if in_loop {
                    output.sync_data().map_err(|e| Error::io(to, &e))?;
                } else if ask.send(()).is_err() {
                    // Waits while the sync before is under way; fails once a sync failed (said below).
                    return Err(Error::Backup(format!("{}: syncing it failed", to.display())));
                }
            }
            progress.wrote(chunk.len() as u64);
            pacer.wrote(chunk.len() as u64);
            Ok(())
        });
        drop(ask);
        let synced = syncer.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        synced.map_err(|e| Error::io(to, &e)).and(copied)
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
/// the last one assigned; that file copied as it is when it alone is all that. `None` for a
/// partition without the compact index.
pub(crate) fn index(
    snap: &Snapshot,
    path: &Path,
    hasher: KeyHasher,
    pacer: &mut Pacer,
    progress: &Progress,
) -> Result<Option<FileEntry>> {
    let Some(file) = &snap.index_file else { return Ok(None) };
    let last_id = snap.next_id - 1;
    let dead: HashSet<u32> = sql::tombstones(&snap.conn)?.0.into_iter().collect();
    if let Some(open) = file.open_file().filter(|_| dead.is_empty() && file.header().watermark == last_id) {
        // The file covers every id assigned (so no record is above its watermark) and none is
        // dead: a merge would write the same entries, read and rewritten one by one at a
        // fraction of the disk's speed.
        return copy_file(open, file.path(), path, pacer, progress).map(Some);
    }
    let mut recent = Vec::new();
    sql::scan_keys(&snap.conn, file.header().watermark, |id, key| {
        recent.push(entry(hasher.locate(key).fingerprint, id));
    })?;
    index::write_snapshot(path, file, recent, &dead, last_id)?;
    let written = file_entry(path)?;
    progress.wrote(written.bytes);
    pacer.wrote(written.bytes);
    Ok(Some(written))
}

fn file_entry(path: &Path) -> Result<FileEntry> {
    let (dir, name) = (path.parent().unwrap_or(Path::new(".")), path.file_name().unwrap_or_default());
    FileEntry::of(dir, &name.to_string_lossy())
}
