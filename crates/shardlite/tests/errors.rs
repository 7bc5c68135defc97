//! What a user who gets `--data` wrong is told: the fix, not an errno. A file, a folder of other
//! files, a directory another process holds (naming it, and `--url` as the way to reach a
//! running server), a path that does not exist; a start that fails logs no "serving" and no
//! "queued writes committed"; a start logs the version and whether the directory was created or
//! opened.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Output};

use common::{Server, EXE};

fn shardlite(args: &[&str], data: &std::path::Path) -> Output {
    let mut command = Command::new(EXE);
    command.args(args).arg("--data").arg(data).env("RUST_BACKTRACE", "0").env("RUST_LOG", "info");
    command.output().unwrap()
}

fn said(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_wrong_data_directory_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let serve = ["serve", "--listen", "127.0.0.1:0"];

    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let out = shardlite(&serve, &file);
    let text = said(&out);
    assert!(!out.status.success() && text.contains("is a file, not a directory"), "{text}");
    assert!(!text.contains("os error"), "{text}");
    assert!(text.contains("stopped before the storage opened"), "{text}");
    assert!(!text.contains("queued writes committed") && !text.contains(" serving "), "{text}");

    let other = dir.path().join("photos");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("cat.jpg"), "meow").unwrap();
    let out = shardlite(&serve, &other);
    let text = said(&out);
    assert!(!out.status.success() && text.contains("(cat.jpg) and no shardlite.toml"), "{text}");
    assert!(text.contains("not a shardlite data directory"), "{text}");
    let names: Vec<_> = std::fs::read_dir(&other).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["cat.jpg"], "nothing was written into it");

    let missing = dir.path().join("typo");
    for command in [&["check"][..], &["stats"], &["export"]] {
        let out = shardlite(command, &missing);
        let text = said(&out);
        assert!(!out.status.success() && text.contains("does not exist"), "{command:?}: {text}");
    }
}

#[tokio::test]
async fn a_directory_in_use_names_its_holder_and_a_start_says_what_it_opened() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log");
    let logged = |log: &std::path::Path| {
        let log = log.to_owned();
        move || {
            let mut command = Command::new(EXE);
            command.stderr(std::fs::File::create(&log).unwrap());
            command
        }
    };
    let info = [("RUST_LOG", std::ffi::OsStr::new("info"))];
    let server = Server::start_from(logged(&log), &data, &["--partitions", "4"], &info).await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))), "{text}");
    assert!(text.contains("created a new data directory"), "{text}");

    let out = shardlite(&["check"], &data);
    let text = said(&out);
    let holder = format!("shardlite process {}", server.pid());
    assert!(!out.status.success() && text.contains(&holder) && text.contains("--url"), "{text}");
    assert!(server.stop().success());

    let again = Server::start_from(logged(&log), &data, &[], &info).await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("created a new data directory") && text.contains("store opened"), "{text}");
    assert!(again.stop().success());
}
