//! Every command's `--help` shows an example; test-only and tuning flags stay out of `serve
//! --help` (docs/operations.md, "Settings", lists them) and still work; the summaries name every
//! command.
#![allow(clippy::unwrap_used)]

use std::process::Command;

const EXE: &str = env!("CARGO_BIN_EXE_shardlite");

fn help(args: &[&str]) -> String {
    let out = Command::new(EXE).args(args).arg("--help").output().unwrap();
    assert!(out.status.success(), "{args:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_command_has_an_example_and_serve_hides_what_users_need_not_see() {
    let top = help(&[]);
    let commands = [
        "serve",
        "bench",
        "bench-engine",
        "load",
        "import",
        "export",
        "stats",
        "check",
        "compact",
        "backup",
        "litestream-config",
        "restore",
        "cluster",
    ];
    for command in commands {
        assert!(top.contains(&format!("\n  {command} ")), "the top-level help lists {command}: {top}");
        assert!(help(&[command]).contains("Example"), "{command} --help has an example");
    }
    let cluster = help(&["cluster"]);
    assert!(["init", "status", "move", "failover"].iter().all(|c| cluster.contains(&format!("cluster {c}"))));

    let serve = help(&["serve"]);
    for hidden in ["--test-read-pause-ms", "--writer-threads", "--max-linger-us"] {
        assert!(!serve.contains(hidden), "{hidden} is hidden");
    }
    assert!(serve.contains("--data") && serve.contains("--synchronous") && serve.contains("docs/operations.md"));
    // Hidden, not gone: the flag is still taken (here refused for its value, not as unknown).
    let out = Command::new(EXE).args(["serve", "--max-batch", "0", "--data", "/nonexistent/x"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && !stderr.contains("unexpected argument"), "{stderr}");
}
