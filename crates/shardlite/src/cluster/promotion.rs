//! A failover in a cluster with replicas (docs/cluster.md, "Failover with replicas"): which live
//! copy of each of the dead node's partitions becomes its owner, and the other copies brought up
//! to it, before the takeovers and the map's transaction (`super::failover`).
//!
//! ```text
//!  each partition P of NODE: enough live copies? (copies - acks + 1: one of them held every
//!        write NODE acknowledged) else refused
//!  every live copy: POST /admin/replicate?from=NODE&part=seal ─> its position in NODE's log
//!        (sealed, it takes no more frames of NODE's: NODE, were it alive, is answered by too
//!        few copies to acknowledge anything); still enough copies that know their position?
//!        (one that restarted since NODE last reached it does not, nor one waiting for a
//!        snapshot of P: it lacks what came before) else refused
//!  each P: the most advanced live copy C; each other live copy L (behind it, or as far):
//!        GET C/admin/replicate?from=NODE&part=tail&partition=P&after=pos(L)
//!        POST L/admin/replicate?from=NODE&part=catch-up&partition=P   (that tail)
//!        (failed: L's copy of P is stale in the new map, it gets no writes of P)
//!  ─> P assigned to C
//! ```

use std::collections::BTreeMap;

use anyhow::Context;
use shardlite_server::cluster::View;

use super::dead_node::{ask, dead_owners_partitions};

/// What a seal answers: where the copy's node stands in the dead node's log, and its copies
/// waiting for a snapshot (they lack what came before it).
#[derive(Debug, serde::Deserialize)]
struct Sealed {
    position: Option<u64>,
    #[serde(default)]
    awaiting: Vec<u32>,
}

impl Sealed {
    /// Where this node's copy of `partition` stands, if it is one to count: it knows its
    /// position, and does not wait for a snapshot.
    fn of(&self, partition: u32) -> Option<u64> {
        self.position.filter(|_| !self.awaiting.contains(&partition))
    }
}

/// Which live copy of each partition of `dead` becomes its owner: the most advanced (the fewest
/// partitions given so far, then the lower id, on a tie), once every live copy is sealed and
/// the others brought up to it; and the copies that could not be (stale from now on).
pub async fn plan(
    view: &View,
    dead: &str,
    client: &reqwest::Client,
    token: Option<&str>,
) -> anyhow::Result<(BTreeMap<u32, String>, Vec<(u32, String)>)> {
    let partitions = dead_owners_partitions(view, dead)?;
    let needed = (view.map.copies() - view.map.acks + 1) as usize;
    let mut live: BTreeMap<u32, Vec<&String>> = BTreeMap::new();
    for &p in &partitions {
        let copies: Vec<&String> =
            view.map.live_replicas_of(p).into_iter().filter(|n| view.alive.contains(*n)).collect();
        anyhow::ensure!(
            copies.len() >= needed,
            "partition {p}: {} of its copies besides `{dead}`'s are alive, and {needed} are needed to be sure one \
             holds every write `{dead}` acknowledged (copies {}, acks {}): bring one back",
            copies.len(),
            view.map.copies(),
            view.map.acks
        );
        live.insert(p, copies);
    }
    let positions = seal(view, dead, live.values().flatten().copied(), client, token).await?;
    // A copy that restarted since `dead` last reached it knows nothing of `dead`'s log: it may
    // hold a write `dead` acknowledged (applied by its replay) without saying so; one waiting
    // for a snapshot lacks what came before it. Neither counts.
    for (p, copies) in &live {
        let known = copies.iter().filter(|n| positions[n.as_str()].of(*p).is_some()).count();
        anyhow::ensure!(
            known >= needed,
            "partition {p}: {known} of its live copies know where they stand in `{dead}`'s log (the others \
             restarted since `{dead}` last reached them), and {needed} are needed to be sure one holds every \
             write `{dead}` acknowledged: bring `{dead}` back"
        );
    }
    let mut given: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut assigned, mut stale) = (BTreeMap::new(), Vec::new());
    for (p, copies) in &live {
        let best = copies
            .iter()
            .max_by_key(|n| {
                (positions[n.as_str()].of(*p), std::cmp::Reverse(given.get(n.as_str()).copied().unwrap_or(0)))
            })
            .expect("enough live copies");
        // Every other copy, as far as the best one or not: each applies what it held of P.
        for lagging in copies.iter().filter(|n| **n != *best) {
            if let Err(err) =
                catch_up(view, dead, *p, (best, lagging, positions[lagging.as_str()].of(*p)), client, token).await
            {
                tracing::warn!(partition = p, node = %lagging, "its copy could not be brought up to date, and is stale: {err:#}");
                stale.push((*p, (*lagging).clone()));
            }
        }
        *given.entry(best).or_default() += 1;
        assigned.insert(*p, (*best).clone());
    }
    Ok((assigned, stale))
}

/// Seals `dead` on each node of `copies`; where each one stands.
async fn seal<'a>(
    view: &View,
    dead: &str,
    copies: impl Iterator<Item = &'a String>,
    client: &reqwest::Client,
    token: Option<&str>,
) -> anyhow::Result<BTreeMap<String, Sealed>> {
    let mut positions = BTreeMap::new();
    for node in copies {
        if positions.contains_key(node) {
            continue;
        }
        let url = format!("{}/admin/replicate?from={dead}&part=seal", view.addresses[node]);
        let body = ask(client, reqwest::Method::POST, &url, None, token)
            .await
            .with_context(|| format!("sealing `{dead}` on `{node}`"))?;
        let sealed: Sealed = serde_json::from_slice(&body).context("a seal's answer")?;
        positions.insert(node.clone(), sealed);
    }
    Ok(positions)
}

/// Brings `lagging`'s copy of `partition` (at `after` in `dead`'s log) up to `best`'s.
async fn catch_up(
    view: &View,
    dead: &str,
    partition: u32,
    (best, lagging, after): (&str, &str, Option<u64>),
    client: &reqwest::Client,
    token: Option<&str>,
) -> anyhow::Result<()> {
    let after = after.with_context(|| {
        format!("`{lagging}` holds nothing of `{dead}`'s log since it started, or waits for a snapshot of partition {partition}")
    })?;
    let tail_url =
        format!("{}/admin/replicate?from={dead}&part=tail&partition={partition}&after={after}", view.addresses[best]);
    let tail = ask(client, reqwest::Method::GET, &tail_url, None, token).await?;
    let url = format!("{}/admin/replicate?from={dead}&part=catch-up&partition={partition}", view.addresses[lagging]);
    ask(client, reqwest::Method::POST, &url, Some(&tail), token).await?;
    Ok(())
}
