//! The LD_PRELOAD shim that records what `shardlite serve` does to its files
//! (`tests/fault/powercut.c`), built for the test, and the clock its records share. The rest of
//! the simulation: the reader of its log (`log`), the disk that rebuilds the directory a power
//! cut at any moment could leave (`disk`, which documents the model), and what the clients know
//! of each key (`history`).

use std::{path::Path, process::Command};

/// Compiles the shim into `dir`; `None` if there is no C compiler.
pub fn build_shim(dir: &Path) -> Option<std::path::PathBuf> {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fault/powercut.c");
    let out = dir.join("powercut.so");
    let built = Command::new("cc").args(["-shared", "-fPIC", "-O1", "-o"]).arg(&out).arg(source).arg("-ldl").status();
    built.is_ok_and(|s| s.success()).then_some(out)
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of the shim's records, shared by every process.
pub fn now() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

#[cfg(test)]
mod tests {
    use crate::log::{self, Op};

    /// The shim in a process other than the server (a shell, coreutils): it records calls on
    /// files in the directory, through descriptors it saw opened and ones it did not (the
    /// shell writes through a dup), and nothing elsewhere.
    #[test]
    fn the_shim_records_what_a_process_does_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let Some(shim) = super::build_shim(dir.path()) else {
            eprintln!("skipped: no C compiler (cc) to build the power-cut shim");
            return;
        };
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let data = root.join("data");
        std::fs::create_dir(&data).unwrap();
        let log_path = root.join("log");
        // Paths spelled in other ways ("..", "./", "//") name the same files.
        let script = r#"printf abc > "$D/f" && mv "$D/f" "$D/g" && sync && rm "$D/g" && printf x > "$D/../elsewhere" &&
                        cd "$D" && printf y > .//h && cd / && printf z > "/$D/./i""#;
        let status = std::process::Command::new("sh")
            .args(["-c", script])
            .env("D", &data)
            .env("LD_PRELOAD", &shim)
            .env("SHARDLITE_POWERCUT_DIR", &data)
            .env("SHARDLITE_POWERCUT_LOG", &log_path)
            .status()
            .unwrap();
        assert!(status.success());
        let records = log::read(&log_path);
        let path = |name: &str| data.join(name).to_str().unwrap().to_owned();
        let created =
            records.iter().find(|r| matches!(&r.op, Op::Open { path: p, created: true, .. } if *p == path("f")));
        let ino = created.unwrap_or_else(|| panic!("no creation of f in {records:?}")).ino;
        assert!(
            records.iter().any(|r| r.ino == ino && matches!(&r.op, Op::Write { offset: 0, data } if data == b"abc")),
            "{records:?}"
        );
        assert!(records
            .iter()
            .any(|r| matches!(&r.op, Op::Rename { from, to, .. } if *from == path("f") && *to == path("g"))));
        assert!(records.iter().any(|r| r.call == "sync" && matches!(r.op, Op::Sync { .. })));
        assert!(records.iter().any(|r| matches!(&r.op, Op::Unlink(p) if *p == path("g"))));
        assert!(records.iter().all(|r| r.t_start <= r.t_end), "{records:?}");
        assert!(!format!("{records:?}").contains("elsewhere"), "{records:?}");
        assert!(!records.iter().any(|r| matches!(&r.op, Op::Write { data, .. } if data == b"x")), "{records:?}");
        for (name, data) in [("h", b"y"), ("i", b"z")] {
            let opened = records.iter().find(|r| matches!(&r.op, Op::Open { path: p, .. } if *p == path(name)));
            let ino = opened.unwrap_or_else(|| panic!("no open of {name} in {records:?}")).ino;
            assert!(records.iter().any(|r| r.ino == ino && matches!(&r.op, Op::Write { data: d, .. } if d == data)));
        }
    }
}
