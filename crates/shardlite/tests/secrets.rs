//! Secrets of `shardlite serve`, as a child process: tokens from a file or an environment
//! variable never appear on its command line (`/proc/PID/cmdline`, what `ps` shows every user),
//! the token file is re-read on SIGHUP, and a non-loopback address without a token is refused.
#![allow(clippy::unwrap_used)]

mod common;

use std::{
    ffi::OsStr,
    process::Command,
    time::{Duration, Instant},
};

use common::{client, Server, EXE};
use reqwest::StatusCode;

const WRITER: &str = "writer-4c1f9a7e0b2d";
const RELOADED: &str = "reloaded-93be61d0c4aa";
const DASHBOARD: &str = "dashboard-0e8d27f5a9b3";

fn cmdline(server: &Server) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{}/cmdline", server.pid())).unwrap()).replace('\0', " ")
}

async fn status(server: &Server, method: reqwest::Method, path: &str, token: &str) -> StatusCode {
    let request = client().request(method, server.at(path)).bearer_auth(token).body("v");
    request.send().await.unwrap().status()
}

#[tokio::test]
async fn tokens_from_a_file_stay_off_the_command_line_and_are_reloaded_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("write {WRITER}\nmetrics {DASHBOARD}\n")).unwrap();
    let server = Server::start(&dir.path().join("data"), &["--auth-token-file", tokens.to_str().unwrap()]).await;
    let line = cmdline(&server);
    assert!(line.contains("--auth-token-file") && !line.contains(WRITER) && !line.contains(DASHBOARD), "{line}");
    assert_eq!(status(&server, reqwest::Method::PUT, "/kv/6b31", WRITER).await, StatusCode::CREATED);
    assert_eq!(status(&server, reqwest::Method::GET, "/metrics", DASHBOARD).await, StatusCode::OK);
    assert_eq!(status(&server, reqwest::Method::GET, "/metrics", WRITER).await, StatusCode::FORBIDDEN);

    // A new file, then SIGHUP: the new token is served and the old one refused, at once for
    // every new request (no restart).
    std::fs::write(&tokens, format!("write {RELOADED}\n")).unwrap();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.pid()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while status(&server, reqwest::Method::GET, "/kv/6b31", RELOADED).await != StatusCode::OK {
        assert!(Instant::now() < deadline, "the new token was not accepted within 10 s of SIGHUP");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status(&server, reqwest::Method::GET, "/kv/6b31", WRITER).await, StatusCode::UNAUTHORIZED);
    assert_eq!(status(&server, reqwest::Method::GET, "/metrics", DASHBOARD).await, StatusCode::UNAUTHORIZED);
    assert!(server.stop().success(), "SIGHUP must not stop the server");
}

#[tokio::test]
async fn a_token_from_the_environment_stays_off_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let env: [(&str, &OsStr); 1] = [("SHARDLITE_AUTH_TOKEN", OsStr::new(WRITER))];
    let server = Server::start_with_env(&dir.path().join("data"), &[], &env).await;
    assert!(!cmdline(&server).contains(WRITER));
    assert_eq!(status(&server, reqwest::Method::PUT, "/kv/6b31", WRITER).await, StatusCode::CREATED);
    assert_eq!(status(&server, reqwest::Method::GET, "/stats", WRITER).await, StatusCode::OK, "every role");
    assert_eq!(status(&server, reqwest::Method::GET, "/stats", RELOADED).await, StatusCode::UNAUTHORIZED);
}

#[test]
fn a_non_loopback_address_without_a_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(EXE)
        .args(["serve", "--listen", "0.0.0.0:0", "--data"])
        .arg(dir.path().join("data"))
        .env_remove("SHARDLITE_AUTH_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--insecure-no-auth") && stderr.contains("--auth-token-file"), "{stderr}");
    assert!(!dir.path().join("data").exists(), "refused before the directory was created");
}

/// The commands that reach a running server take their token from `--token-file` or
/// `SHARDLITE_AUTH_TOKEN` (never needed on their command line), each needs only the role of its
/// work (`export --url`: `read`), and a refusal names the role the token lacks.
#[tokio::test]
async fn remote_commands_take_a_token_file_and_need_the_least_role() {
    const READER: &str = "reader-5d2e8c1b7a90";
    const ADMIN: &str = "admin-7b3f0e9c2d41";
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("write {WRITER}\nread {READER}\nmetrics {DASHBOARD}\nadmin {ADMIN}\n")).unwrap();
    let server = Server::start(&dir.path().join("data"), &["--auth-token-file", tokens.to_str().unwrap()]).await;
    for i in 0..20 {
        assert_eq!(status(&server, reqwest::Method::PUT, &format!("/kv/6b{i:02x}"), WRITER).await, StatusCode::CREATED);
    }
    let file = |name: &str, token: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{token}\n")).unwrap();
        path
    };
    let (reader, dashboard) = (file("reader", READER), file("dashboard", DASHBOARD));
    let shardlite = |args: &[&str], token_file: Option<&std::path::Path>, env: Option<&str>| {
        let mut command = Command::new(EXE);
        command.args(args).args(["--url", &server.url]).env_remove("SHARDLITE_AUTH_TOKEN");
        if let Some(file) = token_file {
            command.arg("--token-file").arg(file);
        }
        if let Some(token) = env {
            command.env("SHARDLITE_AUTH_TOKEN", token);
        }
        let out = command.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    };

    let (ok, said) = shardlite(&["export", "--format", "csv"], Some(&reader), None);
    assert!(ok, "export --url with a read token: {said}");
    assert_eq!(said.lines().filter(|l| l.starts_with("6b")).count(), 20, "{said}");
    let (ok, said) = shardlite(&["stats", "--json"], Some(&reader), None);
    assert!(!ok && said.contains("403") && said.contains("lacks the `metrics` role"), "{said}");
    let (ok, said) = shardlite(&["stats", "--json"], Some(&dashboard), None);
    assert!(ok, "stats with a metrics token: {said}");
    let (ok, said) = shardlite(&["check"], None, Some(ADMIN));
    assert!(ok && said.contains("clean"), "check with the admin token in the variable: {said}");
    let (ok, said) = shardlite(&["check"], Some(&dashboard), Some(ADMIN));
    assert!(!ok && said.contains("lacks the `admin` role"), "--token-file wins over the variable: {said}");
    let (ok, said) = shardlite(&["compact"], None, None);
    assert!(!ok && said.contains("401") && said.contains("--token-file"), "no token: {said}");
}
