//! Ctrl-C (SIGINT) of the commands that work on a data directory themselves:
//!
//! - `export --data` and `check` stop, close the store in order and leave the directory as they
//!   found it: the manifest byte for byte, no open-session marker (so no new epoch and no
//!   changed tag), no partial output file;
//! - `import` stopped while reading its input leaves nothing (a new directory is removed again);
//!   stopped while applying, it leaves the import pending: `check`, `stats` and `serve` refuse
//!   the directory saying how to finish it, and `--resume` does.
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::BTreeSet,
    io::Write,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use common::EXE;
use nix::sys::signal::{kill, Signal};

/// A data directory of `records` DB-A records in `partitions` partitions, made by `shardlite load`.
fn loaded(dir: &Path, partitions: u32, records: u64) -> PathBuf {
    let data = dir.join("data");
    let (partitions, records) = (partitions.to_string(), records.to_string());
    let args = ["load", "--partitions", &partitions, "--records", &records, "--data"];
    let out = Command::new(EXE).args(args).arg(&data).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    data
}

/// The names in `dir` and the manifest's bytes.
fn state(dir: &Path) -> (BTreeSet<String>, Vec<u8>) {
    let names = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned());
    (names.collect(), std::fs::read(dir.join("shardlite.toml")).unwrap())
}

/// Waits until `path` exists (the child got that far), or the child ended.
fn wait_for(child: &mut Child, path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() && child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "{} did not appear", path.display());
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// SIGINT to `child`, then its output.
fn interrupt(child: Child) -> Output {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    let _ = kill(pid, Signal::SIGINT);
    child.wait_with_output().unwrap()
}

fn spawn(args: &[&str], data: &Path, more: &[&str]) -> Child {
    let mut command = Command::new(EXE);
    command.args(args).arg("--data").arg(data).args(more);
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// An interrupted export (130) or one that finished first (0); either way the directory is as it
/// was, and an interrupted one left no file behind.
#[test]
fn ctrl_c_of_export_and_check_leaves_the_directory_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let data = loaded(dir.path(), 64, 200_000);
    let before = state(&data);
    let marker = data.join("shardlite.open");

    let out = dir.path().join("out.csv");
    let mut export = spawn(&["export", "--out", out.to_str().unwrap()], &data, &[]);
    let partial = dir.path().join("out.csv.partial");
    wait_for(&mut export, &partial);
    let exported = interrupt(export);
    let stderr = String::from_utf8_lossy(&exported.stderr);
    assert_eq!(exported.status.code(), Some(130), "the export ran to its end first: {stderr}");
    assert!(stderr.contains("the export stopped") && stderr.contains("was not written"), "{stderr}");
    assert!(!partial.exists() && !out.exists(), "no partial file, no output");
    assert_eq!(state(&data), before, "the directory as it was, manifest byte for byte");

    let mut check = spawn(&["check"], &data, &[]);
    wait_for(&mut check, &marker);
    let checked = interrupt(check);
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert!(matches!(checked.status.code(), Some(130) | Some(0)), "{stderr}");
    if checked.status.code() == Some(130) {
        assert!(stderr.contains("the check stopped") && stderr.contains("run the check again"), "{stderr}");
    }
    assert_eq!(state(&data), before, "the directory as it was, manifest byte for byte");
}

/// Writes `records` CSV records (keys from `first`) to `input`, until one cannot be written.
fn write_records(input: &mut impl Write, first: u64, records: u64) -> std::io::Result<()> {
    for i in first..first + records {
        writeln!(input, "{},{}", hex::encode(format!("key-{i:08}")), hex::encode(format!("value-{i}")))?;
    }
    input.flush()
}

#[test]
fn ctrl_c_of_import_while_reading_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (data, fifo) = (dir.path().join("new"), dir.path().join("input.csv"));
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let mut import = spawn(&["import", "--format", "csv", "--partitions", "8"], &data, &[fifo.to_str().unwrap()]);
    let mut input = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    write_records(&mut input, 0, 10_000).unwrap();
    wait_for(&mut import, &data.join("import.staging.tmp"));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(import.id()).unwrap());
    kill(pid, Signal::SIGINT).unwrap();
    // More records: the reader hands on a batch, and the import notices the signal (unless it
    // did already, and closed its input).
    let _ = write_records(&mut input, 10_000, 10_000);
    drop(input);
    let out = import.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("nothing was imported"), "{stderr}");
    assert!(!data.exists(), "the directory the import created is gone again");
}

#[test]
fn ctrl_c_of_import_while_applying_leaves_it_pending_until_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let input = dir.path().join("input.csv");
    write_records(&mut std::io::BufWriter::new(std::fs::File::create(&input).unwrap()), 0, 40_000).unwrap();
    let mut import = spawn(&["import", "--format", "csv", "--partitions", "256"], &data, &[input.to_str().unwrap()]);
    wait_for(&mut import, &data.join("import.staging"));
    let out = interrupt(import);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(0) {
        eprintln!("the import finished before the signal; nothing more to see");
        return;
    }
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("the import is pending") && stderr.contains("--resume"), "{stderr}");

    for command in [&["check"][..], &["stats"]] {
        let out = Command::new(EXE).args(command).arg("--data").arg(&data).output().unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success(), "{command:?}: {said}");
        assert!(said.contains("interrupted and is pending") && said.contains("--resume"), "{command:?}: {said}");
    }
    let resumed = Command::new(EXE).args(["import", "--resume", "--data"]).arg(&data).output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let check = common::check(&data);
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success() && said.contains("40000 records"), "{said}");
}
