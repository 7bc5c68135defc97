//! Control groups and memory: what this process may use — the machine's RAM (`MemTotal` of
//! `/proc/meminfo`) and the tightest memory limit of the groups it runs in (a container's
//! limit), cgroup v2 (`memory.max`) or v1 (`memory.limit_in_bytes`), found through
//! `/proc/self/cgroup` and `/proc/self/mountinfo` — and a [`MemoryGroup`] of our own that limits
//! a child process's memory, page cache included.
//!
//! A limit set on a parent group binds its children too, so every group from the process's own
//! up to the hierarchy's mount is read and the smallest limit wins; for the same reason a new
//! group is made below this process's own (v1) or the nearest ancestor that hands the memory
//! controller down (v2, where a group holding processes cannot), never beside a container's.

use std::{
    ffi::OsStr,
    fs, io,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use procfs::{process::Process, Current, Meminfo};

/// v1 writes this (or any value near 2^63) for "no limit".
const V1_UNLIMITED: u64 = 1 << 62;

/// How long a dropped group waits for its last process to be gone before leaving the directory.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(2);

/// The machine's RAM in bytes, if `/proc/meminfo` can be read.
pub fn machine_memory() -> Option<u64> {
    Meminfo::current().ok().map(|m| m.mem_total)
}

/// The tightest memory limit, in bytes, of the control groups this process runs in; `None`
/// when no group limits it (or cgroups cannot be read).
pub fn memory_limit() -> Option<u64> {
    memory_hierarchy()?.dirs.iter().filter_map(|dir| read_limit(dir)).min()
}

/// The two kinds of cgroup hierarchy, which name their memory files differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// One hierarchy per controller (`/sys/fs/cgroup/memory`).
    V1,
    /// The unified hierarchy, memory one of its controllers.
    V2,
}

impl Version {
    fn limit_file(self) -> &'static str {
        match self {
            Self::V1 => "memory.limit_in_bytes",
            Self::V2 => "memory.max",
        }
    }

    /// The limit on memory plus swap (v1) or on swap (v2): set so that nothing escapes to swap.
    fn swap_limit_file(self) -> &'static str {
        match self {
            Self::V1 => "memory.memsw.limit_in_bytes",
            Self::V2 => "memory.swap.max",
        }
    }

    fn peak_file(self) -> &'static str {
        match self {
            Self::V1 => "memory.max_usage_in_bytes",
            Self::V2 => "memory.peak",
        }
    }

    fn current_file(self) -> &'static str {
        match self {
            Self::V1 => "memory.usage_in_bytes",
            Self::V2 => "memory.current",
        }
    }

    /// The file with an `oom_kill N` line.
    fn events_file(self) -> &'static str {
        match self {
            Self::V1 => "memory.oom_control",
            Self::V2 => "memory.events",
        }
    }
}

/// The memory hierarchy this process is in.
struct Hierarchy {
    version: Version,
    /// This process's group, then each ancestor, ending with the hierarchy's mount point.
    dirs: Vec<PathBuf>,
}

/// This process's memory hierarchy: v1's memory controller, or a v2 hierarchy whose root
/// offers the memory controller.
fn memory_hierarchy() -> Option<Hierarchy> {
    let me = Process::myself().ok()?;
    let mounts = me.mountinfo().ok()?;
    me.cgroups().ok()?.into_iter().find_map(|group| {
        let version = if group.hierarchy == 0 { Version::V2 } else { Version::V1 };
        if version == Version::V1 && !group.controllers.iter().any(|c| c == "memory") {
            return None;
        }
        let mount = mounts.iter().find(|m| match version {
            Version::V2 => m.fs_type == "cgroup2" && lists_memory(&m.mount_point.join("cgroup.controllers")),
            Version::V1 => m.fs_type == "cgroup" && m.super_options.contains_key("memory"),
        })?;
        // The group's path is relative to the hierarchy's root; the mount shows it from
        // `mount.root` down (a container sees its own group as the root).
        let relative = Path::new(&group.pathname).strip_prefix(&mount.root).ok()?;
        let mut dir = mount.mount_point.join(relative);
        let mut dirs = vec![dir.clone()];
        while dir != mount.mount_point && dir.pop() {
            dirs.push(dir.clone());
        }
        Some(Hierarchy { version, dirs })
    })
}

/// Whether a `cgroup.controllers` or `cgroup.subtree_control` file lists `memory`.
fn lists_memory(file: &Path) -> bool {
    fs::read_to_string(file).is_ok_and(|text| text.split_whitespace().any(|c| c == "memory"))
}

/// The limit a group directory sets, if any.
fn read_limit(dir: &Path) -> Option<u64> {
    ["memory.max", "memory.limit_in_bytes"]
        .iter()
        .find_map(|file| parse_limit(&fs::read_to_string(dir.join(file)).ok()?))
}

/// A limit file's contents: a byte count, or `max` (v2) or a huge number (v1) for none.
fn parse_limit(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok().filter(|&bytes| bytes < V1_UNLIMITED)
}

/// Why no [`MemoryGroup`] could be made: the caller runs without a limit, and says so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// Neither a v1 memory controller nor a v2 hierarchy offering one.
    #[error("no cgroup memory controller (v1 or v2) is mounted for this process")]
    NoController,
    /// v2: no group from this process's up to the root hands the memory controller down, and
    /// the root would not (`cgroup.subtree_control`).
    #[error("the cgroup v2 hierarchy at {dir} does not hand its memory controller to new groups: {source}")]
    NotDelegated {
        /// The hierarchy's mount point.
        dir: PathBuf,
        /// Why `+memory` could not be written to its `cgroup.subtree_control`.
        source: io::Error,
    },
    /// The group could not be made or limited (not root, a read-only mount).
    #[error("cannot make a memory-limited cgroup in {dir}: {source}")]
    Unwritable {
        /// The directory it was to be made in.
        dir: PathBuf,
        /// What failed.
        source: io::Error,
    },
}

/// A control group of our own with a memory limit that counts the page cache its processes
/// fill, as well as their own memory: a process in it that needs more has its cache pages
/// reclaimed, then is OOM-killed. Removed when dropped (once its processes have ended).
#[derive(Debug)]
pub struct MemoryGroup {
    dir: PathBuf,
    version: Version,
    limit: u64,
}

impl MemoryGroup {
    /// Makes a uniquely named group limited to `limit` bytes (and no swap) in this process's
    /// memory hierarchy.
    pub fn create(limit: u64) -> Result<Self, GroupError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let hierarchy = memory_hierarchy().ok_or(GroupError::NoController)?;
        let parent = parent_for_new_groups(&hierarchy)?;
        let name = format!("shardlite-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = parent.join(name);
        let unwritable = |source| GroupError::Unwritable { dir: parent.clone(), source };
        fs::create_dir(&dir).map_err(unwritable)?;
        // From here on, dropping `group` removes the directory again.
        let group = Self { dir, version: hierarchy.version, limit };
        group.write(group.version.limit_file(), &limit.to_string()).map_err(unwritable)?;
        // Absent without swap accounting; nothing to escape to then.
        let _ = group.write(group.version.swap_limit_file(), &group.swap_limit());
        Ok(group)
    }

    /// The limit, bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The hierarchy it is in.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A command that runs `program` inside this group from its first instruction: a shell
    /// writes its own pid into the group's `cgroup.procs`, then `exec`s the program (same pid),
    /// so nothing the program touches is charged elsewhere. Add the program's arguments to it.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("/bin/sh");
        command.arg("-c").arg(r#"echo $$ > "$0" && exec "$@""#).arg(self.dir.join("cgroup.procs")).arg(program);
        command
    }

    /// The most memory the group has used since it was made, bytes (`None` where the kernel
    /// does not keep it: v2 before Linux 5.19).
    pub fn peak(&self) -> Option<u64> {
        self.read_number(self.version.peak_file())
    }

    /// The memory the group uses now, page cache included, bytes.
    pub fn current(&self) -> Option<u64> {
        self.read_number(self.version.current_file())
    }

    /// Processes of the group the kernel killed for want of memory.
    pub fn oom_kills(&self) -> Option<u64> {
        let text = fs::read_to_string(self.dir.join(self.version.events_file())).ok()?;
        text.lines().find_map(|line| line.strip_prefix("oom_kill ")?.trim().parse().ok())
    }

    fn swap_limit(&self) -> String {
        match self.version {
            Version::V1 => self.limit.to_string(),
            Version::V2 => "0".to_owned(),
        }
    }

    fn write(&self, file: &str, value: &str) -> io::Result<()> {
        fs::write(self.dir.join(file), value)
    }

    fn read_number(&self, file: &str) -> Option<u64> {
        fs::read_to_string(self.dir.join(file)).ok()?.trim().parse().ok()
    }
}

impl Drop for MemoryGroup {
    /// Removes the directory; its last process may still be exiting, so it tries for a while.
    fn drop(&mut self) {
        let deadline = Instant::now() + REMOVE_TIMEOUT;
        while fs::remove_dir(&self.dir).is_err() && self.dir.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Where a new memory group goes: v1, below this process's own group; v2, below the nearest
/// group from this process's up that hands the memory controller to its children, else below
/// the root once it does (`+memory` in its `cgroup.subtree_control`).
fn parent_for_new_groups(hierarchy: &Hierarchy) -> Result<PathBuf, GroupError> {
    let own = hierarchy.dirs.first().ok_or(GroupError::NoController)?;
    if hierarchy.version == Version::V1 {
        return Ok(own.clone());
    }
    if let Some(dir) = hierarchy.dirs.iter().find(|dir| lists_memory(&dir.join("cgroup.subtree_control"))) {
        return Ok(dir.clone());
    }
    let root = hierarchy.dirs.last().ok_or(GroupError::NoController)?;
    fs::write(root.join("cgroup.subtree_control"), "+memory")
        .map_err(|source| GroupError::NotDelegated { dir: root.clone(), source })?;
    Ok(root.clone())
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use nix::sys::signal::Signal;

    use super::*;

    #[test]
    fn limit_files_are_read_as_bytes_or_no_limit() {
        assert_eq!(parse_limit("209715200\n"), Some(200 << 20));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("garbage"), None);
    }

    /// A group of `limit` bytes, or `None` (with the reason printed) where this machine has no
    /// memory controller this process may use.
    fn group_or_skip(limit: u64) -> Option<MemoryGroup> {
        match MemoryGroup::create(limit) {
            Ok(group) => Some(group),
            Err(e) => {
                eprintln!("skipped: {e}");
                None
            }
        }
    }

    #[test]
    fn a_child_in_the_group_gets_no_more_than_the_limit() {
        let Some(group) = group_or_skip(32 << 20) else { return };
        assert!(group.dir().is_dir());
        assert_eq!(fs::read_to_string(group.dir().join(group.version().limit_file())).unwrap().trim(), "33554432");
        // dd allocates its block and fills it: 8 MiB fits...
        let fits = group.command("dd").args(["if=/dev/zero", "of=/dev/null", "bs=8M", "count=4"]).output().unwrap();
        assert!(fits.status.success(), "{}", String::from_utf8_lossy(&fits.stderr));
        let peak = group.peak().unwrap();
        assert!((8 << 20..=32 << 20).contains(&peak), "peak {peak}");
        assert_eq!(group.oom_kills(), Some(0));
        // ...256 MiB does not: the kernel kills it rather than let the group grow.
        let killed = group.command("dd").args(["if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"]).output().unwrap();
        assert_eq!(killed.status.signal(), Some(Signal::SIGKILL as i32), "{killed:?}");
        assert!(group.peak().unwrap() <= 32 << 20);
        assert_eq!(group.oom_kills(), Some(1));
        assert!(group.current().is_some());
        let dir = group.dir().to_owned();
        drop(group);
        assert!(!dir.exists(), "the group is removed once its processes are gone");
    }

    #[test]
    fn groups_are_named_apart() {
        let (Some(a), Some(b)) = (group_or_skip(64 << 20), group_or_skip(64 << 20)) else { return };
        assert_ne!(a.dir(), b.dir());
        assert_eq!(a.dir().parent(), b.dir().parent());
    }
}
