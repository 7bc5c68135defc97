//! `shardlite cluster balance`: spreads the partitions and their copies evenly over the live
//! nodes, a node added later (`cluster add-node`) included (docs/cluster.md, "Balancing").
//!
//! ```text
//!  plan, on a copy of the map:
//!    owners: while some node owns 2 or more partitions more than another, give one of its
//!            partitions to such a node: with copies, only one keeping an up-to-date copy of it
//!            (a handover); without, any (a move, records and all)
//!    copies: while some node keeps 2 or more copies more than another, move one to such a node
//!            holding none of that partition, if the partition keeps `acks` copies up to date
//!  run: each owner step as `cluster move` does (POST /admin/move on the owner), in turn; then
//!       every copy step in one etcd transaction (the new copies stale until brought up to date)
//! ```
//!
//! A node that keeps no up-to-date copy of any partition cannot be handed one: a first run moves
//! copies to it, and a second, once `cluster status` names none stale, gives it partitions. With
//! `--wait` one run does both: after each pass that moved copies it waits until the map names
//! none stale, then plans again, until nothing is left to do.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use anyhow::Context;
use serde::Serialize;
use shardlite_server::cluster::ClusterMap;

use super::{etcd::Etcd, moving, runtime, Asking};

/// How often `--wait` reads the map while copies are brought up to date.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// `shardlite cluster balance`.
#[derive(Debug, clap::Args)]
pub struct BalanceArgs {
    /// Print the steps without taking them.
    #[arg(long)]
    dry_run: bool,
    /// Move every partition and copy off this node, then spread them over the others (before
    /// `cluster remove-node`).
    #[arg(long, value_name = "NODE")]
    drain: Option<String>,
    /// After moving copies, wait until they are up to date and balance again, until nothing is
    /// left to do: at most SECS in all (600 if not given).
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "600")]
    wait: Option<u64>,
    #[command(flatten)]
    asking: Asking,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "snake_case")]
enum Step {
    /// `to` takes `partition` from its owner `from` (a handover to its copy, or a move).
    Owner { partition: u32, from: String, to: String },
    /// `from`'s copy of `partition` moves to `to`, stale until brought up to date.
    Copy { partition: u32, from: String, to: String },
}

/// Runs `cluster balance`: one pass, or with `--wait` passes until nothing is left to do.
pub fn run(args: &BalanceArgs) -> anyhow::Result<()> {
    let runtime = runtime()?;
    let mut etcd = runtime.block_on(Etcd::connect(&args.asking.etcd))?;
    let deadline = args.wait.map(|secs| Instant::now() + Duration::from_secs(secs));
    let mut taken = Vec::new();
    loop {
        let steps = pass(args, &runtime, &mut etcd)?;
        let moved_copies = steps.iter().any(|s| matches!(s, Step::Copy { .. }));
        taken.extend(steps);
        match deadline {
            Some(deadline) if moved_copies && !args.dry_run => {
                runtime.block_on(until_up_to_date(&mut etcd, deadline, args.asking.json))?;
            }
            _ => break,
        }
    }
    if args.asking.json && !args.dry_run {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "steps": taken, "planned": false }))?);
    }
    Ok(())
}

/// Plans the steps on the map as it is and takes them (prints them with `--dry-run`): the steps.
fn pass(args: &BalanceArgs, runtime: &tokio::runtime::Runtime, etcd: &mut Etcd) -> anyhow::Result<Vec<Step>> {
    let asking = &args.asking;
    let view = runtime.block_on(etcd.existing_view())?;
    let dead: Vec<&String> = view.addresses.keys().filter(|n| !view.alive.contains(*n)).collect();
    anyhow::ensure!(
        dead.is_empty(),
        "not every node is alive ({}): bring them back, or fail them over, first",
        dead.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
    );
    let drain = args.drain.as_deref();
    if let Some(node) = drain {
        anyhow::ensure!(view.addresses.contains_key(node), "no node `{node}` in the cluster map");
    }
    let nodes: Vec<String> = view.addresses.keys().filter(|n| Some(n.as_str()) != drain).cloned().collect();
    anyhow::ensure!(
        nodes.len() >= view.map.copies() as usize,
        "{} nodes would be left for {} copies of each partition",
        nodes.len(),
        view.map.copies()
    );
    let (steps, after) = plan(&view.map, &nodes, drain);
    let left = drain.filter(|n| after.holds_any(n));
    if let Some(node) = left {
        anyhow::bail!("node `{node}` cannot be drained in one run: {}", stuck_why(&view.map));
    }
    if steps.is_empty() {
        if let Some(uneven) = uneven(&view.map, &nodes) {
            anyhow::bail!("{uneven}, and no step can even it out: {}", stuck_why(&view.map));
        }
    }
    if args.dry_run {
        report(&steps, asking.json)?;
        return Ok(steps);
    }
    if steps.is_empty() {
        if !asking.json {
            println!("the partitions and their copies are spread evenly: nothing to do");
        }
        return Ok(steps);
    }
    for step in &steps {
        if let Step::Owner { partition, from, to } = step {
            let done = moving::ask_move(asking, &view, (*partition, from, to))?;
            if !asking.json {
                println!("{}", moving::summary((*partition, from, to), &done));
            }
        }
    }
    let copies: Vec<(u32, String, String)> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Copy { partition, from, to } => Some((*partition, from.clone(), to.clone())),
            Step::Owner { .. } => None,
        })
        .collect();
    if !copies.is_empty() {
        let after = runtime.block_on(etcd.move_copies(&copies)).context("moving the copies")?;
        if !asking.json {
            let then = match args.wait {
                Some(_) => "waiting for that, then balancing again",
                None => {
                    "run `cluster balance` again then (or with `--wait`), to give the nodes that took them partitions"
                }
            };
            println!(
                "{} copies moved (map version {}); they are brought up to date from snapshots, and `shardlite \
                 cluster status` names them stale until then: {then}",
                copies.len(),
                after.map.version
            );
        }
    }
    Ok(steps)
}

/// Waits until the map names no copy stale (their owners brought them up to date), or fails at
/// `deadline`.
async fn until_up_to_date(etcd: &mut Etcd, deadline: Instant, quiet: bool) -> anyhow::Result<()> {
    loop {
        let stale = etcd.existing_view().await?.map.stale_copies();
        if stale == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{stale} copies are still not up to date after the time `--wait` gave them: `shardlite cluster status` \
             names them; run `cluster balance` again once it names none"
        );
        if !quiet {
            println!("{stale} copies not up to date yet");
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Prints the steps planned, not taken (`--dry-run`).
fn report(steps: &[Step], json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "steps": steps, "planned": true }))?);
        return Ok(());
    }
    if steps.is_empty() {
        println!("the partitions and their copies are spread evenly: nothing to do");
    }
    for step in steps {
        match step {
            Step::Owner { partition, from, to } => println!("partition {partition}: its owner {from} -> {to}"),
            Step::Copy { partition, from, to } => println!("partition {partition}: the copy on {from} -> {to}"),
        }
    }
    Ok(())
}

/// How the partitions or copies of `map` are spread unevenly over `nodes` (some node has 2 or
/// more more than another), if they are.
fn uneven(map: &ClusterMap, nodes: &[String]) -> Option<String> {
    let spread = |what: &str, count: &dyn Fn(&String) -> usize| {
        let counts: Vec<usize> = nodes.iter().map(count).collect();
        let (min, max) = (counts.iter().min()?, counts.iter().max()?);
        let each: Vec<String> = nodes.iter().zip(&counts).map(|(n, c)| format!("{n} {c}")).collect();
        (max - min >= 2).then(|| format!("{what}: {}", each.join(", ")))
    };
    let owned = spread("partitions owned", &|n| map.owned_by(n).len());
    let copies = spread("copies kept", &|n| copies_kept(map, n));
    let both: Vec<String> = owned.into_iter().chain(copies).collect();
    (!both.is_empty()).then(|| format!("the spread is uneven ({})", both.join("; ")))
}

/// Why no step can be taken on `map`, which has copies (without, a partition can always move).
fn stuck_why(map: &ClusterMap) -> String {
    let stale = map.stale_copies();
    if stale > 0 {
        return format!(
            "{stale} copies are not up to date yet (a partition goes only to a node keeping an up-to-date copy of \
             it): run it again once `shardlite cluster status` names none stale"
        );
    }
    format!(
        "a partition goes only to a node keeping an up-to-date copy of it, and a copy moves only while {} others \
         stay up to date (acks): lower acks first (`shardlite cluster copies`)",
        map.acks
    )
}

/// The steps that move everything off `drain` (if given), then spread `map`'s partitions, then
/// their copies, evenly over `nodes` (see the module's doc), found on a copy of the map that
/// takes each in turn; and that map after them.
fn plan(map: &ClusterMap, nodes: &[String], drain: Option<&str>) -> (Vec<Step>, ClusterMap) {
    let mut map = map.clone();
    let mut steps = Vec::new();
    if let Some(drained) = drain {
        for p in map.owned_by(drained) {
            if let Some(to) = least_loaded(nodes, |n| map.may_own(p, n), |n| map.owned_by(n).len()) {
                steps.push(give(&mut map, (p, drained.to_owned(), to)));
            }
        }
    }
    while let Some(next) = next_owner(&map, nodes) {
        steps.push(give(&mut map, next));
    }
    if let Some(drained) = drain {
        let kept: Vec<u32> = (0..map.partitions).filter(|&p| map.replicas_of(p).iter().any(|n| n == drained)).collect();
        for p in kept {
            let movable = |n: &String| map.copy_movable(p, drained, n).is_ok();
            if let Some(to) = least_loaded(nodes, movable, |n| copies_kept(&map, n)) {
                steps.push(move_copy(&mut map, (p, drained.to_owned(), to)));
            }
        }
    }
    while let Some(next) = next_copy(&map, nodes) {
        steps.push(move_copy(&mut map, next));
    }
    (steps, map)
}

/// Takes the owner step `(partition, from, to)` on `map`.
fn give(map: &mut ClusterMap, (partition, from, to): (u32, String, String)) -> Step {
    map.give(partition, &to, false);
    Step::Owner { partition, from, to }
}

/// Takes the copy step `(partition, from, to)` on `map` (found movable there).
fn move_copy(map: &mut ClusterMap, (partition, from, to): (u32, String, String)) -> Step {
    map.move_copy(partition, &from, &to).expect("found movable");
    Step::Copy { partition, from, to }
}

/// Of `nodes`, one that `fits`, with the lowest `load` (then the lowest id).
fn least_loaded(nodes: &[String], fits: impl Fn(&String) -> bool, load: impl Fn(&String) -> usize) -> Option<String> {
    nodes.iter().filter(|n| fits(n)).min_by_key(|n| (load(n), *n)).cloned()
}

/// How many copies `node` keeps (besides the partitions it owns).
fn copies_kept(map: &ClusterMap, node: &String) -> usize {
    (0..map.partitions).filter(|&p| map.replicas_of(p).contains(node)).count()
}

/// A partition to give from a node owning 2 or more more than another to that one: from the
/// most loaded first, to the least.
fn next_owner(map: &ClusterMap, nodes: &[String]) -> Option<(u32, String, String)> {
    let owned: BTreeMap<&String, usize> = nodes.iter().map(|n| (n, map.owned_by(n).len())).collect();
    for (from, to) in pairs(&owned) {
        if let Some(p) = map.owned_by(from).into_iter().find(|&p| map.may_own(p, to)) {
            return Some((p, from.clone(), to.clone()));
        }
    }
    None
}

/// A copy to move from a node keeping 2 or more more than another to that one, where the
/// partition keeps enough copies up to date meanwhile.
fn next_copy(map: &ClusterMap, nodes: &[String]) -> Option<(u32, String, String)> {
    let copies: BTreeMap<&String, usize> = nodes.iter().map(|n| (n, copies_kept(map, n))).collect();
    for (from, to) in pairs(&copies) {
        let movable = |p: &u32| map.copy_movable(*p, from, to).is_ok();
        if let Some(p) = (0..map.partitions).find(movable) {
            return Some((p, from.clone(), to.clone()));
        }
    }
    None
}

/// The pairs of nodes `(from, to)` whose counts differ by 2 or more, the most loaded `from`
/// first and, for each, the least loaded `to` first.
fn pairs<'a>(counts: &BTreeMap<&'a String, usize>) -> Vec<(&'a String, &'a String)> {
    let mut by_count: Vec<(&String, usize)> = counts.iter().map(|(n, c)| (*n, *c)).collect();
    by_count.sort_by_key(|(n, c)| (*c, *n));
    let mut pairs = Vec::new();
    for (from, more) in by_count.iter().rev() {
        pairs.extend(by_count.iter().filter(|(_, fewer)| fewer + 2 <= *more).map(|(to, _)| (*from, *to)));
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn without_copies_a_new_node_takes_its_share_of_partitions() {
        let map = ClusterMap::spread(8, 1, &ids(&["n1", "n2", "n3"])).unwrap();
        let nodes = ids(&["n1", "n2", "n3", "n4"]);
        let steps = plan(&map, &nodes, None).0;
        assert_eq!(steps.len(), 2, "{steps:?}");
        assert!(steps.iter().all(|s| matches!(s, Step::Owner { to, .. } if to == "n4")), "{steps:?}");
        assert!(plan(&map, &ids(&["n1", "n2", "n3"]), None).0.is_empty(), "3, 3 and 2: even");
    }

    #[test]
    fn with_copies_a_new_node_takes_copies_first_then_partitions() {
        let three = ids(&["n1", "n2", "n3"]);
        let map = ClusterMap::spread(8, 1, &three).unwrap().with_copies(&three, 3, 2).unwrap();
        let nodes = ids(&["n1", "n2", "n3", "n4"]);
        let steps = plan(&map, &nodes, None).0;
        assert!(steps.iter().all(|s| matches!(s, Step::Copy { to, .. } if to == "n4")), "{steps:?}");
        // 16 copies over 4 nodes: 4 each.
        assert_eq!(steps.len(), 4, "{steps:?}");
        let mut after = map.clone();
        for step in &steps {
            let Step::Copy { partition, from, to } = step else { unreachable!() };
            after.move_copy(*partition, from, to).unwrap();
            after.unstale(*partition, to);
        }
        // Once its copies are up to date, it is handed partitions: 2 of the 8.
        let second = plan(&after, &nodes, None).0;
        let handed = second.iter().filter(|s| matches!(s, Step::Owner { to, .. } if to == "n4")).count();
        assert_eq!(handed, 2, "{second:?}");
        let mut last = after.clone();
        for step in &second {
            match step {
                Step::Owner { partition, to, .. } => last.give(*partition, to, false),
                Step::Copy { partition, from, to } => last.move_copy(*partition, from, to).unwrap(),
            }
        }
        let owned: Vec<usize> = nodes.iter().map(|n| last.owned_by(n).len()).collect();
        assert_eq!(owned, [2, 2, 2, 2], "{last:?}");
        assert!(last.validate().is_ok());
    }

    #[test]
    fn a_drained_node_gives_every_partition_and_copy_to_the_others() {
        let four = ids(&["n1", "n2", "n3", "n4"]);
        let map = ClusterMap::spread(8, 1, &four).unwrap().with_copies(&four, 3, 2).unwrap();
        let (steps, after) = plan(&map, &ids(&["n1", "n2", "n3"]), Some("n4"));
        assert!(!after.holds_any("n4"), "{steps:?}");
        let handed = steps.iter().filter(|s| matches!(s, Step::Owner { from, .. } if from == "n4")).count();
        assert_eq!(handed, 2, "n4's two partitions, each to a node keeping an up-to-date copy: {steps:?}");
        let owned: Vec<usize> = ["n1", "n2", "n3"].iter().map(|n| after.owned_by(n).len()).collect();
        assert!(owned.iter().max().unwrap() - owned.iter().min().unwrap() <= 1, "{owned:?}");
        assert!(after.validate().is_ok());
    }

    #[test]
    fn a_copy_is_not_moved_where_too_few_would_stay_up_to_date() {
        let two = ids(&["n1", "n2"]);
        let map = ClusterMap::spread(4, 1, &two).unwrap().with_copies(&two, 2, 2).unwrap();
        let steps = plan(&map, &ids(&["n1", "n2", "n3"]), None).0;
        assert!(steps.is_empty(), "acks 2 of 2 copies: no copy may be stale: {steps:?}");
    }
}
