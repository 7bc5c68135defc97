//! `shardlite import` and `shardlite export` as a user runs them: round trips in every format
//! and encoding, duplicates under each policy, bad input refused with its exact error and the
//! directory left as it was, `--max-errors` with its reject file, and `kill -9` during an
//! import.
#![allow(clippy::unwrap_used)]

use std::{
    collections::BTreeMap,
    ffi::OsStr,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

const EXE: &str = env!("CARGO_BIN_EXE_shardlite");

/// key -> (value, counter).
type Records = BTreeMap<Vec<u8>, (Vec<u8>, u64)>;

fn run(args: &[&OsStr]) -> Output {
    Command::new(EXE).args(args).env("RUST_BACKTRACE", "0").stdin(Stdio::null()).output().unwrap()
}

/// Runs shardlite and returns its standard output; panics if it fails.
fn ok(args: &[&dyn AsRef<OsStr>]) -> String {
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_ref()).collect();
    let out = run(&args);
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs shardlite, which must fail, and returns its standard error.
fn fails(args: &[&dyn AsRef<OsStr>]) -> String {
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_ref()).collect();
    let out = run(&args);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

/// Every record of a directory, through `export --format csv`.
fn records(dir: &Path) -> Records {
    let text = ok(&[&"export", &"--data", &dir, &"--format", &"csv"]);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("key,value,counter"));
    lines
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            (hex::decode(f[0]).unwrap(), (hex::decode(f[1]).unwrap(), f[2].parse().unwrap()))
        })
        .collect()
}

/// A csv file with a header and the counter column.
fn write_csv(path: &Path, records: &[(Vec<u8>, Vec<u8>, Option<u64>)]) {
    let mut text = String::from("key,value,counter\n");
    for (k, v, c) in records {
        let counter = c.map(|c| c.to_string()).unwrap_or_default();
        let line = if c.is_some() {
            format!("{},{},{counter}\n", hex::encode(k), hex::encode(v))
        } else {
            format!("{},{}\n", hex::encode(k), hex::encode(v))
        };
        text.push_str(&line);
    }
    std::fs::write(path, text).unwrap();
}

/// Records with the edge cases: empty values, 1-byte and 1,024-byte keys, the largest value
/// (1 MiB, the default `max_value`), counters given or not.
fn edge_records() -> Vec<(Vec<u8>, Vec<u8>, Option<u64>)> {
    let mut records = vec![
        (vec![0x00], Vec::new(), None),
        (vec![0xff; 1024], b"long key".to_vec(), Some(7)),
        (b"largest".to_vec(), (0..1 << 20).map(|i| (i % 251) as u8).collect(), Some(3)),
        (b"empty".to_vec(), Vec::new(), Some(1)),
    ];
    for i in 0..200u32 {
        records.push((format!("key-{i}").into_bytes(), i.to_le_bytes().repeat(i as usize % 5), Some(u64::from(i) + 1)));
    }
    records
}

fn dir_in(tmp: &tempfile::TempDir, name: &str) -> PathBuf {
    tmp.path().join(name)
}

/// Imports the edge records into a new 4-partition directory.
fn source_dir(tmp: &tempfile::TempDir) -> (PathBuf, Records) {
    let input = dir_in(tmp, "source.csv");
    write_csv(&input, &edge_records());
    let dir = dir_in(tmp, "source");
    ok(&[&"import", &"--data", &dir, &"--partitions", &"4", &input]);
    let expected: Records = edge_records().into_iter().map(|(k, v, c)| (k, (v, c.unwrap_or(1)))).collect();
    assert_eq!(records(&dir), expected);
    (dir, expected)
}

#[test]
fn export_then_import_reproduces_keys_values_and_counters_in_every_format() {
    let tmp = tempfile::tempdir().unwrap();
    let (source, expected) = source_dir(&tmp);
    let cases = [
        ("csv", "hex", "out.csv"),
        ("csv", "base64", "out.csv.gz"),
        ("tsv", "hex", "out.tsv.zst"),
        ("tsv", "base64", "out.tsv"),
        ("jsonl", "hex", "out.jsonl"),
        ("jsonl", "base64", "out.jsonl.zst"),
        ("bin", "hex", "out.bin"),
        ("bin", "hex", "out.bin.gz"),
    ];
    for (n, (format, encoding, name)) in cases.iter().enumerate() {
        let file = tmp.path().join(format!("{n}-{name}"));
        ok(&[&"export", &"--data", &source, &"--format", format, &"--encoding", encoding, &"--out", &file]);
        let copy = dir_in(&tmp, &format!("copy-{n}"));
        // The format from the file's name.
        ok(&[&"import", &"--data", &copy, &"--partitions", &"3", &"--encoding", encoding, &file]);
        assert_eq!(records(&copy), expected, "{format} {encoding} {name}");
    }
}

#[test]
fn standard_input_is_read_with_the_format_given() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = dir_in(&tmp, "d");
    let mut child = Command::new(EXE)
        .args(["import", "--format", "tsv", "--partitions", "2", "--data"])
        .arg(&dir)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"6b\t76\n6c\t\t4\r\n").unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let expected = Records::from([(b"k".to_vec(), (b"v".to_vec(), 1)), (b"l".to_vec(), (Vec::new(), 4))]);
    assert_eq!(records(&dir), expected);
}

#[test]
fn duplicates_follow_the_policy_within_the_input_and_against_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("first.csv");
    write_csv(&first, &[(b"a".to_vec(), b"1".to_vec(), None), (b"b".to_vec(), b"1".to_vec(), Some(5))]);
    // `a` again in the input, `b` present in the directory, `c` new and repeated.
    let second = tmp.path().join("second.csv");
    write_csv(
        &second,
        &[
            (b"a".to_vec(), b"2".to_vec(), None),
            (b"b".to_vec(), b"2".to_vec(), None),
            (b"c".to_vec(), b"1".to_vec(), None),
            (b"c".to_vec(), b"2".to_vec(), Some(9)),
            (b"a".to_vec(), b"3".to_vec(), None),
        ],
    );
    let start = |name: &str| {
        let dir = dir_in(&tmp, name);
        ok(&[&"import", &"--data", &dir, &"--partitions", &"2", &first]);
        dir
    };
    let r = |pairs: &[(&[u8], &[u8], u64)]| -> Records {
        pairs.iter().map(|(k, v, c)| (k.to_vec(), (v.to_vec(), *c))).collect()
    };

    let dir = start("last-wins");
    let out = ok(&[&"import", &"--data", &dir, &second, &"--json"]);
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((summary["inserted"].as_u64(), summary["updated"].as_u64()), (Some(1), Some(4)));
    // Each later record is an update: counter max(old + 1, given).
    assert_eq!(records(&dir), r(&[(b"a", b"3", 3), (b"b", b"2", 6), (b"c", b"2", 9)]));

    let dir = start("keep");
    ok(&[&"import", &"--data", &dir, &second, &"--on-duplicate", &"keep"]);
    assert_eq!(records(&dir), r(&[(b"a", b"1", 1), (b"b", b"1", 5), (b"c", b"1", 1)]));

    let dir = start("error");
    let before = snapshot(&dir);
    let err = fails(&[&"import", &"--data", &dir, &second, &"--on-duplicate", &"error"]);
    let at = second.display();
    assert!(
        err.contains(&format!(
            "{at}: line 2: duplicate key under --on-duplicate error (it is already in the directory)"
        )),
        "{err}"
    );
    assert_eq!(snapshot(&dir), before, "a refused import leaves the directory as it was");
    // Within the input alone.
    let third = tmp.path().join("third.csv");
    write_csv(&third, &[(b"x".to_vec(), b"1".to_vec(), None), (b"x".to_vec(), b"2".to_vec(), None)]);
    let err = fails(&[&"import", &"--data", &dir, &third, &"--on-duplicate", &"error"]);
    let at = third.display();
    assert!(
        err.contains(&format!("{at}: line 3: duplicate key under --on-duplicate error (first at {at}: line 2)")),
        "{err}"
    );
    assert_eq!(snapshot(&dir), before);
    assert!(ok(&[&"check", &"--data", &dir]).starts_with("clean:"));
}

/// The bytes of every file of a directory but its lock.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "shardlite.lock")
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap_or_default()))
        .collect()
}

#[test]
fn bad_input_is_refused_with_where_and_what_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, expected) = source_dir(&tmp);
    let before = snapshot(&dir);
    let long_key = "ab".repeat(1025);
    let mut truncated = b"SHLTKV1\n".to_vec();
    truncated.extend_from_slice(&[1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'k']);
    let mut unterminated = b"SHLTKV1\n".to_vec();
    unterminated.extend_from_slice(&[1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'k', b'v']);
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        (
            "short.csv",
            b"6b,76\n6b6b\n".to_vec(),
            "line 2: expected 2 or 3 fields (key, value, counter), found 1".into(),
        ),
        ("hex.csv", b"6b,7z\n".to_vec(), "line 1: value: bad hex: invalid character 'z' at position 1".into()),
        ("odd.tsv", b"6b7\t76\n".to_vec(), "line 1: key: bad hex: an odd number of digits (3)".into()),
        (
            "long.csv",
            format!("6b,76\n{long_key},76\n").into_bytes(),
            "line 2: key length 1025 is outside 1..=1024 bytes".into(),
        ),
        ("empty-key.csv", b",76\n".to_vec(), "line 1: key length 0 is outside 1..=1024 bytes".into()),
        (
            "header.csv",
            b"key,val\n6b,76\n".to_vec(),
            "line 1: wrong header `key,val`: expected `key,value` or `key,value,counter` (tabs in tsv)".into(),
        ),
        ("counter.csv", b"6b,76,x\n".to_vec(), "line 1: counter `x` is not a whole number".into()),
        ("zero.csv", b"6b,76,0\n".to_vec(), "line 1: import refused: counter 0 is outside 1..=2^63-1".into()),
        (
            "json.jsonl",
            b"{\"key\":\"6b\"}\n".to_vec(),
            "line 1: not a JSON record: missing field `value` at line 1 column 12".into(),
        ),
        (
            "magic.bin",
            b"SHLTKV2\n".to_vec(),
            "byte 0: not a shardlite bin stream: it does not start with `SHLTKV1\\n`".into(),
        ),
        ("truncated.bin", truncated, "byte 8: truncated record: 1 of its 2 key and value bytes".into()),
        ("unterminated.bin", unterminated, "byte 26: the stream ends without its end marker after 1 records".into()),
    ];
    for (name, bytes, what) in cases {
        let input = tmp.path().join(name);
        std::fs::write(&input, bytes).unwrap();
        let err = fails(&[&"import", &"--data", &dir, &input]);
        let expected_line = format!("{}: {what}", input.display());
        assert!(err.lines().any(|l| l.trim() == expected_line), "{name}: expected `{expected_line}` in:\n{err}");
        assert_eq!(snapshot(&dir), before, "{name} changed the directory");
    }
    // A refused import into a new directory leaves no directory.
    let new = dir_in(&tmp, "new");
    fails(&[&"import", &"--data", &new, &tmp.path().join("short.csv")]);
    assert!(!new.exists());
    assert_eq!(records(&dir), expected);
}

#[test]
fn max_errors_skips_bad_records_into_the_reject_file() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.csv");
    std::fs::write(&input, b"6b31,76\nzz,76\n6b32,76\n6b33\n6b34,76\n").unwrap();
    let dir = dir_in(&tmp, "d");
    let rejects = tmp.path().join("rejects.txt");
    let err = fails(&[&"import", &"--data", &dir, &input, &"--max-errors", &"1", &"--rejects", &rejects]);
    assert!(
        err.contains("line 4: expected 2 or 3 fields (key, value, counter), found 1 (bad record 2 of at most 1)"),
        "{err}"
    );
    assert!(!dir.exists());
    ok(&[&"import", &"--data", &dir, &"--partitions", &"2", &input, &"--max-errors", &"2", &"--rejects", &rejects]);
    let at = input.display();
    assert_eq!(
        std::fs::read_to_string(&rejects).unwrap(),
        format!(
            "{at}: line 2: key: bad hex: invalid character 'z' at position 0\n\
             {at}: line 4: expected 2 or 3 fields (key, value, counter), found 1\n"
        )
    );
    assert_eq!(records(&dir).len(), 3);
}

#[test]
fn kill_9_during_an_import_leaves_a_directory_that_checks_clean_and_resumes() {
    kill_9_during_imports(&["--partitions", "16"]);
}

/// As above, with one partition whose share is applied in buckets (a budget of 24 MiB, 8 of
/// them besides the mapped files: buckets of 1 MiB, 2 of them here), so a kill may land between two buckets of a partition.
#[test]
fn kill_9_between_the_buckets_of_a_partition_resumes_with_the_rest() {
    kill_9_during_imports(&["--partitions", "1", "--memory-budget-mib", "24"]);
}

/// Imports 50,000 records, then imports them again (updates), killed with SIGKILL after a few
/// delays: a pending import is refused by `check` and `export` until `--resume` finishes it;
/// then the directory checks clean and every record was updated once.
fn kill_9_during_imports(create: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("big.csv");
    let records_in: Vec<_> =
        (0..50_000u32).map(|i| (i.to_be_bytes().to_vec(), i.to_le_bytes().to_vec(), None)).collect();
    write_csv(&input, &records_in);
    let mut phases = std::collections::BTreeSet::new();
    for (n, delay_ms) in [30u64, 250, 400, 600].into_iter().enumerate() {
        let dir = dir_in(&tmp, &format!("d{n}"));
        let mut first: Vec<&dyn AsRef<OsStr>> = vec![&"import", &"--data", &dir, &input, &"--on-duplicate", &"keep"];
        first.extend(create.iter().map(|a| a as &dyn AsRef<OsStr>));
        ok(&first);
        let before = records(&dir).len();
        let mut second: Vec<&dyn AsRef<OsStr>> = vec![&"import", &"--data", &dir, &input];
        second.extend(create.iter().skip_while(|a| **a != "--memory-budget-mib").map(|a| a as &dyn AsRef<OsStr>));
        let finished = killed_after(&second, delay_ms);
        let pending = dir.join("import.staging").exists();
        let phase = match (finished, pending) {
            (true, _) => "finished",
            (false, true) => "applying",
            (false, false) => "staging",
        };
        phases.insert(phase);
        if pending {
            refused_while_pending(&dir);
            ok(&[&"import", &"--data", &dir, &"--resume"]);
            assert!(!dir.join("import.staging").exists());
        }
        assert!(ok(&[&"check", &"--data", &dir]).starts_with("clean:"));
        assert_eq!(records(&dir).len(), before);
        // Every record was imported once, or twice (--resume finishing the second): never a mix.
        let counters: std::collections::BTreeSet<u64> = records(&dir).values().map(|(_, c)| *c).collect();
        assert_eq!(counters.len(), 1, "{phase}: {counters:?}");
        assert!(phase == "staging" || counters.contains(&2), "{phase}: {counters:?}");
        assert!(!dir.join("import.staging.tmp").exists() || phase == "staging");
    }
    eprintln!("phases hit: {phases:?}");
}

/// A directory holding part of an interrupted import: `check` and `export` refuse it, saying
/// how to finish the import.
fn refused_while_pending(dir: &Path) {
    for command in ["check", "export"] {
        let refused = fails(&[&command, &"--data", &dir]);
        assert!(refused.contains("interrupted and is pending") && refused.contains("--resume"), "{command}: {refused}");
    }
}

/// Runs shardlite, killed with SIGKILL after `delay_ms` unless it finished; whether it did.
fn killed_after(args: &[&dyn AsRef<OsStr>], delay_ms: u64) -> bool {
    let mut child = Command::new(EXE)
        .args(args.iter().map(|a| a.as_ref()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(delay_ms));
    let _ = child.kill();
    child.wait().unwrap().success()
}

/// Partitions that never held a record are built anew (a new file without a WAL, renamed into
/// place whole); the others, and partitions with no share, are applied as before.
#[test]
fn partitions_that_never_held_a_record_are_built_anew() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = dir_in(&tmp, "d");
    let import = |path: &Path, extra: &[&str]| {
        let mut args: Vec<&dyn AsRef<OsStr>> = vec![&"import", &"--data", &dir, &path, &"--json"];
        args.extend(extra.iter().map(|a| a as &dyn AsRef<OsStr>));
        serde_json::from_str::<serde_json::Value>(&ok(&args)).unwrap()
    };
    let one = tmp.path().join("one.csv");
    write_csv(&one, &[(b"first".to_vec(), b"v".to_vec(), None)]);
    let summary = import(&one, &["--partitions", "4"]);
    assert_eq!((summary["partitions"].as_u64(), summary["rebuilt"].as_u64()), (Some(1), Some(1)));
    let many = tmp.path().join("many.csv");
    let input: Vec<_> = (0..1000u32).map(|i| (format!("k{i}").into_bytes(), i.to_le_bytes().to_vec(), None)).collect();
    write_csv(&many, &input);
    let summary = import(&many, &[]);
    assert_eq!((summary["partitions"].as_u64(), summary["rebuilt"].as_u64()), (Some(4), Some(3)));
    assert_eq!(summary["inserted"].as_u64(), Some(1000));
    let mut expected: Records = input.into_iter().map(|(k, v, _)| (k, (v, 1))).collect();
    expected.insert(b"first".to_vec(), (b"v".to_vec(), 1));
    assert_eq!(records(&dir), expected);
    assert!(ok(&[&"check", &"--data", &dir]).starts_with("clean: 4 partitions checked, 1001 records"));
}

/// `big.csv` in `tmp`: 50,000 new keys, and the records an import of it holds.
fn big_input(tmp: &tempfile::TempDir) -> (PathBuf, Records) {
    let input = tmp.path().join("big.csv");
    let written: Vec<_> = (0..50_000u32).map(|i| (i.to_be_bytes().to_vec(), i.to_le_bytes().to_vec(), None)).collect();
    write_csv(&input, &written);
    (input, written.into_iter().map(|(k, v, _)| (k, (v, 1))).collect())
}

/// `kill -9` while a partition is built anew (one partition, so the whole apply is the fast
/// path; both index modes that index keys): the directory checks clean and holds none of the
/// import or all of it, never part, or the import is pending and `--resume` finishes it.
#[test]
fn kill_9_while_a_partition_is_built_anew_leaves_none_of_its_share_or_all() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, expected) = big_input(&tmp);
    let empty = tmp.path().join("empty.csv");
    write_csv(&empty, &[]);
    let mut phases = std::collections::BTreeSet::new();
    for (n, (index, delay_ms)) in
        [("hash", 150u64), ("hash", 300), ("sqlite", 300), ("hash", 450), ("sqlite", 600)].into_iter().enumerate()
    {
        let dir = dir_in(&tmp, &format!("d{n}"));
        ok(&[&"import", &"--data", &dir, &"--partitions", &"1", &"--index", &index, &empty]);
        let finished = killed_after(&[&"import", &"--data", &dir, &input], delay_ms);
        let pending = dir.join("import.staging").exists();
        if pending {
            refused_while_pending(&dir);
            ok(&[&"import", &"--data", &dir, &"--resume"]);
        }
        assert!(ok(&[&"check", &"--data", &dir]).starts_with("clean:"));
        let held = records(&dir);
        phases.insert((finished, pending, held.len()));
        assert!(held.is_empty() || held == expected, "{index}, {delay_ms} ms: {} records", held.len());
        // A kill that left no staging came before the commit point (none of it in) or while the
        // finished import's staging was being removed (all of it in): both allowed above.
        if finished {
            assert_eq!(held, expected);
        }
        if finished || pending {
            assert_eq!(records(&dir), expected);
            assert!(ok(&[&"check", &"--data", &dir]).starts_with("clean: 1 partitions checked, 50000 records"));
        }
    }
    eprintln!("(finished, pending, records) hit: {phases:?}");
}

/// `kill -9` during an import into a new directory (its partitions created by the import, in
/// rollback-journal mode, built anew, the file system synced once at the commit point and once at
/// the end): the directory is not one yet (killed while staging), or it holds none of the import
/// or all of it, or the import is pending (the directory refused until it is finished) and
/// resumes to all of it; every partition then holds its records in WAL mode.
#[test]
fn kill_9_during_an_import_into_a_new_directory_leaves_whole_partitions_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, expected) = big_input(&tmp);
    let mut phases = std::collections::BTreeSet::new();
    for (n, delay_ms) in [100u64, 200, 300, 400, 500, 700].into_iter().enumerate() {
        let dir = dir_in(&tmp, &format!("d{n}"));
        let import: [&dyn AsRef<OsStr>; 6] = [&"import", &"--data", &dir, &"--partitions", &"16", &input];
        let finished = killed_after(&import, delay_ms);
        let pending = dir.join("import.staging").exists();
        let phase = match (finished, pending, dir.join("shardlite.toml").exists()) {
            (true, _, _) => "finished",
            (false, true, _) => "applying",
            (false, false, true) => "committing or done",
            (false, false, false) => "staging",
        };
        phases.insert(phase);
        if pending {
            refused_while_pending(&dir);
            ok(&[&"import", &"--data", &dir, &"--resume"]);
        }
        let held = match phase {
            "staging" => Records::new(),
            _ => {
                assert!(ok(&[&"check", &"--data", &dir]).starts_with("clean: 16 partitions checked"), "{phase}");
                records(&dir)
            }
        };
        assert!(held.iter().all(|(k, v)| expected.get(k) == Some(v)), "{phase}: a record not imported");
        assert!(held.is_empty() || held == expected, "{phase}: {} records", held.len());
        if held.is_empty() {
            ok(&import); // killed before the commit point: the leftover staging is removed, the import runs anew
        }
        assert_eq!(records(&dir), expected, "{phase}");
        assert!(ok(&[&"check", &"--data", &dir]).starts_with("clean: 16 partitions checked, 50000 records"));
        for p in 0..16 {
            let header = std::fs::read(dir.join(format!("p{p:04}.db"))).unwrap();
            assert_eq!(header[18], 2, "{phase}: partition {p} in WAL mode");
        }
    }
    eprintln!("phases hit: {phases:?}");
}

/// A partition's share bigger than the import's bucket (24 MiB budget, 8 besides the mapped files: 1 MiB buckets) is applied
/// bucket by bucket: duplicates within the input and against the directory follow the policy
/// exactly as in one transaction, and `--on-duplicate error` names the input's first duplicate.
#[test]
fn a_share_bigger_than_the_memory_budget_allows_is_applied_in_buckets() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = dir_in(&tmp, "d");
    let key = |i: u32| format!("key-{i:08}").into_bytes();
    let first: Vec<_> = (0..40_000u32).map(|i| (key(i), vec![1; 32], None)).collect();
    write_csv(&tmp.path().join("first.csv"), &first);
    let budget: [&dyn AsRef<OsStr>; 2] = [&"--memory-budget-mib", &"24"];
    let import = |extra: &[&dyn AsRef<OsStr>]| {
        let mut args: Vec<&dyn AsRef<OsStr>> = vec![&"import", &"--data", &dir, &"--partitions", &"1", &"--json"];
        args.extend_from_slice(&budget);
        args.extend_from_slice(extra);
        serde_json::from_str::<serde_json::Value>(&ok(&args)).unwrap()
    };
    let summary = import(&[&tmp.path().join("first.csv")]);
    assert_eq!((summary["partitions"].as_u64(), summary["buckets"].as_u64()), (Some(1), Some(3)));
    // Every third key again (an update), each key of 40,000..60,000 twice (insert, then update).
    let mut second: Vec<_> = (0..40_000u32).step_by(3).map(|i| (key(i), vec![2; 32], None)).collect();
    second.extend((40_000..60_000u32).map(|i| (key(i), vec![3; 32], None)));
    second.extend((40_000..60_000u32).map(|i| (key(i), vec![4; 32], Some(7))));
    write_csv(&tmp.path().join("second.csv"), &second);
    let summary = import(&[&tmp.path().join("second.csv")]);
    assert_eq!((summary["inserted"].as_u64(), summary["updated"].as_u64()), (Some(20_000), Some(13_334 + 20_000)));
    let mut expected: Records = (0..40_000u32).map(|i| (key(i), (vec![1; 32], 1))).collect();
    for i in (0..40_000u32).step_by(3) {
        expected.insert(key(i), (vec![2; 32], 2));
    }
    for i in 40_000..60_000u32 {
        expected.insert(key(i), (vec![4; 32], 7));
    }
    assert_eq!(records(&dir), expected);
    assert!(ok(&[&"check", &"--data", &dir]).starts_with("clean: 1 partitions checked, 60000 records"));

    // Two duplicates in the input, far apart (so in different buckets, most likely): the first is named.
    let mut third: Vec<_> = (100_000..160_000u32).map(|i| (key(i), vec![5; 32], None)).collect();
    third.insert(30_000, (key(100_007), vec![6; 32], None));
    third.push((key(159_000), vec![6; 32], None));
    let path = tmp.path().join("third.csv");
    write_csv(&path, &third);
    let mut args: Vec<&dyn AsRef<OsStr>> = vec![&"import", &"--data", &dir, &path, &"--on-duplicate", &"error"];
    args.extend_from_slice(&budget);
    let err = fails(&args);
    let at = path.display();
    assert!(
        err.contains(&format!("{at}: line 30002: duplicate key under --on-duplicate error (first at {at}: line 9)")),
        "{err}"
    );
    assert_eq!(records(&dir), expected);
}

/// One partition's share is staged in many sub-runs (split by key hash) and read back grouped,
/// yet its records get their ids in input order: an export lists them as the input did.
#[test]
fn a_share_staged_in_subruns_keeps_the_input_order() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = dir_in(&tmp, "d");
    let input = tmp.path().join("in.csv");
    let rows: Vec<_> = (0..5_000u32)
        .map(|i| (format!("k{i}").into_bytes(), i.to_le_bytes().to_vec(), Some(u64::from(i) + 1)))
        .collect();
    write_csv(&input, &rows);
    ok(&[&"import", &"--data", &dir, &"--partitions", &"1", &input]);
    let exported = ok(&[&"export", &"--data", &dir, &"--format", &"csv"]);
    assert_eq!(exported, std::fs::read_to_string(&input).unwrap());
}

#[test]
fn export_into_a_closed_pipe_ends_quietly_and_a_failed_one_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    ok(&[&"load", &"--data", &data, &"--records", &"20000", &"--partitions", &"4"]);
    // `export | head -c 100`: the reader goes away after 100 bytes.
    let mut child = Command::new(EXE)
        .args([OsStr::new("export"), OsStr::new("--data"), data.as_os_str()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 100];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(first.starts_with(b"key,value,counter\n"));

    // A partition that does not exist fails the export after the file was started.
    let file = dir.path().join("all.csv");
    let err = fails(&[&"export", &"--data", &data, &"--partition", &"9", &"--out", &file]);
    assert!(err.contains("--partition 9: the directory has partitions 0..4"), "{err}");
    assert!(!file.exists());
    assert!(!dir.path().join("all.csv.partial").exists());
}

/// The loader and the import size their threads from the CPUs the process may use: its
/// affinity (`taskset`) or its cgroup's quota, never a number fixed in the code.
#[test]
fn the_loader_and_the_import_use_a_thread_per_cpu_they_may_use() {
    let tmp = tempfile::tempdir().unwrap();
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    let input = tmp.path().join("in.csv");
    write_csv(&input, &[(b"k".to_vec(), b"v".to_vec(), None)]);
    for (pinned, expected) in [(false, cpus), (true, 1)] {
        let (load, import) = (dir_in(&tmp, &format!("load-{pinned}")), dir_in(&tmp, &format!("import-{pinned}")));
        let mut commands = [
            vec!["load".into(), "--records".into(), "1000".into(), "--partitions".into(), "4".into()],
            vec!["import".into(), input.clone().into_os_string()],
        ];
        let mut threads = Vec::new();
        for (args, dir) in commands.iter_mut().zip([&load, &import]) {
            args.extend(["--json".into(), "--data".into(), dir.clone().into_os_string()]);
            let mut command = match pinned {
                true => Command::new("taskset"),
                false => Command::new(EXE),
            };
            if pinned {
                command.args(["-c", "0", EXE]);
            }
            let out = command.args(args.iter()).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            threads.push(summary["threads"].as_u64().unwrap());
        }
        assert_eq!(threads, [expected, 2 * expected], "taskset -c 0: {pinned}");
    }
}
