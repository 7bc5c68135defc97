//! `shardlite cluster status`: the map in etcd as a table (or `--json`): each node, its address,
//! whether its lease is alive, its partitions, the copies it keeps of others' (and which of them
//! are stale), and the records of its partitions as the node's own `/stats` counts them (live
//! nodes only; a node that does not answer shows none); with copies, each live owner's link to
//! each copy node from its `/stats`: streaming or not, the log position it holds, how far behind
//! and for how long, the copies being brought up to date, and partitions short of copies.

use serde::Serialize;

use shardlite_server::cluster::ReplicationReport;

use super::{etcd::Etcd, runtime, Asking};
use crate::stats;

/// `shardlite cluster status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    asking: Asking,
}

/// The cluster as `status` reports it.
#[derive(Debug, Serialize)]
struct Status {
    version: u64,
    partitions: u32,
    hash_seed: u64,
    /// Copies of each partition (its owner's included), and how many hold a write before it is
    /// answered.
    copies: u32,
    acks: u32,
    nodes: Vec<NodeStatus>,
}

#[derive(Debug, Serialize)]
struct NodeStatus {
    id: String,
    address: String,
    alive: bool,
    partitions: Vec<u32>,
    /// The partitions it keeps copies of for their owners.
    copies: Vec<u32>,
    /// Those of its copies that lag (stale in the map): they count for no write until brought
    /// up to date.
    stale: Vec<u32>,
    /// Records in the node's partitions, from its `/stats`; `None` if not alive or no answer.
    records: Option<u64>,
    /// Its replication to the copies of its partitions, from its `/stats`.
    #[serde(skip_serializing_if = "Option::is_none")]
    replication: Option<ReplicationReport>,
}

/// Runs `cluster status`.
pub fn run(args: &StatusArgs) -> anyhow::Result<()> {
    let args = &args.asking;
    let view = runtime()?.block_on(async { Etcd::connect(&args.etcd).await?.existing_view().await })?;
    let nodes = view
        .addresses
        .iter()
        .map(|(id, address)| {
            let (alive, partitions) = (view.alive.contains(id), view.map.owned_by(id));
            let fetched = alive
                .then(|| args.auth.connect(address).and_then(|node| stats::fetch_node(&node)))
                .and_then(|fetched| fetched.map_err(|err| eprintln!("{id}: {err:#}")).ok());
            let records = fetched.as_ref().map(|s| {
                s.store.partitions.iter().filter(|p| partitions.contains(&p.partition)).map(|p| p.records).sum()
            });
            let replication = fetched.and_then(|s| s.replication);
            let copies = (0..view.map.partitions).filter(|&p| view.map.replicas_of(p).contains(id)).collect();
            let stale = (0..view.map.partitions).filter(|&p| view.map.is_stale(p, id)).collect();
            NodeStatus {
                id: id.clone(),
                address: address.clone(),
                alive,
                partitions,
                copies,
                stale,
                records,
                replication,
            }
        })
        .collect();
    let map = &view.map;
    let status = Status {
        version: map.version,
        partitions: map.partitions,
        hash_seed: map.hash_seed,
        copies: map.copies(),
        acks: map.acks,
        nodes,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", render(&status));
    }
    Ok(())
}

fn render(status: &Status) -> String {
    let mut out = format!(
        "cluster map version {}: {} partitions, hash seed {}, copies {}, acks {}\n\
         {:<12} {:<28} {:<6} {:<24} {:<24} {:>12}\n",
        status.version,
        status.partitions,
        status.hash_seed,
        status.copies,
        status.acks,
        "node",
        "address",
        "alive",
        "partitions",
        "copies of",
        "records"
    );
    for node in &status.nodes {
        let records = node.records.map_or("-".to_owned(), |r| r.to_string());
        let alive = if node.alive { "yes" } else { "no" };
        let partitions = format!("{} ({})", node.partitions.len(), ranges(&node.partitions));
        let copies = match node.stale.is_empty() {
            true => format!("{} ({})", node.copies.len(), ranges(&node.copies)),
            false => format!("{} ({}; stale {})", node.copies.len(), ranges(&node.copies), ranges(&node.stale)),
        };
        out +=
            &format!("{:<12} {:<28} {alive:<6} {partitions:<24} {copies:<24} {records:>12}\n", node.id, node.address);
    }
    let replicating: Vec<(&str, &ReplicationReport)> =
        status.nodes.iter().filter_map(|n| Some((n.id.as_str(), n.replication.as_ref()?))).collect();
    if !replicating.is_empty() {
        out += "replication (owner -> copy: link, the owner's log position held, positions behind, oldest wait)\n";
    }
    for (id, report) in replicating {
        out += &replication_lines(id, report);
    }
    out
}

/// An owner's links to its copy nodes, a line each, and its partitions short of copies.
fn replication_lines(id: &str, report: &ReplicationReport) -> String {
    let mut out = String::new();
    for copy in &report.copies {
        let state = copy.state.as_str();
        let resyncing = match copy.resyncing.is_empty() {
            true => String::new(),
            false => format!("; from snapshots: {}", ranges(&copy.resyncing)),
        };
        out += &format!(
            "  {id} -> {:<8} {state:<10} held {:>12}  behind {:>8} ({} ms){resyncing}\n",
            copy.node, copy.held, copy.behind_by, copy.waiting_ms
        );
    }
    if let Some(why) = &report.short_why {
        out += &format!("  {id}: partitions {} refuse writes: {why}\n", ranges(&report.short));
    }
    out
}

/// Partition numbers as runs: `0-2,5,7-8`.
pub fn ranges(partitions: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &p in partitions {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == p => *end = p,
            _ => runs.push((p, p)),
        }
    }
    let text: Vec<String> =
        runs.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
    if text.is_empty() {
        "none".into()
    } else {
        text.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_print_as_runs() {
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(ranges(&[3]), "3");
        assert_eq!(ranges(&[]), "none");
    }
}
