//! `shardlite cluster move P NODE`: gives partition `P` to node `NODE`, its records with it,
//! while clients go on writing (docs/cluster.md, "Moving a partition"). The partition's owner
//! runs the move (`POST /admin/move` on it): this command finds the owner in the map and asks
//! it, then prints what the owner reports: records and bytes moved, the time it took, the
//! rounds of changes sent while writes went on, how long writes to the partition were held for
//! the last one, the map version that names the new owner, and the stale copy it emptied.
//! A partition with copies moves only to a node keeping an up-to-date copy of it: the owner
//! hands it over (no record travels) and keeps that node's place among its copies. With
//! `--copy-from FROM`, the copy `FROM` keeps of `P` moves to `NODE` instead: a change of the map
//! alone, which names the new copy stale until the owner brought it up to date from a snapshot
//! (docs/cluster.md, "Replicas").

use anyhow::Context;

use shardlite_server::cluster::View;

use super::{etcd::Etcd, runtime, Asking};

/// `shardlite cluster move`.
#[derive(Debug, clap::Args)]
pub struct MoveArgs {
    /// The partition to move.
    partition: u32,
    /// The node to give it to (an id of the map).
    node: String,
    /// Move the copy this node keeps of the partition (a replica), not the partition's owner.
    #[arg(long, value_name = "FROM")]
    copy_from: Option<String>,
    #[command(flatten)]
    asking: Asking,
}

/// Runs `cluster move`.
pub fn run(args: &MoveArgs) -> anyhow::Result<()> {
    let (p, to, copy_from) = (args.partition, &args.node, args.copy_from.as_deref());
    let args = &args.asking;
    let runtime = runtime()?;
    let mut etcd = runtime.block_on(Etcd::connect(&args.etcd))?;
    let view = runtime.block_on(etcd.existing_view())?;
    anyhow::ensure!(
        p < view.map.partitions,
        "partition {p} does not exist: the cluster's partitions are 0..{}",
        view.map.partitions
    );
    anyhow::ensure!(
        view.addresses.contains_key(to),
        "no node `{to}` in the cluster map (its nodes: {})",
        view.addresses.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    if let Some(from) = copy_from {
        let view = runtime.block_on(etcd.move_copies(&[(p, from.to_owned(), to.clone())]))?;
        println!(
            "partition {p}: the copy on {from} moved to {to} (map version {}); {to}'s is brought up to date from a \
             snapshot, and `shardlite cluster status` names it stale until then",
            view.map.version
        );
        return Ok(());
    }
    let owner = view.owner(p);
    anyhow::ensure!(owner.node != *to, "partition {p} is on node `{to}` already");
    let moved = ask_move(args, &view, (p, &owner.node, to))?;
    match args.json {
        true => println!("{}", serde_json::to_string_pretty(&moved)?),
        false => println!("{}", summary((p, &owner.node, to), &moved)),
    }
    Ok(())
}

/// Asks node `from`, the owner of partition `p`, to give it to node `to` (`POST /admin/move`),
/// reaching it at its address in `view`: its answer.
pub(super) fn ask_move(
    args: &Asking,
    view: &View,
    (p, from, to): (u32, &str, &str),
) -> anyhow::Result<serde_json::Value> {
    let address = view.addresses.get(from).with_context(|| format!("no node `{from}` in the cluster map"))?;
    let path = format!("/admin/move?partition={p}&to={to}");
    let node = args.auth.connect(address)?;
    node.json(reqwest::Method::POST, &path, None).with_context(|| format!("node `{from}` did not move partition {p}"))
}

/// One line saying what `from` answered, `moved`, giving partition `p` to `to`.
pub(super) fn summary((p, from, to): (u32, &str, &str), moved: &serde_json::Value) -> String {
    let figure = |name: &str| moved[name].as_f64().unwrap_or_default();
    if moved["handed_over"].as_bool() == Some(true) {
        let stale = moved["stale"].as_array().map(Vec::len).unwrap_or_default();
        return format!(
            "partition {p} handed over from {from} to {to}, which held a copy ({} records): writes to it held \
             {:.1} ms; map version {}; {from} keeps a copy; {stale} copies named stale",
            moved["records"],
            figure("write_pause_ms"),
            moved["map_version"],
        );
    }
    format!(
        "partition {p} moved from {from} to {to}: {} records, {} bytes in {:.2} s ({} rounds of changes); writes \
         to it held {:.1} ms for the last {} changes; map version {}; {} records of the stale copy emptied",
        moved["records"],
        moved["bytes"],
        figure("seconds"),
        moved["rounds"],
        figure("write_pause_ms"),
        moved["last_changes"],
        moved["map_version"],
        moved["dropped"]
    )
}
