//! Reading the log that `tests/fault/powercut.c` writes: one record per file-system call the
//! server made under the watched directory. The byte layout is documented at the top of the C
//! file; this is its only reader. Several server processes, one after the other, append to the
//! same log: a record names an inode, never a descriptor, so the records of all of them replay
//! as one history.
//!
//! A SIGKILL can cut the log: a record is appended after its call returned, so a thread killed
//! during a call (the kernel finishes it: an `ftruncate` of a WAL takes ~0.15 ms, an `fsync`
//! milliseconds) or just after it leaves a change without a record — about one session in seven
//! did in the runs so far — and one killed in the middle of the append leaves a part of a
//! record. [`repair_tail`] drops such a part, and the test compares what the log says with
//! the directory the killed server left ([`super::disk::Disk::issued`]), appending what the log
//! missed as [`UNRECORDED`] calls ([`append`]) before the next server starts. (A sync without
//! its record makes the model lose more, never less: nothing in the process acted on it.)

use std::{collections::BTreeMap, io::Write as _, path::Path};

/// The call name of a record the test appended: a change the killed server made that its log
/// missed, found by comparing the directory with the log.
pub const UNRECORDED: &str = "unrecorded";

/// Which libc function a record came from (the shim's `C_*` numbers, in order), and last the
/// number the test's own records use ([`UNRECORDED`]).
const CALLS: [&str; 35] = [
    "open",
    "open64",
    "openat",
    "openat64",
    "creat",
    "creat64",
    "write",
    "pwrite",
    "pwrite64",
    "writev",
    "pwritev",
    "pwritev64",
    "pwritev2",
    "pwritev64v2",
    "ftruncate",
    "ftruncate64",
    "truncate",
    "truncate64",
    "fallocate",
    "fallocate64",
    "posix_fallocate",
    "posix_fallocate64",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "remove",
    "fsync",
    "fdatasync",
    "syncfs",
    "sync",
    "sync_file_range",
    "msync",
    UNRECORDED,
];

const HEADER: usize = 56;
const F_CREATED: u8 = 1;
const F_TRUNCATED: u8 = 2;
const F_DIRECTORY: u8 = 4;

/// One recorded call. Times are CLOCK_MONOTONIC nanoseconds, the clock the test's client uses.
#[derive(Debug, Clone)]
pub struct Record {
    /// The libc function called.
    pub call: &'static str,
    /// Just before the real call.
    pub t_start: u64,
    /// Just after it returned (successfully: failed calls are not recorded).
    pub t_end: u64,
    /// The inode the call was about (0 for calls on names or on no file).
    pub ino: u64,
    /// What the call did.
    pub op: Op,
}

/// What a recorded call did.
#[derive(Debug, Clone)]
pub enum Op {
    /// A file (or the directory) was opened.
    Open {
        /// The absolute path opened.
        path: String,
        /// The call created the file.
        created: bool,
        /// The call cut an existing file to zero bytes (`O_TRUNC`).
        truncated: bool,
        /// It is a directory.
        directory: bool,
        /// The open flags.
        flags: i64,
    },
    /// `data` was written at `offset`.
    Write {
        /// Where in the file.
        offset: u64,
        /// The bytes written.
        data: Vec<u8>,
    },
    /// The file's size was set (truncated or extended with zeros).
    Size(u64),
    /// A name was moved; `flags` are renameat2's (0 for the others).
    Rename {
        /// The old absolute path.
        from: String,
        /// The new absolute path.
        to: String,
        /// renameat2's flags.
        flags: i64,
    },
    /// A name was removed.
    Unlink(String),
    /// A sync call returned successfully (`call` says which kind).
    Sync {
        /// The descriptor synced was the directory.
        directory: bool,
    },
}

/// Every record of the log at `path`, in the order they were appended.
pub fn read(path: &Path) -> Vec<Record> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading the power-cut log {}: {e}", path.display()));
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).expect("paths under the data directory are UTF-8");
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let end = at + 4 + u32_at(at) as usize;
        assert!(end <= bytes.len() && end >= at + HEADER, "a truncated record at byte {at} of {}", path.display());
        let (kind, call, flags) = (bytes[at + 4], bytes[at + 5], bytes[at + 6]);
        let a = u64_at(at + 32) as i64;
        let (n1, n2) = (u32_at(at + 48) as usize, u32_at(at + 52) as usize);
        let first = &bytes[at + HEADER..at + HEADER + n1];
        let second = &bytes[at + HEADER + n1..at + HEADER + n1 + n2];
        assert_eq!(at + HEADER + n1 + n2, end, "record lengths disagree at byte {at}");
        let op = match kind {
            1 => Op::Open {
                path: text(first),
                created: flags & F_CREATED != 0,
                truncated: flags & F_TRUNCATED != 0,
                directory: flags & F_DIRECTORY != 0,
                flags: a,
            },
            2 => Op::Write { offset: a as u64, data: second.to_vec() },
            3 => Op::Size(a as u64),
            4 => Op::Rename { from: text(first), to: text(second), flags: a },
            5 => Op::Unlink(text(first)),
            6 => Op::Sync { directory: flags & F_DIRECTORY != 0 },
            other => panic!("unknown record kind {other} at byte {at}"),
        };
        let call = CALLS.get(usize::from(call).wrapping_sub(1)).copied().unwrap_or("?");
        records.push(Record { call, t_start: u64_at(at + 8), t_end: u64_at(at + 16), ino: u64_at(at + 24), op });
        at = end;
    }
    records
}

/// Drops a part of a record at the end of the log at `path` (the server was killed while it was
/// appending it); returns how many bytes were dropped.
pub fn repair_tail(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading the power-cut log {}: {e}", path.display()));
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let end = at + 4 + u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        if end > bytes.len() {
            break;
        }
        at = end;
    }
    let dropped = (bytes.len() - at) as u64;
    if dropped > 0 {
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.set_len(at as u64).unwrap();
    }
    dropped
}

/// Appends `records` to the log at `path`, as [`UNRECORDED`] calls.
pub fn append(path: &Path, records: &[Record]) {
    let call = CALLS.iter().position(|c| *c == UNRECORDED).expect("listed") as u8 + 1;
    let mut bytes = Vec::new();
    for r in records {
        let empty: &[u8] = &[];
        let (kind, flags, a, first, second): (u8, u8, u64, &[u8], &[u8]) = match &r.op {
            Op::Open { path, created, truncated, directory, flags } => {
                let bit = |set: bool, flag: u8| if set { flag } else { 0 };
                let f = bit(*created, F_CREATED) | bit(*truncated, F_TRUNCATED) | bit(*directory, F_DIRECTORY);
                (1, f, *flags as u64, path.as_bytes(), empty)
            }
            Op::Write { offset, data } => (2, 0, *offset, empty, data),
            Op::Size(size) => (3, 0, *size, empty, empty),
            Op::Rename { from, to, flags } => (4, 0, *flags as u64, from.as_bytes(), to.as_bytes()),
            Op::Unlink(path) => (5, 0, 0, path.as_bytes(), empty),
            Op::Sync { directory } => (6, if *directory { F_DIRECTORY } else { 0 }, 0, empty, empty),
        };
        bytes.extend_from_slice(&((HEADER - 4 + first.len() + second.len()) as u32).to_le_bytes());
        bytes.extend_from_slice(&[kind, call, flags, 0]);
        for field in [r.t_start, r.t_end, r.ino, a, 0] {
            bytes.extend_from_slice(&field.to_le_bytes());
        }
        bytes.extend_from_slice(&(first.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&(second.len() as u32).to_le_bytes());
        bytes.extend_from_slice(first);
        bytes.extend_from_slice(second);
    }
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(&bytes).unwrap();
}

/// How many records each libc function produced: what the server really calls.
pub fn census(records: &[Record]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for r in records {
        *counts.entry(r.call).or_default() += 1;
    }
    counts
}
