//! `shardlite cluster copies --copies R [--acks W]`: changes how many copies each partition has,
//! and how many must hold a write before it is answered, in one etcd transaction
//! (docs/cluster.md, "Replicas"). New copies are named stale: their owners bring them up to date
//! from snapshots while writes go on, and they count for no write until then; `acks` may not
//! exceed the copies up to date, so raising both is two steps.

use super::{etcd::Etcd, runtime};

/// `shardlite cluster copies`.
#[derive(Debug, clap::Args)]
pub struct CopiesArgs {
    #[command(flatten)]
    etcd: super::etcd::EtcdOptions,
    /// Copies of each partition: its owner and R - 1 replicas on the nodes owning partitions
    /// (the first after the owner in node id order, wrapping round, that hold none of it).
    #[arg(long, value_name = "R")]
    copies: u32,
    /// How many copies must hold a write before it is answered [default: as now, at most R];
    /// at most the copies up to date now.
    #[arg(long, value_name = "W")]
    acks: Option<u32>,
}

/// Runs `shardlite cluster copies`.
pub fn run(args: &CopiesArgs) -> anyhow::Result<()> {
    let view = runtime()?.block_on(async {
        let mut etcd = Etcd::connect(&args.etcd).await?;
        etcd.set_copies(args.copies, args.acks).await
    })?;
    let map = &view.map;
    let stale = map.stale_copies();
    println!("cluster map version {}: copies {}, acks {}", map.version, map.copies(), map.acks);
    if stale > 0 {
        println!(
            "{stale} copies are brought up to date from snapshots by their owners; `shardlite cluster status` \
             names them stale until then"
        );
    }
    Ok(())
}
