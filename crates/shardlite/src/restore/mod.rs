//! `shardlite restore`: a new data directory from a copy of one. The source is Litestream's
//! replicas (`--from-litestream CONFIG`, [`litestream`]).

mod litestream;

use std::path::PathBuf;

/// Flags of `shardlite restore`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["from_litestream"])))]
pub struct RestoreArgs {
    /// The new data directory: created, or an empty one (anything in it is refused).
    #[arg(long)]
    pub data: PathBuf,
    /// Restore every partition from its Litestream replica, as the config CONFIG (written by
    /// `shardlite litestream-config`) names them; indexes are rebuilt and the check run.
    #[arg(long, value_name = "CONFIG")]
    pub from_litestream: Option<PathBuf>,
    /// With --from-litestream: each partition as it was at T (RFC 3339, e.g.
    /// 2026-11-23T14:00:00Z) instead of its latest replicated state.
    #[arg(long, value_name = "T", requires = "from_litestream")]
    pub timestamp: Option<String>,
    /// The litestream binary (a name is looked up on PATH).
    #[arg(long, value_name = "PATH", env = "SHARDLITE_LITESTREAM", default_value = "litestream")]
    pub litestream_bin: PathBuf,
}

/// Runs `shardlite restore`.
pub fn run(args: RestoreArgs) -> anyhow::Result<()> {
    match &args.from_litestream {
        Some(config) => litestream::run(config, &args.data, args.timestamp.as_deref(), &args.litestream_bin),
        None => anyhow::bail!("give the source: --from-litestream CONFIG"),
    }
}
