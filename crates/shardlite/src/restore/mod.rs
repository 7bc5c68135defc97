//! `shardlite restore`: a new data directory from a copy of one. Each source has its own module;
//! the flags name the source: `--from BACKUP` ([`backup`]: a directory `shardlite backup`
//! wrote) or `--from-litestream CONFIG` ([`litestream`]: Litestream's replicas).

mod backup;
pub(crate) mod litestream;

use std::path::PathBuf;

/// Flags of `shardlite restore`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shardlite restore --from /backups/today --data /var/lib/shardlite-restored\n  \
                        shardlite restore --from-litestream litestream.yml --data /var/lib/shardlite-restored \\\n      \
                        --timestamp 2026-11-23T14:00:00Z")]
pub struct RestoreArgs {
    /// Where the records come from.
    #[command(flatten)]
    pub source: Source,
    /// The new data directory: created, or an empty one (anything in it is refused).
    #[arg(long)]
    pub data: PathBuf,
    /// With --from-litestream: each partition as it was at T (RFC 3339, e.g.
    /// 2026-11-23T14:00:00Z) instead of its latest replicated state.
    #[arg(long, value_name = "T", requires = "from_litestream")]
    pub timestamp: Option<String>,
    /// With --from-litestream: the litestream binary (a name is looked up on PATH).
    #[arg(long, value_name = "PATH", env = "SHARDLITE_LITESTREAM_BIN", default_value = "litestream")]
    pub litestream_bin: PathBuf,
}

/// Where a restore reads from: exactly one of these.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct Source {
    /// A backup directory written by `shardlite backup`.
    #[arg(long, value_name = "BACKUP")]
    pub from: Option<PathBuf>,
    /// Restore every partition from its Litestream replica, as the config CONFIG (written by
    /// `shardlite litestream-config`) names them; indexes are rebuilt and the check run.
    #[arg(long, value_name = "CONFIG")]
    pub from_litestream: Option<PathBuf>,
}

/// Runs `shardlite restore`.
pub fn run(args: RestoreArgs) -> anyhow::Result<()> {
    match &args.source {
        Source { from: Some(backup), .. } => backup::run(backup, &args.data),
        Source { from_litestream: Some(config), .. } => {
            litestream::run(config, &args.data, args.timestamp.as_deref(), &args.litestream_bin)
        }
        Source { from: None, from_litestream: None } => {
            anyhow::bail!("give the source: --from BACKUP or --from-litestream CONFIG")
        }
    }
}
