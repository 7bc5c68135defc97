//! `shardlite serve`'s logs when stderr is not a terminal (a file, journald): no ANSI escape
//! codes, as text or, with `--log-format json`, one JSON object a line; and the access log
//! (`--access-log FILE`), one line per request, kept out of stderr.
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    ffi::OsStr,
    path::Path,
    process::{Command, Stdio},
};

use common::{client, Server, EXE};

/// Starts a server whose stderr goes to `stderr`, at `info`.
async fn start(data: &Path, stderr: &Path, args: &[&str]) -> Server {
    let program = || {
        let mut command = Command::new(EXE);
        command.stderr(Stdio::from(std::fs::File::create(stderr).unwrap()));
        command
    };
    Server::start_from(program, data, args, &[("RUST_LOG", OsStr::new("info"))]).await
}

#[tokio::test]
async fn logs_to_a_file_carry_no_escape_codes_as_text_or_json() {
    let dir = tempfile::tempdir().unwrap();
    let (text_log, json_log) = (dir.path().join("text.log"), dir.path().join("json.log"));
    let server = start(&dir.path().join("text"), &text_log, &["--request-log"]).await;
    client().get(server.at("/kv/6b31")).send().await.unwrap();
    assert!(server.stop().success());
    let text = std::fs::read_to_string(&text_log).unwrap();
    assert!(text.contains("INFO") && text.contains("/kv/6b31"), "{text}");
    assert!(!text.contains('\x1b'), "no escape codes when stderr is a file: {text:?}");

    let server = start(&dir.path().join("json"), &json_log, &["--log-format", "json", "--request-log"]).await;
    client().get(server.at("/kv/6b31")).send().await.unwrap();
    assert!(server.stop().success());
    let json = std::fs::read_to_string(&json_log).unwrap();
    assert!(!json.contains('\x1b'), "{json:?}");
    let lines: Vec<serde_json::Value> = json.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.len() >= 3, "start, request, shutdown: {json}");
    assert!(lines.iter().all(|l| l["level"].is_string() && l["timestamp"].is_string()), "{json}");
    let requests = lines.iter().filter(|l| l["target"] == "shardlite_server::request");
    let request = requests.clone().find(|l| l["fields"]["path"] == "/kv/6b31").unwrap();
    assert_eq!(request["fields"]["status"], 404);
}

#[tokio::test]
async fn the_access_log_gets_the_request_lines_and_stderr_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let (stderr, access) = (dir.path().join("stderr.log"), dir.path().join("access.log"));
    let server = start(&dir.path().join("data"), &stderr, &["--access-log", access.to_str().unwrap()]).await;
    for path in ["/kv/6b31", "/kv/6b32", "/nope"] {
        client().get(server.at(path)).send().await.unwrap();
    }
    assert!(server.stop().success());
    let access = std::fs::read_to_string(&access).unwrap();
    let requests: Vec<&str> = access.lines().filter(|l| l.contains("shardlite_server::request")).collect();
    assert!(requests.iter().any(|l| l.contains("/kv/6b32") && l.contains("status=404")), "{access}");
    assert!(requests.iter().any(|l| l.contains("/nope")), "{access}");
    assert!(!access.contains('\x1b') && !access.contains("shutdown complete"), "only requests: {access}");
    let stderr = std::fs::read_to_string(&stderr).unwrap();
    assert!(stderr.contains("shutdown complete") && !stderr.contains("/kv/6b31"), "{stderr}");
}
