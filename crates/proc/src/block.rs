//! The block device under a path, as sysfs describes it: how many requests its hardware queues
//! take at once (`/sys/dev/block/MAJ:MIN/mq/*/nr_tags`, summed over its queues; a partition's
//! are its disk's). Tmpfs, overlay and other file systems without a block device have none.

use std::{
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

/// Requests the hardware queues of the disk holding `path` take at once, if it has any.
pub fn queue_depth_for_path(path: &Path) -> Option<u32> {
    let dev = fs::metadata(path).ok()?.dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let node = fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    // A partition's directory sits inside its disk's, which has the queues.
    [node.clone(), node.parent().map(Path::to_path_buf).unwrap_or(node)].iter().find_map(|dir| queue_depth(dir))
}

/// The sum of `nr_tags` over the hardware queues under the device directory `dir`.
fn queue_depth(dir: &Path) -> Option<u32> {
    let queues: Vec<PathBuf> = fs::read_dir(dir.join("mq")).ok()?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    let tags = queues.iter().filter_map(|q| fs::read_to_string(q.join("nr_tags")).ok()?.trim().parse::<u32>().ok());
    Some(tags.sum::<u32>()).filter(|&sum| sum > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory on a file system without a block device has no queue depth; one on a disk
    /// (where the machine has one under `/`) has the sum its sysfs queues give.
    #[test]
    fn a_path_on_a_disk_has_its_queues_depth() {
        assert_eq!(queue_depth_for_path(Path::new("/proc")), None);
        assert_eq!(queue_depth_for_path(Path::new("/no/such/path")), None);
        let dev = fs::metadata("/").unwrap().dev();
        let disk = format!("/sys/dev/block/{}:{}", nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
        let Ok(node) = fs::canonicalize(disk) else { return };
        let has_queues = |dir: &Path| dir.join("mq").is_dir();
        if has_queues(&node) || node.parent().is_some_and(has_queues) {
            assert!(queue_depth_for_path(Path::new("/")).is_some_and(|d| d > 0));
        }
    }
}
