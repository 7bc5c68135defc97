//! The memory this process may use: the machine's RAM (`MemTotal` of `/proc/meminfo`) and the
//! tightest memory limit of the control groups it runs in (a container's limit), cgroup v2
//! (`memory.max`) or v1 (`memory.limit_in_bytes`), found through `/proc/self/cgroup` and
//! `/proc/self/mountinfo`. A limit set on a parent group binds its children too, so every group
//! from the process's own up to the hierarchy's mount is read and the smallest limit wins.

use std::path::{Path, PathBuf};

use procfs::{process::Process, Current, Meminfo};

/// v1 writes this (or any value near 2^63) for "no limit".
const V1_UNLIMITED: u64 = 1 << 62;

/// The machine's RAM in bytes, if `/proc/meminfo` can be read.
pub fn machine_memory() -> Option<u64> {
    Meminfo::current().ok().map(|m| m.mem_total)
}

/// The tightest memory limit, in bytes, of the control groups this process runs in; `None`
/// when no group limits it (or cgroups cannot be read).
pub fn memory_limit() -> Option<u64> {
    memory_group_dirs()?.iter().filter_map(|dir| read_limit(dir)).min()
}

/// The directories of this process's memory control group and of each of its ancestors up to
/// the hierarchy's mount point.
fn memory_group_dirs() -> Option<Vec<PathBuf>> {
    let me = Process::myself().ok()?;
    let mounts = me.mountinfo().ok()?;
    for group in me.cgroups().ok()? {
        let v2 = group.hierarchy == 0;
        if !v2 && !group.controllers.iter().any(|c| c == "memory") {
            continue;
        }
        let mount = mounts.iter().find(|m| {
            if v2 {
                m.fs_type == "cgroup2"
            } else {
                m.fs_type == "cgroup" && m.super_options.contains_key("memory")
            }
        })?;
        // The group's path is relative to the hierarchy's root; the mount shows it from
        // `mount.root` down (a container sees its own group as the root).
        let relative = Path::new(&group.pathname).strip_prefix(&mount.root).ok()?;
        let mut dir = mount.mount_point.join(relative);
        let mut dirs = vec![dir.clone()];
        while dir != mount.mount_point && dir.pop() {
            dirs.push(dir.clone());
        }
        return Some(dirs);
    }
    None
}

/// The limit a group directory sets, if any.
fn read_limit(dir: &Path) -> Option<u64> {
    ["memory.max", "memory.limit_in_bytes"]
        .iter()
        .find_map(|file| parse_limit(&std::fs::read_to_string(dir.join(file)).ok()?))
}

/// A limit file's contents: a byte count, or `max` (v2) or a huge number (v1) for none.
fn parse_limit(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok().filter(|&bytes| bytes < V1_UNLIMITED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_files_are_read_as_bytes_or_no_limit() {
        assert_eq!(parse_limit("209715200\n"), Some(200 << 20));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("garbage"), None);
    }
}
