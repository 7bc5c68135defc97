//! `shardlite restore`: a new data directory from a backup. Each source has its own module;
//! the flags name the source: `--from BACKUP` ([`backup`]: a directory `shardlite backup`
//! wrote).

mod backup;

use std::path::PathBuf;

/// Flags of `shardlite restore`.
#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// Where the records come from.
    #[command(flatten)]
    pub source: Source,
    /// The new data directory: must not exist, or be empty.
    #[arg(long)]
    pub data: PathBuf,
}

/// Where a restore reads from: exactly one of these.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct Source {
    /// A backup directory written by `shardlite backup`.
    #[arg(long, value_name = "BACKUP")]
    pub from: Option<PathBuf>,
}

/// Runs `shardlite restore`.
pub fn run(args: RestoreArgs) -> anyhow::Result<()> {
    match &args.source {
        Source { from: Some(backup) } => backup::run(backup, &args.data),
        Source { from: None } => anyhow::bail!("give --from BACKUP"),
    }
}
