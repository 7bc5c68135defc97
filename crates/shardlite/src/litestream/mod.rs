//! Litestream, which streams each partition's WAL to a replica (docs/operations.md,
//! "Continuous replication (Litestream)"): `shardlite litestream-config`, which writes its
//! configuration for a data directory ([`config`]), and [`Litestream`], its binary as
//! `restore --from-litestream` runs it.

pub mod config;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use anyhow::Context;
use shardlite_engine::{layout::Layout, Manifest};

/// The Litestream version this repository is tested with (`.ci/litestream` installs it).
pub const TESTED_VERSION: &str = "v0.5.18";

/// Flags of `shardlite litestream-config`.
#[derive(Debug, clap::Args)]
pub struct LitestreamConfigArgs {
    /// The data directory to replicate (it may be in use by a server).
    #[arg(long)]
    pub data: PathBuf,
    /// Where the replicas go: a local directory, file:///DIR, s3://BUCKET/PREFIX[?endpoint=...], or
    /// any replica URL Litestream takes; partition NNNN goes to <URL>/pNNNN.
    #[arg(long, value_name = "URL")]
    pub replica: String,
    /// Write the config to FILE (written new, synced, renamed) instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// A setting at the top of Litestream's config, KEY=VALUE (a dotted key nests: logging.level=debug).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub global: Vec<String>,
    /// A setting of every database entry, KEY=VALUE (e.g. monitor-interval=1s).
    #[arg(long = "db-set", value_name = "KEY=VALUE")]
    pub db: Vec<String>,
    /// A setting of every replica entry, KEY=VALUE (e.g. sync-interval=1s, access-key-id=...).
    #[arg(long = "replica-set", value_name = "KEY=VALUE")]
    pub replica_settings: Vec<String>,
}

/// Runs `shardlite litestream-config`.
pub fn run_config(args: LitestreamConfigArgs) -> anyhow::Result<()> {
    let dir = std::path::absolute(&args.data).with_context(|| format!("the data directory {}", args.data.display()))?;
    let manifest_path = Layout::new(&dir).manifest();
    let manifest = Manifest::read(&manifest_path)
        .with_context(|| format!("{} is not a shardlite data directory", dir.display()))?;
    let settings = config::Passthrough { global: args.global, db: args.db, replica: args.replica_settings };
    let text = config::render(&dir, &manifest, &config::replica_url(&args.replica)?, &settings)?;
    match &args.out {
        Some(out) => shardlite_engine::layout::replace_file(out, |f| std::io::Write::write_all(f, text.as_bytes()))
            .with_context(|| format!("writing {}", out.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

/// The `litestream` binary.
#[derive(Debug, Clone)]
pub struct Litestream {
    bin: PathBuf,
}

impl Litestream {
    /// The binary at `bin` (a name is looked up on `PATH`), if it runs: its version.
    pub fn find(bin: &Path) -> anyhow::Result<(Self, String)> {
        let this = Self { bin: bin.to_owned() };
        let out = this.run(["version"])?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        anyhow::ensure!(out.status.success(), "`{} version` failed: {}", bin.display(), text(&out));
        Ok((this, version))
    }

    /// Runs it with `args`, its output captured.
    pub fn run<I, S>(&self, args: I) -> anyhow::Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        Command::new(&self.bin).args(args).output().map_err(|err| match err.kind() {
            std::io::ErrorKind::NotFound => anyhow::anyhow!(
                "Litestream not found (`{}`): install it with `go install \
                 github.com/benbjohnson/litestream/cmd/litestream@{TESTED_VERSION}` (or .ci/litestream), or name \
                 it with --litestream-bin / SHARDLITE_LITESTREAM_BIN",
                self.bin.display()
            ),
            _ => anyhow::anyhow!("running {}: {err}", self.bin.display()),
        })
    }
}

/// What a run printed, standard error and output, trimmed.
pub fn text(out: &Output) -> String {
    let mut s = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !stdout.trim().is_empty() {
        s.push_str(if s.is_empty() { "" } else { "\n" });
        s.push_str(stdout.trim());
    }
    s
}
