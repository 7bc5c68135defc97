//! A backup's manifest, `backup.toml`: what the backup holds and how to tell each file is
//! intact. TOML with the manifest's checksum line last (as `shardlite.toml`), written last of
//! all the backup's files; an example: [`BackupManifest`].

use std::{
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::{
    layout::Layout,
    manifest::{checked_body, write_checksummed},
    Error, Result,
};

/// The backup format this build writes and reads.
pub const BACKUP_FORMAT_VERSION: u32 = 1;

/// What a backup holds.
///
/// For example:
///
/// ```toml
/// format_version = 1
/// created_unix = 1767225600        # when the backup finished
/// source = "/srv/shardlite"        # the data directory it was taken from
/// [[files]]                        # files of the whole directory: its manifest
/// name = "shardlite.toml"
/// bytes = 145
/// crc32c = "1c2b9a07"
/// [[partitions]]
/// partition = 0
/// records = 312345                 # live records in its snapshot
/// next_id = 312901                 # the id its writer would have assigned next
/// [[partitions.files]]             # its database and index file
/// name = "p0000.db"
/// ...
/// checksum = "…"                   # crc32c of every byte before this line
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupManifest {
    /// The format of the backup.
    pub format_version: u32,
    /// When the backup finished, Unix seconds.
    pub created_unix: u64,
    /// The data directory it was taken from.
    pub source: String,
    /// Files of the whole directory (its manifest).
    pub files: Vec<FileEntry>,
    /// Each partition, in order.
    pub partitions: Vec<PartitionEntry>,
}

/// One partition of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionEntry {
    /// The partition.
    pub partition: u32,
    /// Live records in its snapshot.
    pub records: u64,
    /// The id its writer would have assigned next.
    pub next_id: u64,
    /// Its database and, with the compact index, its index file.
    pub files: Vec<FileEntry>,
}

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Its name inside the backup directory.
    pub name: String,
    /// Its length.
    pub bytes: u64,
    /// The crc32c of its bytes, 8 hex digits.
    pub crc32c: String,
}

impl BackupManifest {
    /// Every file of the backup, the directory's first.
    pub fn all_files(&self) -> impl Iterator<Item = &FileEntry> {
        self.files.iter().chain(self.partitions.iter().flat_map(|p| p.files.iter()))
    }

    /// Bytes of every file.
    pub fn bytes(&self) -> u64 {
        self.all_files().map(|f| f.bytes).sum()
    }

    /// Records in every partition.
    pub fn records(&self) -> u64 {
        self.partitions.iter().map(|p| p.records).sum()
    }

    /// Writes it (atomically) into the backup directory of `layout`.
    pub fn write(&self, layout: &Layout) -> Result<()> {
        write_checksummed(&layout.backup_manifest(), self)
    }

    /// Reads and verifies the manifest of the backup in `dir`: a missing one is an incomplete
    /// backup, a damaged one is refused, a newer format too.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = Layout::new(dir).backup_manifest();
        let bad = |what: String| Error::Backup(format!("{}: {what}", path.display()));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(bad(
                    "missing: not a complete backup (a backup's manifest is written last, once every file is)".into(),
                ))
            }
            Err(e) => return Err(Error::io(&path, &e)),
        };
        let body = checked_body(&text).map_err(bad)?;
        let manifest: Self = toml::from_str(body).map_err(|e| bad(e.to_string()))?;
        if manifest.format_version > BACKUP_FORMAT_VERSION {
            return Err(bad(format!(
                "backup format {} is newer than this build understands ({BACKUP_FORMAT_VERSION}): upgrade shardlite",
                manifest.format_version
            )));
        }
        Ok(manifest)
    }
}

impl FileEntry {
    /// The entry of the file `name` in `dir`, as it is on disk now.
    pub fn of(dir: &Path, name: &str) -> Result<Self> {
        let (bytes, crc) = checksum(&dir.join(name))?;
        Ok(Self::new(name.to_owned(), bytes, crc))
    }

    /// The entry of a file `name` of `bytes` whose crc32c is `crc`.
    pub fn new(name: String, bytes: u64, crc: u32) -> Self {
        Self { name, bytes, crc32c: hex(crc) }
    }

    /// Refuses `path` unless it has this entry's length and crc32c (`bytes` read and `crc`
    /// computed by the caller).
    pub fn verify(&self, path: &Path, bytes: u64, crc: u32) -> Result<()> {
        let damaged = |what: String| Error::Backup(format!("{}: {what}: the backup is damaged", path.display()));
        if bytes != self.bytes {
            return Err(damaged(format!("{bytes} bytes, the backup's manifest says {}", self.bytes)));
        }
        if hex(crc) != self.crc32c {
            return Err(damaged(format!("crc32c {}, the backup's manifest says {}", hex(crc), self.crc32c)));
        }
        Ok(())
    }

    /// Where the file is in the backup directory `dir`.
    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join(&self.name)
    }
}

/// `(length, crc32c)` of a file, read sequentially.
fn checksum(path: &Path) -> Result<(u64, u32)> {
    read_chunks(path, |_| Ok(()))
}

/// Reads the file `path` from start to end, handing each chunk (4 MiB at most) to `each`;
/// returns its length and crc32c.
pub(crate) fn read_chunks(path: &Path, each: impl FnMut(&[u8]) -> Result<()>) -> Result<(u64, u32)> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, &e))?;
    read_chunks_of(&file, path, each)
}

/// As [`read_chunks`], of the file `file` open at `path`, read by position (its offset, which
/// its clones share, is left alone).
pub(crate) fn read_chunks_of(
    file: &std::fs::File,
    path: &Path,
    mut each: impl FnMut(&[u8]) -> Result<()>,
) -> Result<(u64, u32)> {
    let mut buf = vec![0u8; CHUNK];
    let (mut bytes, mut crc) = (0u64, 0u32);
    loop {
        let n = match file.read_at(&mut buf, bytes) {
            Ok(0) => return Ok((bytes, crc)),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(path, &e)),
        };
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        bytes += n as u64;
        each(&buf[..n])?;
    }
}

/// Bytes read at a time: 4 MiB, as one step of SQLite's backup API in a backup.
const CHUNK: usize = 4 << 20;

fn hex(crc: u32) -> String {
    format!("{crc:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BackupManifest {
        let file = |name: &str| FileEntry { name: name.into(), bytes: 4096, crc32c: "0badf00d".into() };
        BackupManifest {
            format_version: BACKUP_FORMAT_VERSION,
            created_unix: 1,
            source: "/data".into(),
            files: vec![file("shardlite.toml")],
            partitions: vec![PartitionEntry {
                partition: 0,
                records: 3,
                next_id: 5,
                files: vec![file("p0000.db"), file("p0000.idx")],
            }],
        }
    }

    #[test]
    fn round_trips_and_refuses_damage_or_absence() {
        let dir = tempfile::tempdir().unwrap();
        let err = BackupManifest::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("backup.toml") && err.contains("not a complete backup"), "{err}");
        let manifest = sample();
        manifest.write(&Layout::new(dir.path())).unwrap();
        assert_eq!(BackupManifest::read(dir.path()).unwrap(), manifest);
        assert_eq!((manifest.bytes(), manifest.records(), manifest.all_files().count()), (3 * 4096, 3, 3));

        let path = Layout::new(dir.path()).backup_manifest();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("records = 3", "records = 4")).unwrap();
        let err = BackupManifest::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("checksum mismatch"), "{err}");
    }

    #[test]
    fn a_file_must_have_its_length_and_checksum() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"hello").unwrap();
        let entry = FileEntry::of(dir.path(), "f").unwrap();
        assert_eq!((entry.bytes, entry.crc32c.len()), (5, 8));
        let (bytes, crc) = checksum(&entry.path(dir.path())).unwrap();
        entry.verify(Path::new("f"), bytes, crc).unwrap();
        let err = entry.verify(Path::new("f"), bytes, crc ^ 1).unwrap_err().to_string();
        assert!(err.contains("f: crc32c") && err.contains("damaged"), "{err}");
        assert!(entry.verify(Path::new("f"), 4, crc).is_err());
    }
}
