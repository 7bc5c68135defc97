//! `shardlite cluster`: the commands that make and show a cluster's map in etcd
//! (docs/cluster.md). `init` creates it, `status` shows it with each node's liveness and
//! records, `move` gives a partition (or one of its copies) to another node, `failover` gives a
//! dead node's partitions to the live ones, `copies` changes how many copies each partition has,
//! `add-node` adds a node owning nothing yet, `balance` spreads partitions and copies evenly (or
//! drains a node), `remove-node` removes a drained, stopped node.
//! The node side of a cluster (`serve --cluster`) is [`node`]; the keys in etcd are [`etcd`]'s.

mod auto_failover;
mod balance;
mod copies;
mod dead_node;
pub mod etcd;
mod failover;
mod moving;
pub mod node;
mod promotion;
mod replica;
mod status;

use std::collections::BTreeMap;

use anyhow::Context;
use clap::{Args, Subcommand};
use shardlite_engine::CreateOptions;
use shardlite_server::cluster::ClusterMap;

use etcd::{Etcd, EtcdOptions};

use crate::remote::Auth;

/// `shardlite cluster ...`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  shardlite cluster init --etcd http://10.0.0.9:2379 \\\n      \
                        --nodes n1=http://10.0.0.1:8080,n2=http://10.0.0.2:8080,n3=http://10.0.0.3:8080\n  \
                        shardlite cluster status --etcd http://10.0.0.9:2379\n  \
                        shardlite cluster move 17 n3 --etcd http://10.0.0.9:2379 --token-file admin.token\n  \
                        shardlite cluster copies --copies 3 --acks 1 --etcd http://10.0.0.9:2379\n  \
                        shardlite cluster add-node n4=http://10.0.0.4:8080 --etcd http://10.0.0.9:2379\n  \
                        shardlite cluster balance --etcd http://10.0.0.9:2379 --token-file admin.token\n  \
                        shardlite cluster remove-node n4 --etcd http://10.0.0.9:2379\n  \
                        shardlite cluster failover n2 --etcd http://10.0.0.9:2379 --token-file admin.token")]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Create the cluster map in etcd: the partitions spread over the nodes in contiguous runs
    /// (refused if a map exists).
    Init(InitArgs),
    /// Show the map: each node, its address, whether it is alive, its partitions and records.
    Status(status::StatusArgs),
    /// Move a partition to another node, its records with it, while writes go on (they wait
    /// for the copy; the partition's owner runs the move).
    Move(moving::MoveArgs),
    /// Give the partitions of a dead node (no live lease) to the live nodes, each restored from
    /// the dead node's Litestream replica, then change the map in one transaction.
    Failover(failover::FailoverArgs),
    /// Change how many copies each partition has and how many must hold a write; new copies
    /// are brought up to date from snapshots while writes go on.
    Copies(copies::CopiesArgs),
    /// Add a node to the cluster, owning nothing yet: it can then start (`serve --cluster
    /// --node-id ID`), and take partitions and copies (`move`, `balance`).
    AddNode(AddNodeArgs),
    /// Spread the partitions and their copies evenly over the live nodes: partitions handed to
    /// nodes keeping up-to-date copies of them (or moved, without copies), copies moved.
    Balance(balance::BalanceArgs),
    /// Remove a stopped node that owns no partition and keeps no copy (`balance --drain` first).
    RemoveNode(RemoveNodeArgs),
}

/// `shardlite cluster remove-node`.
#[derive(Debug, Args)]
struct RemoveNodeArgs {
    /// The node's id.
    node: String,
    #[command(flatten)]
    etcd: EtcdOptions,
}

/// `shardlite cluster add-node`.
#[derive(Debug, Args)]
struct AddNodeArgs {
    /// The node: ID=http://HOST:PORT (or https://, for a node serving TLS).
    #[arg(value_name = "ID=URL")]
    node: String,
    #[command(flatten)]
    etcd: EtcdOptions,
}

/// What the commands that read the map and ask the nodes take.
#[derive(Debug, Args)]
struct Asking {
    #[command(flatten)]
    etcd: EtcdOptions,
    /// One JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// The token for the nodes: role `metrics` for `status`, `admin` for `move`, the cluster's
    /// `node` token for `failover` (a takeover is a node's route).
    #[command(flatten)]
    auth: Auth,
}

/// `shardlite cluster init`.
#[derive(Debug, Args)]
struct InitArgs {
    #[command(flatten)]
    etcd: EtcdOptions,
    /// Partitions of the cluster: every node's data directory must have this many.
    #[arg(long, default_value_t = CreateOptions::DEFAULT_PARTITIONS)]
    partitions: u32,
    /// Key hash seed of the cluster: every node's data directory must have it.
    #[arg(long, default_value_t = CreateOptions::DEFAULT_HASH_SEED)]
    hash_seed: u64,
    /// The nodes, in order, comma-separated: ID=http://HOST:PORT,...
    #[arg(long, value_name = "ID=URL,...", value_delimiter = ',', required = true)]
    nodes: Vec<String>,
    /// Nodes that own no partition yet, comma-separated: ID=http://HOST:PORT,... They serve
    /// requests by forwarding them (routers), and are where partitions can be moved to later.
    #[arg(long, value_name = "ID=URL,...", value_delimiter = ',')]
    spare_nodes: Vec<String>,
    /// Copies of each partition: its owner and the nodes after it in --nodes (wrapping round),
    /// each written before a write is answered (docs/cluster.md, "Replicas"). 1: no replicas.
    #[arg(long, default_value_t = 1, value_name = "R")]
    copies: u32,
    /// How many of the copies must hold a write durably before it is answered (default: a
    /// majority, or both of 2 copies).
    #[arg(long, value_name = "W")]
    acks: Option<u32>,
}

/// Runs a `cluster` command.
pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    match args.command {
        ClusterCommand::Init(args) => init(&args),
        ClusterCommand::Status(args) => status::run(&args),
        ClusterCommand::Move(args) => moving::run(&args),
        ClusterCommand::Failover(args) => failover::run(&args),
        ClusterCommand::Copies(args) => copies::run(&args),
        ClusterCommand::AddNode(args) => add_node(&args),
        ClusterCommand::Balance(args) => balance::run(&args),
        ClusterCommand::RemoveNode(args) => remove_node(&args),
    }
}

fn remove_node(args: &RemoveNodeArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let mut etcd = Etcd::connect(&args.etcd).await?;
        etcd.remove_node(&args.node).await
    })?;
    println!("node {} removed from the cluster", args.node);
    Ok(())
}

fn add_node(args: &AddNodeArgs) -> anyhow::Result<()> {
    let (id, address) = node_spec(&args.node)?;
    runtime()?.block_on(async {
        let mut etcd = Etcd::connect(&args.etcd).await?;
        etcd.add_node(&id, &address).await
    })?;
    println!(
        "node {id} added at {address}, owning nothing yet: start it (`shardlite serve --cluster --node-id {id}`), \
         then `shardlite cluster balance` gives it its share"
    );
    Ok(())
}

fn init(args: &InitArgs) -> anyhow::Result<()> {
    CreateOptions { partitions: Some(args.partitions), ..CreateOptions::default() }.validate()?;
    let nodes = args.nodes.iter().map(|spec| node_spec(spec)).collect::<anyhow::Result<Vec<_>>>()?;
    let spares = args.spare_nodes.iter().map(|spec| node_spec(spec)).collect::<anyhow::Result<Vec<_>>>()?;
    let ids: Vec<String> = nodes.iter().chain(&spares).map(|(id, _)| id.clone()).collect();
    let addresses: BTreeMap<String, String> = nodes.into_iter().chain(spares).collect();
    anyhow::ensure!(addresses.len() == ids.len(), "--nodes and --spare-nodes name a node id twice");
    let ids = &ids[..args.nodes.len()];
    let acks = args.acks.unwrap_or(match args.copies {
        2 => 2,
        copies => copies / 2 + 1,
    });
    let map = ClusterMap::spread(args.partitions, args.hash_seed, ids)
        .and_then(|map| map.with_copies(ids, args.copies, acks))
        .map_err(anyhow::Error::msg)?;
    runtime()?.block_on(async {
        let mut etcd = Etcd::connect(&args.etcd).await?;
        etcd.create(&map, &addresses).await
    })?;
    for (id, address) in &addresses {
        println!("{id} {address}: partitions {}", status::ranges(&map.owned_by(id)));
    }
    println!(
        "cluster map version {} created: {} partitions over {} nodes, copies {}, acks {}",
        map.version,
        map.partitions,
        ids.len(),
        map.copies(),
        map.acks
    );
    Ok(())
}

/// One `ID=http[s]://HOST:PORT` of `--nodes`, checked: `https://` for nodes serving TLS (the
/// others then reach it over TLS, trusting `--node-ca`).
fn node_spec(spec: &str) -> anyhow::Result<(String, String)> {
    let (id, address) =
        spec.split_once('=').with_context(|| format!("`{spec}`: a node is ID=http://HOST:PORT or ID=https://..."))?;
    anyhow::ensure!(
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "`{id}`: a node id is letters, digits, `-` and `_`"
    );
    let address = address.trim_end_matches('/');
    let host = address.strip_prefix("http://").or_else(|| address.strip_prefix("https://"));
    let host =
        host.with_context(|| format!("`{address}`: a node's address is http://HOST:PORT or https://HOST:PORT"))?;
    anyhow::ensure!(
        !host.is_empty() && !host.contains('/') && address.parse::<reqwest::Url>().is_ok(),
        "`{address}`: a node's address is http[s]://HOST:PORT, with no path"
    );
    Ok((id.to_owned(), address.to_owned()))
}

/// A runtime for one command's etcd requests.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_specs_are_checked() {
        assert_eq!(node_spec("n1=http://10.0.0.1:8080/").unwrap(), ("n1".into(), "http://10.0.0.1:8080".into()));
        assert!(node_spec("n1").unwrap_err().to_string().contains("ID=http"));
        assert!(node_spec("n 1=http://x:1").unwrap_err().to_string().contains("node id"));
        assert_eq!(node_spec("n1=https://x:1").unwrap().1, "https://x:1", "a node serving TLS");
        assert!(node_spec("n1=ftp://x:1").unwrap_err().to_string().contains("https://HOST:PORT"));
        assert!(node_spec("n1=http://x:1/kv").unwrap_err().to_string().contains("no path"));
    }
}
