//! Failing a dead node's partitions over to the live nodes (docs/cluster.md, "Failover"):
//! `shardlite cluster failover NODE`, and the same run by a node with `serve --auto-failover`
//! (`super::auto_failover`).
//!
//! ```text
//!  read the view ── NODE holds a lease? refused (it may be writing its partitions)
//!  plan, without replicas: each partition of NODE to the live node with the fewest partitions
//!  plan, with replicas (`promotion`): seal NODE on every live copy, read their positions; each
//!        partition to its most advanced live copy, the others brought up to it from its tail
//!  each new owner, all at once: POST /admin/takeover?partition=P&from=NODE per partition
//!        (it makes its copy of P the partition, or restores P from NODE's Litestream replica)
//!  one etcd transaction: every owner changed, version + 1, if the map is still at the version
//!        read and NODE still holds no lease
//! ```
//!
//! A failover that fails at any step leaves the map as it was: the survivors' restored copies
//! stay unowned (nothing routes to them) until a later move or failover to them empties them.

use std::{collections::BTreeMap, time::Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use shardlite_server::cluster::View;

use super::{
    dead_node::{ask, dead_owners_partitions},
    etcd::Etcd,
    promotion, runtime, Asking,
};
use crate::remote;

/// `shardlite cluster failover`.
#[derive(Debug, clap::Args)]
pub struct FailoverArgs {
    /// The dead node (no live lease) whose partitions go to the live nodes.
    node: String,
    #[command(flatten)]
    asking: Asking,
}

/// What a failover did.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The dead node.
    pub node: String,
    /// The map version that names the new owners.
    pub map_version: u64,
    /// The whole failover, seconds.
    pub seconds: f64,
    /// Each partition taken over.
    pub partitions: Vec<TakenOver>,
}

/// One partition taken over, as its new owner reports it (`POST /admin/takeover`).
#[derive(Debug, Serialize, Deserialize)]
pub struct TakenOver {
    /// The partition.
    pub partition: u32,
    /// Its new owner.
    #[serde(default)]
    pub to: String,
    /// Records restored.
    pub records: u64,
    /// The new owner's copy became the partition (with replicas): nothing acknowledged is lost.
    #[serde(default)]
    pub copy: bool,
    /// The Litestream replica's last transaction restored: what the dead node committed after
    /// it is lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_txid: Option<String>,
    /// `litestream restore`, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_seconds: Option<f64>,
    /// Restoring and taking in, seconds.
    pub seconds: f64,
}

/// Runs `cluster failover`.
pub fn run(args: &FailoverArgs) -> anyhow::Result<()> {
    let (node, args) = (&args.node, &args.asking);
    let client = remote::client(args.auth.tls_ca.as_deref())?;
    let token = args.auth.token()?;
    let report = runtime()?.block_on(async {
        let mut etcd = Etcd::connect(&args.etcd).await?;
        fail_over(&mut etcd, &client, node, token.as_deref()).await
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    for p in &report.partitions {
        match (&p.replica_txid, p.restore_seconds) {
            (Some(txid), Some(restore)) => println!(
                "partition {} -> {}: {} records restored to replica txid {txid} (litestream restore {restore:.2} s, \
                 in all {:.2} s)",
                p.partition, p.to, p.records, p.seconds
            ),
            _ => {
                println!("partition {} -> {}: its copy, {} records ({:.2} s)", p.partition, p.to, p.records, p.seconds)
            }
        }
    }
    println!(
        "node {} failed over: {} partitions in {:.2} s; map version {}",
        report.node,
        report.partitions.len(),
        report.seconds,
        report.map_version
    );
    Ok(())
}

/// Fails the dead node `dead` over: each live node takes its share of `dead`'s partitions in
/// from `dead`'s replica, then one transaction gives them to it.
pub async fn fail_over(
    etcd: &mut Etcd,
    client: &reqwest::Client,
    dead: &str,
    token: Option<&str>,
) -> anyhow::Result<Report> {
    let started = Instant::now();
    let view = etcd.existing_view().await?;
    let (assigned, stale) = match view.map.copies() {
        1 => (plan(&view, dead)?, Vec::new()),
        _ => promotion::plan(&view, dead, client, token).await?,
    };
    let mut shares = tokio::task::JoinSet::new();
    for (node, partitions) in by_node(&assigned) {
        let (client, address, token) = (client.clone(), view.addresses[&node].clone(), token.map(str::to_owned));
        let dead = dead.to_owned();
        shares.spawn(async move {
            let mut taken = Vec::new();
            for partition in partitions {
                let mut done = take_over(&client, &address, partition, &dead, token.as_deref())
                    .await
                    .with_context(|| format!("node `{node}` taking partition {partition} over"))?;
                done.to.clone_from(&node);
                taken.push(done);
            }
            anyhow::Ok(taken)
        });
    }
    let mut partitions = Vec::new();
    while let Some(share) = shares.join_next().await {
        partitions.extend(share.context("a node's share of the failover")??);
    }
    partitions.sort_by_key(|p| p.partition);
    let after = etcd.fail_over(dead, &assigned, &stale, view.map.version).await?;
    Ok(Report {
        node: dead.to_owned(),
        map_version: after.map.version,
        seconds: started.elapsed().as_secs_f64(),
        partitions,
    })
}

/// Which live node takes each partition of `dead`: the one owning the fewest partitions so far
/// (its own and those given it here), the lower id on a tie. Refused while `dead` holds a
/// lease, or when it owns nothing or no other node is alive.
pub fn plan(view: &View, dead: &str) -> anyhow::Result<BTreeMap<u32, String>> {
    let partitions = dead_owners_partitions(view, dead)?;
    let mut load: BTreeMap<&str, usize> =
        view.alive.iter().filter(|id| *id != dead).map(|id| (id.as_str(), view.map.owned_by(id).len())).collect();
    anyhow::ensure!(!load.is_empty(), "no live node to take the partitions of `{dead}` over");
    let mut assigned = BTreeMap::new();
    for p in partitions {
        let (&node, _) = load.iter().min_by_key(|(id, n)| (**n, **id)).expect("a live node");
        *load.get_mut(node).expect("a live node") += 1;
        assigned.insert(p, node.to_owned());
    }
    Ok(assigned)
}

/// The partitions each node is given.
fn by_node(assigned: &BTreeMap<u32, String>) -> BTreeMap<String, Vec<u32>> {
    let mut nodes: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (&p, node) in assigned {
        nodes.entry(node.clone()).or_default().push(p);
    }
    nodes
}

/// `POST /admin/takeover?partition=P&from=DEAD` on the node at `address`.
async fn take_over(
    client: &reqwest::Client,
    address: &str,
    partition: u32,
    dead: &str,
    token: Option<&str>,
) -> anyhow::Result<TakenOver> {
    let url = format!("{address}/admin/takeover?partition={partition}&from={dead}");
    let body = ask(client, reqwest::Method::POST, &url, None, token).await?;
    serde_json::from_slice(&body).with_context(|| format!("the answer {}", String::from_utf8_lossy(&body)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use shardlite_server::cluster::ClusterMap;

    use super::*;

    fn view(alive: &[&str]) -> View {
        let ids: Vec<String> = ["n1", "n2", "n3"].map(String::from).to_vec();
        let map = ClusterMap::spread(8, 1, &ids).unwrap();
        let addresses = ids.iter().map(|id| (id.clone(), format!("http://{id}:1"))).collect();
        View { map, addresses, alive: alive.iter().map(|id| (*id).to_owned()).collect::<BTreeSet<_>>() }
    }

    #[test]
    fn a_dead_nodes_partitions_are_spread_over_the_live_nodes() {
        // n1 owns 0-2, n2 3-5, n3 6-7.
        let assigned = plan(&view(&["n2", "n3"]), "n1").unwrap();
        let nodes: Vec<&str> = assigned.values().map(String::as_str).collect();
        assert_eq!(assigned.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(nodes, ["n3", "n2", "n3"], "the one owning fewer first, then in turn");
        assert!(plan(&view(&["n1", "n2"]), "n1").unwrap_err().to_string().contains("holds its lease"));
        assert!(plan(&view(&[]), "n1").unwrap_err().to_string().contains("no live node"));
        assert!(plan(&view(&["n2"]), "n9").unwrap_err().to_string().contains("no node `n9`"));
    }
}
