//! The cluster map document ([`ClusterMap`]): which node owns each partition and which nodes
//! keep copies of it, how many copies a write needs, at which version, and what a node's view of the cluster is ([`View`]: the map, the nodes' addresses, which are
//! alive). The document is stored in etcd in the form of the data directory's manifest: TOML
//! followed by `checksum = "<crc32c of every byte before that line>"`, so a torn or hand-edited
//! map is refused rather than followed (docs/cluster.md, "The map").

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use shardlite_engine::{manifest, KeyHasher};

/// The newest map format this build writes and reads: 2 has `replicas` and `acks`; a map without
/// replicas is still written as format 1, which older builds read.
pub const FORMAT_VERSION: u32 = 2;

/// Which node owns each partition. Changed only as a whole, by an etcd transaction that
/// compares the previous version, and every change bumps `version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterMap {
    /// Format of this document.
    pub format_version: u32,
    /// Bumped by every change; a node never goes back to a lower one.
    pub version: u64,
    /// Partition count: every node's data directory must have it.
    pub partitions: u32,
    /// Seed of the key hash: every node's data directory must have it.
    pub hash_seed: u64,
    /// The node id owning each partition, by partition number.
    pub owners: Vec<String>,
    /// The other nodes keeping a copy of each partition, by partition number (empty: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<Vec<String>>,
    /// The replicas of each partition whose copy lags (a failed-over owner's, a copy a failover
    /// could not bring up to date): they get no frames and count for no write until they are
    /// brought up to date.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale: Vec<Vec<String>>,
    /// How many copies (the owner's included) must hold a write durably before it is
    /// acknowledged; 1 without replicas.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub acks: u32,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl ClusterMap {
    /// A first map (version 1): `partitions` spread over `nodes` in contiguous runs, the first
    /// `partitions % nodes.len()` nodes holding one more (node 0 owns 0..k, node 1 the next run).
    /// Contiguous runs keep each node's partitions one range, which `cluster status` and a
    /// person reading the map take in at a glance; moves later change single partitions.
    pub fn spread(partitions: u32, hash_seed: u64, nodes: &[String]) -> Result<Self, String> {
        if nodes.is_empty() {
            return Err("a cluster needs at least one node".into());
        }
        let n = u32::try_from(nodes.len()).map_err(|_| "too many nodes".to_owned())?;
        if n > partitions {
            return Err(format!("{n} nodes for {partitions} partitions: every node must own at least one"));
        }
        let (base, extra) = (partitions / n, partitions % n);
        let owners = nodes
            .iter()
            .enumerate()
            .flat_map(|(i, node)| {
                let run = base + u32::from((i as u32) < extra);
                std::iter::repeat_n(node.clone(), run as usize)
            })
            .collect();
        let map = Self {
            format_version: 1,
            version: 1,
            partitions,
            hash_seed,
            owners,
            replicas: Vec::new(),
            stale: Vec::new(),
            acks: 1,
        };
        map.validate()?;
        Ok(map)
    }

    /// This map with `copies` copies of each partition (its owner and the `copies - 1` nodes
    /// after it in `nodes`' order, wrapping round), a write acknowledged once `acks` of them hold
    /// it. Each node thus keeps copies of the partitions of the nodes before it: none is idle.
    pub fn with_copies(mut self, nodes: &[String], copies: u32, acks: u32) -> Result<Self, String> {
        if copies as usize > nodes.len() {
            return Err(format!("{copies} copies of each partition need at least {copies} nodes, not {}", nodes.len()));
        }
        self.replicas = match copies {
            0 | 1 => Vec::new(),
            _ => self
                .owners
                .iter()
                .map(|owner| {
                    let at = nodes.iter().position(|n| n == owner).unwrap_or_default();
                    (1..copies as usize).map(|i| nodes[(at + i) % nodes.len()].clone()).collect()
                })
                .collect(),
        };
        self.set_acks(acks);
        self.validate()?;
        Ok(self)
    }

    /// Sets `acks`, and the format the copies need: 1 without replicas (which older builds read).
    fn set_acks(&mut self, acks: u32) {
        self.acks = acks;
        self.format_version = if self.replicas.is_empty() { 1 } else { FORMAT_VERSION };
    }

    /// Changes the copies of every partition to `copies` and `acks` in place (`cluster copies`).
    /// A partition gains copies on the first of `nodes` after its owner (in that order,
    /// wrapping round) that hold none of it, each named stale: it gets the partition's writes
    /// and is brought up to date from a snapshot, and counts for no write until then. It loses
    /// its stale copies first, then its last. `acks` may not exceed the copies up to date now
    /// (raise it once the new ones are): a write would wait for copies that cannot hold it yet.
    pub fn set_copies(&mut self, nodes: &[String], copies: u32, acks: u32) -> Result<(), String> {
        if copies == 0 || copies as usize > nodes.len() {
            return Err(format!(
                "{copies} copies of each partition: it must be 1 to {} (the nodes owning partitions)",
                nodes.len()
            ));
        }
        let want = copies as usize - 1;
        self.replicas.resize(self.partitions as usize, Vec::new());
        for p in 0..self.partitions {
            while self.replicas[p as usize].len() > want {
                let last = self.replicas[p as usize].len() - 1;
                let at = self.replicas[p as usize].iter().rposition(|n| self.is_stale(p, n)).unwrap_or(last);
                let gone = self.replicas[p as usize].remove(at);
                self.unstale(p, &gone);
            }
            let owner = &self.owners[p as usize];
            let at = nodes.iter().position(|n| n == owner).unwrap_or_default();
            let added: Vec<String> = (1..nodes.len())
                .map(|i| &nodes[(at + i) % nodes.len()])
                .filter(|n| *n != owner && !self.replicas[p as usize].contains(n))
                .take(want.saturating_sub(self.replicas[p as usize].len()))
                .cloned()
                .collect();
            for node in added {
                self.mark_stale(p, &node);
                self.replicas[p as usize].push(node);
            }
        }
        let live = (0..self.partitions).map(|p| 1 + self.live_replicas_of(p).len() as u32).min().unwrap_or(copies);
        if acks > live {
            return Err(format!(
                "acks = {acks}, and some partition has {live} copies up to date: new copies count once they are \
                 (`cluster status` names none stale); raise acks then"
            ));
        }
        if copies == 1 {
            (self.replicas, self.stale) = (Vec::new(), Vec::new());
        }
        self.set_acks(acks);
        self.validate()
    }

    /// Moves the copy `from` keeps of `partition` to `to` (`cluster move P TO --copy-from FROM`):
    /// `to` takes its place among the partition's replicas, named stale (its owner brings it up
    /// to date from a snapshot, and it counts for no write until then). Refused if `from` keeps
    /// no copy of it, `to` holds one (or owns it), or the copies up to date would be fewer than
    /// `acks` meanwhile.
    pub fn move_copy(&mut self, partition: u32, from: &str, to: &str) -> Result<(), String> {
        let slot = self.copy_movable(partition, from, to)?;
        self.unstale(partition, from);
        self.replicas[partition as usize][slot] = to.to_owned();
        self.mark_stale(partition, to);
        self.validate()
    }

    /// Whether `from`'s copy of `partition` may move to `to` ([`ClusterMap::move_copy`]): its
    /// place among the partition's replicas, or why not.
    pub fn copy_movable(&self, partition: u32, from: &str, to: &str) -> Result<usize, String> {
        let p = partition as usize;
        let slot = self.replicas.get(p).and_then(|r| r.iter().position(|n| n == from));
        let Some(slot) = slot else { return Err(format!("node `{from}` keeps no copy of partition {partition}")) };
        if self.owners[p] == to || self.replicas[p].iter().any(|n| n == to) {
            return Err(format!("node `{to}` holds partition {partition} already"));
        }
        let live = 1 + self.live_replicas_of(partition).iter().filter(|n| **n != from).count() as u32;
        if live < self.acks {
            return Err(format!(
                "partition {partition} would have {live} copies up to date while `{to}`'s is brought up, \
                 fewer than acks = {}: lower acks first (`cluster copies`)",
                self.acks
            ));
        }
        Ok(slot)
    }

    /// Makes `to` the owner of `partition`; if `to` kept a copy of it, the old owner keeps one
    /// in its place, so the partition keeps its count of copies (a stale one if `stale`: a dead
    /// owner's).
    pub fn give(&mut self, partition: u32, to: &str, stale: bool) {
        let p = partition as usize;
        let old = std::mem::replace(&mut self.owners[p], to.to_owned());
        if let Some(slot) = self.replicas.get_mut(p).and_then(|r| r.iter_mut().find(|n| *n == to)) {
            *slot = old.clone();
            self.unstale(partition, to);
            if stale {
                self.mark_stale(partition, &old);
            }
        }
    }

    /// Notes that `node`'s copy of `partition` lags.
    pub fn mark_stale(&mut self, partition: u32, node: &str) {
        self.stale.resize(self.partitions as usize, Vec::new());
        let stale = &mut self.stale[partition as usize];
        if !stale.iter().any(|n| n == node) {
            stale.push(node.to_owned());
        }
    }

    /// Notes that `node`'s copy of `partition` is up to date.
    pub fn unstale(&mut self, partition: u32, node: &str) {
        if let Some(stale) = self.stale.get_mut(partition as usize) {
            stale.retain(|n| n != node);
        }
        if self.stale.iter().all(Vec::is_empty) {
            self.stale.clear();
        }
    }

    /// How many copies lag, over every partition.
    pub fn stale_copies(&self) -> usize {
        self.stale.iter().map(Vec::len).sum()
    }

    /// Whether `node`'s copy of `partition` lags.
    pub fn is_stale(&self, partition: u32, node: &str) -> bool {
        self.stale.get(partition as usize).is_some_and(|s| s.iter().any(|n| n == node))
    }

    /// The replicas of `partition` whose copy is up to date: those that get its writes.
    pub fn live_replicas_of(&self, partition: u32) -> Vec<&String> {
        self.replicas_of(partition).iter().filter(|n| !self.is_stale(partition, n)).collect()
    }

    /// How many copies each partition has: its owner and its replicas.
    pub fn copies(&self) -> u32 {
        1 + self.replicas.first().map_or(0, |r| r.len() as u32)
    }

    /// The nodes keeping a copy of `partition` besides its owner.
    pub fn replicas_of(&self, partition: u32) -> &[String] {
        self.replicas.get(partition as usize).map_or(&[], Vec::as_slice)
    }

    /// The document as stored: TOML and its checksum line.
    pub fn to_text(&self) -> Result<String, String> {
        manifest::checksummed_text(self).map_err(|e| e.to_string())
    }

    /// Verifies and reads a stored document.
    pub fn parse(text: &str) -> Result<Self, String> {
        let body = manifest::checked_body(text).map_err(|e| format!("the cluster map: {e}"))?;
        #[derive(Deserialize)]
        struct Format {
            format_version: u32,
        }
        let format: Format = toml::from_str(body).map_err(|e| format!("the cluster map: {e}"))?;
        if format.format_version > FORMAT_VERSION {
            return Err(format!(
                "the cluster map has format {}, newer than this build understands ({FORMAT_VERSION}): \
                 upgrade shardlite",
                format.format_version
            ));
        }
        let map: Self = toml::from_str(body).map_err(|e| format!("the cluster map: {e}"))?;
        map.validate()?;
        Ok(map)
    }

    /// Refuses a map that does not name one owner per partition, or whose copies do not add
    /// up: as many for every partition, none on its owner or twice, `acks` between 1 and them.
    pub fn validate(&self) -> Result<(), String> {
        if self.partitions == 0 || self.owners.len() != self.partitions as usize {
            return Err(format!(
                "the cluster map names {} owners for {} partitions: it needs one per partition",
                self.owners.len(),
                self.partitions
            ));
        }
        if !self.replicas.is_empty() && self.replicas.len() != self.partitions as usize {
            return Err(format!(
                "the cluster map names replicas for {} of {} partitions",
                self.replicas.len(),
                self.partitions
            ));
        }
        let copies = self.copies();
        for (p, replicas) in self.replicas.iter().enumerate() {
            let mut holders: Vec<&String> = replicas.iter().chain([&self.owners[p]]).collect();
            holders.sort();
            holders.dedup();
            if replicas.len() + 1 != copies as usize || holders.len() != copies as usize {
                return Err(format!(
                    "partition {p} has copies on {:?} and its owner `{}`: every partition needs {copies} copies on as many nodes",
                    replicas, self.owners[p]
                ));
            }
        }
        if !self.stale.is_empty() && self.stale.len() != self.partitions as usize {
            return Err(format!(
                "the cluster map names stale copies for {} of {} partitions",
                self.stale.len(),
                self.partitions
            ));
        }
        if let Some(p) = (0..self.stale.len()).find(|&p| self.stale[p].iter().any(|n| !self.replicas[p].contains(n))) {
            return Err(format!("partition {p}: a stale copy on {:?} that is not one of its replicas", self.stale[p]));
        }
        if self.acks == 0 || self.acks > copies {
            return Err(format!(
                "acks = {} with {copies} copies of each partition: it must be 1 to {copies}",
                self.acks
            ));
        }
        Ok(())
    }

    /// Whether `node` may take `partition` as its owner: any node if it has no copies, else
    /// only one keeping an up-to-date copy of it (a handover: it holds every write).
    pub fn may_own(&self, partition: u32, node: &str) -> bool {
        self.replicas_of(partition).is_empty() || self.live_replicas_of(partition).iter().any(|n| *n == node)
    }

    /// Whether `node` owns a partition or keeps a copy of one.
    pub fn holds_any(&self, node: &str) -> bool {
        (0..self.partitions).any(|p| self.owners[p as usize] == node || self.replicas_of(p).iter().any(|n| n == node))
    }

    /// The partitions `node` owns, in order.
    pub fn owned_by(&self, node: &str) -> Vec<u32> {
        (0..self.partitions).filter(|&p| self.owners[p as usize] == node).collect()
    }

    /// The key hasher every node of this map uses.
    pub fn hasher(&self) -> KeyHasher {
        KeyHasher::new(self.hash_seed, self.partitions)
    }
}

/// What a node knows of the cluster at one moment: the map, every node's address and which
/// nodes hold a live lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// The map.
    pub map: ClusterMap,
    /// Each node's address (`http://HOST:PORT`, or `https://` for a node serving TLS), by node id.
    pub addresses: BTreeMap<String, String>,
    /// The nodes whose lease is alive.
    pub alive: BTreeSet<String>,
}

/// Where a partition is served: its owner as the map names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Owner {
    /// The partition.
    pub partition: u32,
    /// The owner's node id.
    #[serde(rename = "owner")]
    pub node: String,
    /// The owner's HTTP address.
    #[serde(rename = "owner_address")]
    pub address: String,
    /// The map version that says so.
    pub map_version: u64,
}

impl View {
    /// The owner of `partition` (which must be below the map's partition count).
    pub fn owner(&self, partition: u32) -> Owner {
        let node = self.map.owners[partition as usize].clone();
        let address = self.addresses.get(&node).cloned().unwrap_or_default();
        Owner { partition, node, address, map_version: self.map.version }
    }

    /// Refuses a view whose map names a node without an address: nothing could reach it.
    pub fn validate(&self) -> Result<(), String> {
        let named = self.map.owners.iter().chain(self.map.replicas.iter().flatten());
        match named.into_iter().find(|node| !self.addresses.contains_key(*node)) {
            Some(node) => Err(format!("the cluster map names node `{node}`, which has no address")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn spreads_partitions_in_contiguous_runs() {
        let map = ClusterMap::spread(8, 7, &nodes(&["a", "b", "c"])).unwrap();
        assert_eq!(map.owners, nodes(&["a", "a", "a", "b", "b", "b", "c", "c"]));
        assert_eq!(map.owned_by("b"), [3, 4, 5]);
        assert_eq!(map.version, 1);
        assert!(ClusterMap::spread(2, 7, &nodes(&["a", "b", "c"])).unwrap_err().contains("at least one"));
        assert!(ClusterMap::spread(2, 7, &[]).is_err());
    }

    #[test]
    fn the_document_is_toml_and_a_checksum_line_as_docs_cluster_md_shows() {
        let map = ClusterMap::spread(8, 6001118325060159828, &nodes(&["n1", "n2", "n3"])).unwrap();
        let text = "format_version = 1\nversion = 1\npartitions = 8\nhash_seed = 6001118325060159828\n\
                    owners = [\"n1\", \"n1\", \"n1\", \"n2\", \"n2\", \"n2\", \"n3\", \"n3\"]\n\
                    checksum = \"25a90e43\"\n";
        assert_eq!(map.to_text().unwrap(), text);
    }

    #[test]
    fn the_document_round_trips_and_damage_is_caught() {
        let map = ClusterMap::spread(4, u64::MAX, &nodes(&["a", "b"])).unwrap();
        let text = map.to_text().unwrap();
        assert!(text.ends_with("\"\n") && text.contains("checksum = "), "{text}");
        assert_eq!(ClusterMap::parse(&text).unwrap(), map);
        let edited = text.replace("\"b\"", "\"c\"");
        assert!(ClusterMap::parse(&edited).unwrap_err().contains("checksum mismatch"));
        let newer = ClusterMap { format_version: FORMAT_VERSION + 1, ..map.clone() };
        assert!(ClusterMap::parse(&newer.to_text().unwrap()).unwrap_err().contains("upgrade"));
        let short = ClusterMap { owners: nodes(&["a"]), ..map };
        assert!(ClusterMap::parse(&short.to_text().unwrap()).unwrap_err().contains("one per partition"));
    }

    #[test]
    fn copies_go_to_the_nodes_after_the_owner_and_must_add_up() {
        let ids = nodes(&["a", "b", "c"]);
        let map = ClusterMap::spread(6, 7, &ids).unwrap().with_copies(&ids, 3, 2).unwrap();
        assert_eq!(map.replicas_of(0), nodes(&["b", "c"]));
        assert_eq!(map.replicas_of(5), nodes(&["a", "b"]));
        assert_eq!((map.copies(), map.acks, map.format_version), (3, 2, 2));
        let text = map.to_text().unwrap();
        assert!(text.contains("acks = 2") && text.contains("replicas = [["), "{text}");
        assert_eq!(ClusterMap::parse(&text).unwrap(), map);
        let two = ClusterMap::spread(6, 7, &ids).unwrap().with_copies(&ids, 2, 2).unwrap();
        assert_eq!(two.replicas_of(2), nodes(&["c"]));
        assert!(ClusterMap::spread(6, 7, &ids).unwrap().with_copies(&ids, 4, 2).unwrap_err().contains("4 nodes"));
        assert!(ClusterMap::spread(6, 7, &ids).unwrap().with_copies(&ids, 3, 4).unwrap_err().contains("acks = 4"));
        let mut on_owner = map.clone();
        on_owner.replicas[1] = nodes(&["a", "b"]);
        assert!(on_owner.validate().unwrap_err().contains("partition 1"));
        let mut failed_over = map.clone();
        failed_over.give(0, "b", true);
        assert_eq!((failed_over.owners[0].as_str(), failed_over.replicas_of(0)), ("b", &nodes(&["a", "c"])[..]));
        assert_eq!(failed_over.live_replicas_of(0), [&"c".to_owned()], "the dead owner's copy is stale");
        assert_eq!(ClusterMap::parse(&failed_over.to_text().unwrap()).unwrap(), failed_over);
        failed_over.give(0, "a", false);
        assert!(failed_over.stale.is_empty(), "an owner again: its copy is the partition");
    }

    #[test]
    fn copies_change_later_the_new_ones_stale_until_brought_up() {
        let ids = nodes(&["a", "b", "c"]);
        let mut map = ClusterMap::spread(6, 7, &ids).unwrap();
        assert!(map.clone().set_copies(&ids, 3, 2).unwrap_err().contains("acks = 2"), "no copy is up to date yet");
        map.set_copies(&ids, 3, 1).unwrap();
        assert_eq!((map.copies(), map.acks, map.format_version), (3, 1, FORMAT_VERSION));
        assert_eq!(map.replicas_of(0), nodes(&["b", "c"]), "the nodes after the owner, as `init` places them");
        assert!(map.live_replicas_of(0).is_empty(), "new copies are stale until brought up");
        for p in 0..6 {
            for n in map.replicas_of(p).to_vec() {
                map.unstale(p, &n);
            }
        }
        map.set_copies(&ids, 3, 2).unwrap();
        assert_eq!(map.acks, 2);
        map.mark_stale(4, "a");
        map.set_copies(&ids, 2, 2).unwrap();
        assert_eq!(map.replicas_of(4), nodes(&["b"]), "a stale copy goes first");
        assert_eq!(map.replicas_of(0), nodes(&["b"]), "else the last");
        assert!(map.stale.is_empty());
        assert_eq!(ClusterMap::parse(&map.to_text().unwrap()).unwrap(), map);
        map.set_copies(&ids, 1, 1).unwrap();
        assert_eq!((map.copies(), map.format_version), (1, 1));
        assert!(map.set_copies(&ids, 4, 1).unwrap_err().contains("1 to 3"));
    }

    #[test]
    fn a_copy_moves_to_another_node_stale_until_brought_up() {
        let ids = nodes(&["a", "b", "c"]);
        let mut map = ClusterMap::spread(6, 7, &ids).unwrap().with_copies(&ids, 3, 2).unwrap();
        map.move_copy(0, "c", "d").unwrap();
        assert_eq!((map.replicas_of(0), map.live_replicas_of(0)), (&nodes(&["b", "d"])[..], vec![&"b".to_owned()]));
        assert!(map.is_stale(0, "d"));
        assert!(map.clone().move_copy(0, "b", "c").unwrap_err().contains("fewer than acks = 2"), "d is not up yet");
        assert!(map.clone().move_copy(0, "c", "e").unwrap_err().contains("keeps no copy"));
        assert!(map.clone().move_copy(1, "b", "a").unwrap_err().contains("already"), "a owns it");
        map.unstale(0, "d");
        map.move_copy(0, "b", "c").unwrap();
        assert_eq!(map.replicas_of(0), nodes(&["c", "d"]));
        assert_eq!(ClusterMap::parse(&map.to_text().unwrap()).unwrap(), map);
        let single = ClusterMap::spread(6, 7, &ids).unwrap().with_copies(&ids, 1, 1).unwrap();
        assert_eq!((single.format_version, single.copies()), (1, 1), "no replicas: format 1, as before");
    }

    #[test]
    fn a_view_names_each_partitions_owner() {
        let map = ClusterMap::spread(4, 1, &nodes(&["a", "b"])).unwrap();
        let addresses = BTreeMap::from([("a".to_owned(), "http://x:1".to_owned())]);
        let view = View { map, addresses, alive: BTreeSet::new() };
        assert_eq!(view.owner(1).address, "http://x:1");
        assert!(view.validate().unwrap_err().contains("`b`"));
    }
}
