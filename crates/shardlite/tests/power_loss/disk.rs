//! A disk that can lose power: replays the shim's log ([`super::log`]) up to a moment T and
//! builds one directory that a power cut at T could have left behind. It knows what was
//! durable at each file's last sync, and lets the rest survive or vanish at random.
//!
//! The model (ext4 with `data=ordered`, the file system of the project's machine, erring on the
//! side of losing more):
//!
//! - **Issued, completed.** A call is *issued before T* if it started before T; a sync
//!   *completed before T* if it returned (successfully) before T. A sync covers the calls that
//!   had returned before it started: a call still running when the sync began may or may not be
//!   in it, so it stays unsynced.
//! - **File contents.** A file's durable content is its content as of the last completed
//!   `fsync` or `fdatasync` of that file (both flush its data and its size), or of a completed
//!   `syncfs`/`sync`. On top of it, each write issued after that and before T is split at
//!   512-byte sector boundaries (absolute file offsets) and each piece is kept or dropped
//!   independently: torn and reordered writes. Kept pieces are applied in issue order. A piece is
//!   the old bytes or the new ones, never garbage, and bytes outside a write never change: the
//!   "powersafe overwrite" that SQLite assumes by default. A kept piece beyond the end extends
//!   the file, the gap reading as zeros. Size changes (`ftruncate`, `O_TRUNC`, a growing
//!   `fallocate`) are kept or dropped independently too, in issue order among the writes.
//! - **Names.** Creating, renaming and unlinking are operations on the directory. They are
//!   durable once an `fsync`/`fdatasync` of the directory, or a `syncfs`/`sync`, that started
//!   after they returned has completed. Of the ones not yet durable, a random *prefix* (in issue
//!   order) survives: ext4 journals them in order. An fsync of a file does not make its name
//!   durable here (on ext4 it usually does, as a side effect of the journal commit; nothing
//!   should rely on that). A file whose creation is lost is gone with its content; a rename
//!   that is lost leaves both files as they were under their old names.
//! - **Several processes.** A log may hold the calls of several server sessions on the
//!   directory, one after the other (killed or stopped, then restarted). Records name inodes,
//!   not descriptors, so they replay as one history: what a killed session left unsynced stays
//!   pending, as it stays in the page cache for the next session to read, until a sync of any
//!   later session covers it.
//! - **Not barriers.** `sync_file_range` (writes pages back, flushes neither the disk's cache
//!   nor metadata) and `msync` are recorded but make nothing durable.
//! - **Left out.** SQLite's `*-shm` wal-index files are written through shared memory, never
//!   synced, and rebuilt by SQLite from the WAL on first open: they are garbage after a power
//!   cut and are left out of the rebuilt directory. The test checks that the server has no
//!   other shared writable mapping of a file in the directory.
//! - **Not modelled** (the server does none of it; the replay refuses a log that does):
//!   subdirectories, files existing before the recording began (other than the directory
//!   itself), renames into or out of the directory, `renameat2` flags other than
//!   `RENAME_NOREPLACE`, `O_TMPFILE`.
//!
//! Each cut chooses how much of what is not durable survives ([`Survival`]): nothing (the
//! minimum the contract allows), everything issued (what a `kill -9` at T would leave), or each
//! piece with a random probability.

use std::collections::{BTreeMap, HashMap};

use super::log::{Op, Record};
use crate::common::Rng;

/// Sector size of the torn-write model.
const SECTOR: u64 = 512;
/// Linux's `__O_TMPFILE` open flag: a file without a name, not modelled.
const O_TMPFILE: i64 = 0o20_000_000;
/// renameat2's flag that only refuses to replace an existing name.
const RENAME_NOREPLACE: i64 = 1;

/// How much of what was not durable at the cut survives.
#[derive(Debug, Clone, Copy)]
pub enum Survival {
    /// Only what was durable: every unsynced write and name change is lost.
    Durable,
    /// Everything issued before the cut (as after a process kill).
    Everything,
    /// Each unsynced sector piece and size change with this probability (per million); a
    /// uniformly random prefix of the unsynced name changes.
    Random(u64),
}

impl std::fmt::Display for Survival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Survival::Durable => write!(f, "durable only"),
            Survival::Everything => write!(f, "everything issued"),
            Survival::Random(ppm) => write!(f, "each unsynced piece with p={:.2}", *ppm as f64 / 1e6),
        }
    }
}

/// A change to the directory, pending until a directory sync covers it.
#[derive(Debug, Clone)]
enum NameOp {
    Create { name: String, file: usize },
    Rename { from: String, to: String },
    Unlink(String),
}

/// One file (an inode; a name may come and go).
#[derive(Debug, Default)]
struct File {
    /// Its inode number.
    ino: u64,
    /// Its content as of its last completed sync.
    durable: Vec<u8>,
    /// Writes and size changes (record indices) issued since, not covered by a sync.
    pending: Vec<usize>,
}

/// The replay of one log.
pub struct Disk<'a> {
    /// The watched directory, as the shim was given it.
    dir: String,
    records: &'a [Record],
    /// (moment, record): a call at its start, a sync at its end; sorted.
    events: Vec<(u64, usize)>,
    /// Events before this index have been applied.
    next: usize,
    files: Vec<File>,
    /// Which file each inode number is now (numbers are reused after an unlink).
    by_ino: HashMap<u64, usize>,
    dir_ino: Option<u64>,
    durable_names: BTreeMap<String, usize>,
    /// (the call's end, the change), in issue order.
    pending_names: Vec<(u64, NameOp)>,
}

impl<'a> Disk<'a> {
    /// A disk holding the empty directory `dir`, about to replay `records`.
    pub fn new(dir: &str, records: &'a [Record]) -> Self {
        let mut events: Vec<(u64, usize)> = records
            .iter()
            .enumerate()
            .map(|(i, r)| (if matches!(r.op, Op::Sync { .. }) { r.t_end } else { r.t_start }, i))
            .collect();
        events.sort();
        Self {
            dir: dir.trim_end_matches('/').to_owned(),
            records,
            events,
            next: 0,
            files: Vec::new(),
            by_ino: HashMap::new(),
            dir_ino: None,
            durable_names: BTreeMap::new(),
            pending_names: Vec::new(),
        }
    }

    /// Applies every event before `t` (cuts must come in increasing order).
    pub fn advance_to(&mut self, t: u64) {
        while let Some(&(moment, index)) = self.events.get(self.next) {
            if moment >= t {
                break;
            }
            self.apply(index);
            self.next += 1;
        }
    }

    /// The file name of `path` if it is a file in the directory; `None` for the directory
    /// itself or a path elsewhere.
    fn name(&self, path: &str) -> Option<String> {
        let rest = path.strip_prefix(&self.dir)?;
        if rest.is_empty() {
            return None;
        }
        let name = rest.strip_prefix('/')?;
        assert!(!name.contains('/') && !name.is_empty(), "{path}: subdirectories are not modelled");
        Some(name.to_owned())
    }

    fn file_of(&self, record: &Record) -> usize {
        *self.by_ino.get(&record.ino).unwrap_or_else(|| {
            panic!("{} on inode {} that the log never saw created: {record:?}", record.call, record.ino)
        })
    }

    fn apply(&mut self, index: usize) {
        let record = &self.records[index];
        match &record.op {
            Op::Open { path, created, truncated, directory, flags } => {
                assert_eq!(*flags & O_TMPFILE, 0, "O_TMPFILE is not modelled: {path}");
                if *directory {
                    assert_eq!(path.trim_end_matches('/'), self.dir, "{path}: subdirectories are not modelled");
                    self.dir_ino = Some(record.ino);
                    return;
                }
                let name = self.name(path).unwrap_or_else(|| panic!("{path}: not in {}", self.dir));
                if *created {
                    self.files.push(File { ino: record.ino, ..File::default() });
                    let file = self.files.len() - 1;
                    self.by_ino.insert(record.ino, file);
                    self.pending_names.push((record.t_end, NameOp::Create { name, file }));
                } else {
                    let file = self.file_of(record);
                    if *truncated {
                        self.files[file].pending.push(index);
                    }
                }
            }
            Op::Write { .. } | Op::Size(_) => {
                let file = self.file_of(record);
                self.files[file].pending.push(index);
            }
            Op::Rename { from, to, flags } => {
                // RENAME_NOREPLACE renames like rename when it succeeds; others are not modelled.
                assert!(*flags & !RENAME_NOREPLACE == 0, "renameat2 flags are not modelled: {record:?}");
                let (Some(from), Some(to)) = (self.name(from), self.name(to)) else {
                    panic!("renames into or out of the directory are not modelled: {record:?}")
                };
                self.pending_names.push((record.t_end, NameOp::Rename { from, to }));
            }
            Op::Unlink(path) => {
                let name = self.name(path).unwrap_or_else(|| panic!("{path}: removing the directory is not modelled"));
                self.pending_names.push((record.t_end, NameOp::Unlink(name)));
            }
            Op::Sync { directory } => match record.call {
                "fsync" | "fdatasync" if *directory || Some(record.ino) == self.dir_ino => {
                    self.sync_names(record.t_start);
                }
                "fsync" | "fdatasync" => {
                    let file = self.file_of(record);
                    self.sync_file(file, record.t_start);
                }
                "syncfs" | "sync" => {
                    for file in 0..self.files.len() {
                        self.sync_file(file, record.t_start);
                    }
                    self.sync_names(record.t_start);
                }
                // sync_file_range, msync: recorded, no barrier.
                _ => {}
            },
        }
    }

    /// Makes durable the file's pending calls that returned before `started`.
    fn sync_file(&mut self, file: usize, started: u64) {
        let pending = std::mem::take(&mut self.files[file].pending);
        let (covered, rest): (Vec<usize>, Vec<usize>) =
            pending.into_iter().partition(|&i| self.records[i].t_end <= started);
        for i in covered {
            apply_op(&mut self.files[file].durable, &self.records[i], &mut |_| true);
        }
        self.files[file].pending = rest;
    }

    /// Makes durable the name changes that returned before `started`.
    fn sync_names(&mut self, started: u64) {
        let pending = std::mem::take(&mut self.pending_names);
        let (covered, rest): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(end, _)| *end <= started);
        for (_, op) in covered {
            apply_name(&mut self.durable_names, op);
        }
        self.pending_names = rest;
    }

    /// The directory as a power cut now could leave it: file name -> content (`*-shm` left out).
    pub fn crash(&self, rng: &mut Rng, survival: Survival) -> BTreeMap<String, Vec<u8>> {
        let keep = |rng: &mut Rng| match survival {
            Survival::Durable => false,
            Survival::Everything => true,
            Survival::Random(ppm) => rng.below(1_000_000) < ppm,
        };
        let mut names = self.durable_names.clone();
        let surviving = match survival {
            Survival::Durable => 0,
            Survival::Everything => self.pending_names.len(),
            Survival::Random(_) => rng.below(self.pending_names.len() as u64 + 1) as usize,
        };
        for (_, op) in &self.pending_names[..surviving] {
            apply_name(&mut names, op.clone());
        }
        self.contents(names, &mut |_| keep(rng)).map(|(name, _, content)| (name, content)).collect()
    }

    /// The directory as the calls issued so far left it in the kernel (what a process kill now
    /// leaves): file name -> (inode, content), `*-shm` left out. The test compares it with the
    /// real directory after each session.
    pub fn issued(&self) -> BTreeMap<String, (u64, Vec<u8>)> {
        let mut names = self.durable_names.clone();
        for (_, op) in &self.pending_names {
            apply_name(&mut names, op.clone());
        }
        self.contents(names, &mut |_| true).map(|(name, ino, content)| (name, (ino, content))).collect()
    }

    /// Each named file (`*-shm` left out) with its inode and its durable content plus the pending
    /// writes `keep` lets through.
    fn contents<'s>(
        &'s self,
        names: BTreeMap<String, usize>,
        keep: &'s mut dyn FnMut(u64) -> bool,
    ) -> impl Iterator<Item = (String, u64, Vec<u8>)> + 's {
        names.into_iter().filter(|(name, _)| !name.ends_with("-shm")).map(move |(name, file)| {
            let mut content = self.files[file].durable.clone();
            for &i in &self.files[file].pending {
                apply_op(&mut content, &self.records[i], keep);
            }
            (name, self.files[file].ino, content)
        })
    }
}

/// Applies a write or size change to `content`; `keep` decides, per sector piece of a write
/// (its offset is the argument) and once for a size change, whether it reached the disk.
fn apply_op(content: &mut Vec<u8>, record: &Record, keep: &mut dyn FnMut(u64) -> bool) {
    match &record.op {
        Op::Write { offset, data } => {
            let end = offset + data.len() as u64;
            let mut at = *offset;
            while at < end {
                let piece_end = end.min((at / SECTOR + 1) * SECTOR);
                if keep(at) {
                    if content.len() < piece_end as usize {
                        content.resize(piece_end as usize, 0);
                    }
                    let from = (at - offset) as usize..(piece_end - offset) as usize;
                    content[at as usize..piece_end as usize].copy_from_slice(&data[from]);
                }
                at = piece_end;
            }
        }
        Op::Size(size) => {
            if keep(0) {
                content.resize(*size as usize, 0);
            }
        }
        // O_TRUNC of an existing file.
        Op::Open { .. } => {
            if keep(0) {
                content.clear();
            }
        }
        other => unreachable!("not a file content change: {other:?}"),
    }
}

fn apply_name(names: &mut BTreeMap<String, usize>, op: NameOp) {
    match op {
        NameOp::Create { name, file } => {
            names.insert(name, file);
        }
        NameOp::Rename { from, to } => {
            let file = names.remove(&from).unwrap_or_else(|| panic!("rename of {from}, which does not exist"));
            names.insert(to, file);
        }
        NameOp::Unlink(name) => {
            names.remove(&name).unwrap_or_else(|| panic!("unlink of {name}, which does not exist"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = "/d";

    /// A record of `call` that ran from `t` to `t + 1`.
    fn at(t: u64, call: &'static str, ino: u64, op: Op) -> Record {
        Record { call, t_start: t, t_end: t + 1, ino, op }
    }

    fn create(t: u64, name: &str, ino: u64) -> Record {
        let path = format!("{DIR}/{name}");
        at(t, "open64", ino, Op::Open { path, created: true, truncated: false, directory: false, flags: 0o100 })
    }

    fn write(t: u64, ino: u64, offset: u64, data: &[u8]) -> Record {
        at(t, "pwrite64", ino, Op::Write { offset, data: data.to_vec() })
    }

    fn fsync(t: u64, ino: u64) -> Record {
        at(t, "fsync", ino, Op::Sync { directory: false })
    }

    fn dir_fsync(t: u64) -> Record {
        at(t, "fsync", 1, Op::Sync { directory: true })
    }

    fn crash(records: &[Record], t: u64, survival: Survival, seed: u64) -> BTreeMap<String, Vec<u8>> {
        let mut disk = Disk::new(DIR, records);
        disk.advance_to(t);
        disk.crash(&mut Rng::new(seed), survival)
    }

    #[test]
    fn synced_data_survives_and_unsynced_writes_tear_at_sectors() {
        let a = vec![b'a'; 1024];
        let b = vec![b'b'; 1024];
        let log = [create(10, "f", 7), dir_fsync(20), write(30, 7, 0, &a), fsync(40, 7), write(50, 7, 0, &b)];
        assert_eq!(crash(&log, 100, Survival::Durable, 1)["f"], a);
        assert_eq!(crash(&log, 100, Survival::Everything, 1)["f"], b);
        let mut seen = std::collections::BTreeSet::new();
        for seed in 1..64 {
            let f = &crash(&log, 100, Survival::Random(500_000), seed)["f"];
            assert_eq!(f.len(), 1024);
            assert!(
                f[..512].iter().all(|c| *c == f[0]) && f[512..].iter().all(|c| *c == f[512]),
                "torn inside a sector"
            );
            seen.insert((f[0], f[512]));
        }
        assert_eq!(seen.len(), 4, "each sector survives on its own: {seen:?}");
        // Before the sync completed, the first write was not durable either.
        assert_eq!(crash(&log, 41, Survival::Durable, 1)["f"], b"");
    }

    #[test]
    fn a_sync_covers_only_calls_that_returned_before_it_began() {
        let log = [
            create(10, "f", 7),
            dir_fsync(20),
            Record {
                call: "pwrite64",
                t_start: 30,
                t_end: 45,
                ino: 7,
                op: Op::Write { offset: 0, data: b"x".to_vec() },
            },
            fsync(40, 7),
        ];
        assert_eq!(crash(&log, 100, Survival::Durable, 1)["f"], b"");
    }

    #[test]
    fn names_are_durable_only_after_a_directory_sync() {
        let log = [
            create(10, "f.tmp", 7),
            write(20, 7, 0, b"new"),
            fsync(30, 7),
            at(40, "rename", 0, Op::Rename { from: format!("{DIR}/f.tmp"), to: format!("{DIR}/f"), flags: 0 }),
            dir_fsync(50),
            at(60, "unlink", 0, Op::Unlink(format!("{DIR}/f"))),
        ];
        assert!(crash(&log, 35, Survival::Durable, 1).is_empty(), "the creation was never made durable");
        assert_eq!(crash(&log, 35, Survival::Everything, 1)["f.tmp"], b"new");
        let before_dir_sync = crash(&log, 45, Survival::Durable, 1);
        assert!(before_dir_sync.is_empty(), "{before_dir_sync:?}");
        assert_eq!(crash(&log, 100, Survival::Durable, 1)["f"], b"new", "the unlink is not durable");
        assert!(crash(&log, 100, Survival::Everything, 1).is_empty());
        for seed in 1..32 {
            let names: Vec<String> = crash(&log, 45, Survival::Random(500_000), seed).into_keys().collect();
            assert!(names.is_empty() || names == ["f.tmp"] || names == ["f"], "not a prefix: {names:?}");
        }
    }

    #[test]
    fn syncfs_makes_everything_durable_and_sync_file_range_nothing() {
        let log = [
            create(10, "f", 7),
            write(20, 7, 0, b"abc"),
            at(30, "sync_file_range", 7, Op::Sync { directory: false }),
            at(40, "syncfs", 7, Op::Sync { directory: false }),
        ];
        assert!(crash(&log, 35, Survival::Durable, 1).is_empty());
        assert_eq!(crash(&log, 100, Survival::Durable, 1)["f"], b"abc");
    }

    #[test]
    fn size_changes_survive_or_not_and_shm_files_are_left_out() {
        let log = [
            create(10, "w", 7),
            create(11, "w-shm", 8),
            dir_fsync(20),
            write(30, 7, 0, &[1; 1000]),
            fsync(40, 7),
            at(50, "ftruncate64", 7, Op::Size(10)),
            write(60, 7, 2000, b"z"),
        ];
        let everything = crash(&log, 100, Survival::Everything, 1);
        assert!(!everything.contains_key("w-shm"));
        let w = &everything["w"];
        assert_eq!((w.len(), &w[..10], w[10..2000].iter().all(|c| *c == 0), w[2000]), (2001, &[1; 10][..], true, b'z'));
        assert_eq!(crash(&log, 100, Survival::Durable, 1)["w"], vec![1; 1000]);
    }
}
