//! The cluster map document ([`ClusterMap`]): which node owns each partition, at which version,
//! and what a node's view of the cluster is ([`View`]: the map, the nodes' addresses, which are
//! alive). The document is stored in etcd in the form of the data directory's manifest: TOML
//! followed by `checksum = "<crc32c of every byte before that line>"`, so a torn or hand-edited
//! map is refused rather than followed (docs/cluster.md, "The map").

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use shardlite_engine::{manifest, KeyHasher};

/// The map format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

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
        let map = Self { format_version: FORMAT_VERSION, version: 1, partitions, hash_seed, owners };
        map.validate()?;
        Ok(map)
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

    /// Refuses a map that does not name one owner per partition.
    pub fn validate(&self) -> Result<(), String> {
        if self.partitions == 0 || self.owners.len() != self.partitions as usize {
            return Err(format!(
                "the cluster map names {} owners for {} partitions: it needs one per partition",
                self.owners.len(),
                self.partitions
            ));
        }
        Ok(())
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
        match self.map.owners.iter().find(|node| !self.addresses.contains_key(*node)) {
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
    fn a_view_names_each_partitions_owner() {
        let map = ClusterMap::spread(4, 1, &nodes(&["a", "b"])).unwrap();
        let addresses = BTreeMap::from([("a".to_owned(), "http://x:1".to_owned())]);
        let view = View { map, addresses, alive: BTreeSet::new() };
        assert_eq!(view.owner(1).address, "http://x:1");
        assert!(view.validate().unwrap_err().contains("`b`"));
    }
}
