//! The data directory's layout: the one place that names files (what each is: [`Layout`]), and
//! the one way we replace a file (write new, fsync, rename, fsync the directory:
//! [`replace_file`]), so nothing is ever left half written.

use std::{
    fs::{self, File},
    io::Write,
    path::{Path, PathBuf},
};

use crate::{Error, Result};

/// The manifest's file name.
pub const MANIFEST: &str = "shardlite.toml";

/// Paths inside one data directory.
///
/// ```text
/// DIR/shardlite.toml        manifest (format version, partitions, seed, index mode, checksum)
/// DIR/shardlite.lock        flock'ed while a process has the directory open (crate::dirlock)
/// DIR/shardlite.open        present while the partitions are open: found at open = unclean
/// DIR/p0000.db (-wal, -shm) partition 0's SQLite database
/// DIR/p0000.idx             partition 0's compact hash index (index mode `hash` only)
/// DIR/p0000.idx.tmp         an index being written; removed or renamed into place
/// DIR/commit-NNNNNNNNNNNNNNNN.log  a segment of the commit log (crate::commitlog)
/// DIR/commit.base           each partition's durable log position and next id at the last trim, and the log's end
/// DIR/commit.spare          a segment file kept ready for the next switch
/// DIR/replication.positions where the copies of each owner's log stood at the last clean close
/// DIR/import.staging.tmp/   an import's parsed input, being written (crate::import)
/// DIR/import.staging/       an import's parsed input, complete: being applied, or interrupted
///   import.toml, pNNNN.run  its plan, and each partition's records
///   pNNNN.db                a partition that held no record, being built anew (no WAL)
/// ```
#[derive(Debug, Clone)]
pub struct Layout {
    dir: PathBuf,
}

impl Layout {
    /// The layout of `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The manifest file.
    pub fn manifest(&self) -> PathBuf {
        self.dir.join(MANIFEST)
    }

    /// Whether a data directory is here (its manifest is).
    pub fn exists(&self) -> bool {
        self.manifest().exists()
    }

    /// The lock file held while the directory is open.
    pub fn lock(&self) -> PathBuf {
        self.dir.join("shardlite.lock")
    }

    /// The marker of a session whose partitions are open.
    pub fn open_marker(&self) -> PathBuf {
        self.dir.join("shardlite.open")
    }

    /// Partition `p`'s SQLite database.
    pub fn db(&self, p: u32) -> PathBuf {
        self.dir.join(format!("p{p:04}.db"))
    }

    /// Partition `p`'s write-ahead log.
    pub fn wal(&self, p: u32) -> PathBuf {
        self.dir.join(format!("p{p:04}.db-wal"))
    }

    /// Partition `p`'s wal-index (SQLite's shared-memory file).
    pub fn shm(&self, p: u32) -> PathBuf {
        self.dir.join(format!("p{p:04}.db-shm"))
    }

    /// Partition `p`'s rollback journal (journal mode `delete`, during a transaction).
    pub fn journal(&self, p: u32) -> PathBuf {
        self.dir.join(format!("p{p:04}.db-journal"))
    }

    /// Partition `p`'s compact index file.
    pub fn index(&self, p: u32) -> PathBuf {
        self.dir.join(format!("p{p:04}.idx"))
    }

    /// Segment `seq` of the commit log.
    pub fn log_segment(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("{LOG_PREFIX}{seq:016}{LOG_SUFFIX}"))
    }

    /// A commit log segment file kept ready for the next segment switch.
    pub fn log_spare(&self) -> PathBuf {
        self.dir.join("commit.spare")
    }

    /// The commit log's base file.
    pub fn log_base(&self) -> PathBuf {
        self.dir.join("commit.base")
    }

    /// Where this node's copies of each owner's log stood at the last clean close
    /// (`crate::replication::positions`).
    pub fn replication_positions(&self) -> PathBuf {
        self.dir.join("replication.positions")
    }

    /// An import's parsed input while it is being written.
    pub fn import_staging_tmp(&self) -> PathBuf {
        self.dir.join("import.staging.tmp")
    }

    /// An import's parsed input once complete, until every partition has applied it.
    pub fn import_staging(&self) -> PathBuf {
        self.dir.join("import.staging")
    }

    /// The plan of the import staged in `staging`.
    pub fn import_plan(staging: &Path) -> PathBuf {
        staging.join("import.toml")
    }

    /// Partition `p`'s records of the import staged in `staging`.
    pub fn import_run(staging: &Path, p: u32) -> PathBuf {
        staging.join(format!("p{p:04}.run"))
    }

    /// Sub-run `s` of partition `p`'s records of the import staged in `staging` (a directory of
    /// few partitions stages each share in several: crate::import_runs).
    pub fn import_subrun(staging: &Path, p: u32, s: u32) -> PathBuf {
        staging.join(format!("p{p:04}.s{s:04}.run"))
    }

    /// Bucket `b` of partition `p`'s run, split off it to be applied on its own (scratch: made
    /// again from the run whenever needed).
    pub fn import_bucket(staging: &Path, p: u32, b: u32) -> PathBuf {
        staging.join(format!("p{p:04}.b{b:04}"))
    }

    /// Partition `p`'s database being built anew by the import in `staging`, renamed over
    /// `pNNNN.db` once complete (crate::partition::fresh).
    pub fn import_build(staging: &Path, p: u32) -> PathBuf {
        staging.join(format!("p{p:04}.db"))
    }

    /// A backup's manifest (in a backup directory).
    pub fn backup_manifest(&self) -> PathBuf {
        self.dir.join("backup.toml")
    }

    /// The commit log's segments, `(sequence, path)` in sequence order.
    pub fn log_segments(&self) -> Result<Vec<(u64, PathBuf)>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&self.dir, &e)),
        };
        let mut segments = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.dir, &e))?;
            let name = entry.file_name();
            let seq = name
                .to_str()
                .and_then(|n| n.strip_prefix(LOG_PREFIX))
                .and_then(|n| n.strip_suffix(LOG_SUFFIX))
                .filter(|digits| digits.len() == 16)
                .and_then(|digits| digits.parse::<u64>().ok());
            if let Some(seq) = seq {
                segments.push((seq, entry.path()));
            }
        }
        segments.sort();
        Ok(segments)
    }
}

const LOG_PREFIX: &str = "commit-";
const LOG_SUFFIX: &str = ".log";

/// Replaces `path` with the bytes `write` produces: into `path.tmp`, fsync, rename, fsync the
/// directory. A crash at any moment leaves either the old file or the new one, never a mix.
pub fn replace_file(path: &Path, write: impl FnOnce(&mut File) -> std::io::Result<()>) -> Result<()> {
    let tmp = tmp_path(path);
    let result = (|| {
        let mut file = File::create(&tmp)?;
        write(&mut file)?;
        file.flush()?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        sync_dir(path)
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(path, &e)
    })
}

/// The temporary name a file is written under before it is renamed into place.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// The directory a backup or restore into `dir` is written in before it is renamed to `dir`:
/// `.NAME.partial` beside it, so a half-written one never has the name of a complete one.
pub fn partial_dir(dir: &Path) -> PathBuf {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dir.with_file_name(format!(".{name}.partial"))
}

/// fsyncs `path` if it exists (a WAL that a checkpoint or a close removed holds nothing to
/// sync).
pub fn sync_file(path: &Path) -> Result<()> {
    match File::open(path) {
        Ok(file) => file.sync_all().map_err(|e| Error::io(path, &e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, &e)),
    }
}

/// `syncfs` of the file system holding the directory open as `handle` (at `path`): everything
/// written to it so far is durable, or an error since `handle` was opened is reported. One call
/// instead of an fsync of each file and directory written: the device flushes once.
pub fn sync_filesystem(handle: &File, path: &Path) -> Result<()> {
    nix::unistd::syncfs(handle).map_err(|e| Error::io(path, &std::io::Error::from(e)))
}

/// [`sync_filesystem`] of the file system holding directory `dir`.
pub fn sync_filesystem_of(dir: &Path) -> Result<()> {
    let handle = File::open(dir).map_err(|e| Error::io(dir, &e))?;
    sync_filesystem(&handle, dir)
}

/// fsyncs the directory holding `path`, making a rename or creation in it durable.
pub fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}
