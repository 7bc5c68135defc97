//! The cluster's keys in etcd (the one place that names them) and the operations on them:
//!
//! | key | value | written by |
//! |---|---|---|
//! | `PREFIX` `map` | the map document ([`ClusterMap`]: TOML and its checksum line) | `cluster init`; later changes by transactions comparing its previous revision |
//! | `PREFIX` `nodes/ID` | the node's HTTP address, `http://HOST:PORT` | `cluster init`, `cluster add-node` (removed by `cluster remove-node`) |
//! | `PREFIX` `alive/ID` | the address the node serves on, attached to its lease | `serve --cluster`, kept alive while it runs |
//! | `PREFIX` `replicas/ID` | the node's Litestream replica URL (partition N at `<URL>/pNNNN`) | `serve --cluster --litestream-replica`, at each start |
//! | `PREFIX` `stopped/ID` | empty: the node stopped in order (no failover wanted) | `serve --cluster` at an orderly stop; removed at its next start |
//! | `PREFIX` `failover/ID` | the node failing `ID` over, attached to that node's lease | `serve --auto-failover`, while it runs one |
//!
//! One range read over `PREFIX` returns all of them at one etcd revision: a [`View`] is always
//! one consistent moment of the cluster.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use shardlite_etcd::{Client, Compare, TxnOp, Watch};
use shardlite_server::cluster::{ClusterMap, View};

/// The prefix of the cluster's keys unless `--etcd-prefix` says otherwise.
const DEFAULT_PREFIX: &str = "/shardlite/";

/// How long connecting to etcd, and each request to it, may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Where the cluster's map is: etcd's endpoints and the prefix of the cluster's keys.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
#[command(next_help_heading = "Cluster")]
#[serde(default, deny_unknown_fields)]
pub struct EtcdOptions {
    /// etcd's endpoints, comma-separated: http://HOST:PORT[,http://HOST:PORT...].
    #[arg(long, value_name = "URLS")]
    pub etcd: Option<String>,
    /// Prefix of the cluster's keys in etcd (one etcd can hold several clusters).
    #[arg(long, value_name = "PREFIX", default_value = DEFAULT_PREFIX)]
    pub etcd_prefix: String,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self { etcd: None, etcd_prefix: DEFAULT_PREFIX.into() }
    }
}

/// etcd answered that the lease being renewed has expired.
#[derive(Debug)]
pub struct Expired;

impl std::fmt::Display for Expired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the lease expired")
    }
}

impl std::error::Error for Expired {}

/// A connection to etcd, at the cluster's prefix.
#[derive(Clone)]
pub struct Etcd {
    client: Client,
    prefix: String,
}

impl Etcd {
    /// Connects to the endpoints `options` names.
    pub async fn connect(options: &EtcdOptions) -> anyhow::Result<Self> {
        let endpoints: Vec<&str> =
            options.etcd.as_deref().unwrap_or_default().split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
        anyhow::ensure!(!endpoints.is_empty(), "no etcd endpoint: give --etcd http://HOST:PORT[,...]");
        anyhow::ensure!(options.etcd_prefix.ends_with('/'), "--etcd-prefix must end with `/`");
        let client = Client::with_timeout(&endpoints, TIMEOUT)
            .with_context(|| format!("connecting to etcd at {}", endpoints.join(",")))?;
        Ok(Self { client, prefix: options.etcd_prefix.clone() })
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The cluster as etcd holds it now; `None` if no map was created under the prefix.
    pub async fn view(&mut self) -> anyhow::Result<Option<View>> {
        let read = self.client.get_prefix(&self.prefix).await.context("reading the cluster map from etcd")?;
        let (mut map, mut addresses, mut alive) = (None, BTreeMap::new(), BTreeSet::new());
        for kv in &read {
            let (key, value) = (kv.key_str()?, kv.value_str()?);
            let name = key.strip_prefix(&self.prefix).unwrap_or(key);
            if name == "map" {
                map = Some(ClusterMap::parse(value).map_err(anyhow::Error::msg)?);
            } else if let Some(id) = name.strip_prefix("nodes/") {
                addresses.insert(id.to_owned(), value.to_owned());
            } else if let Some(id) = name.strip_prefix("alive/") {
                alive.insert(id.to_owned());
            }
        }
        Ok(map.map(|map| View { map, addresses, alive }))
    }

    /// The view, or an error saying there is no map yet.
    pub async fn existing_view(&mut self) -> anyhow::Result<View> {
        let prefix = self.prefix.clone();
        self.view().await?.with_context(|| {
            format!("no cluster map under `{prefix}` in etcd: create one with `shardlite cluster init`")
        })
    }

    /// Stores a new cluster (its map and its nodes' addresses) in one transaction, which fails
    /// if a map exists already: a cluster is created once.
    pub async fn create(&mut self, map: &ClusterMap, addresses: &BTreeMap<String, String>) -> anyhow::Result<()> {
        let map_key = self.key("map");
        let mut puts = vec![TxnOp::put(map_key.as_str(), map.to_text().map_err(anyhow::Error::msg)?)];
        puts.extend(addresses.iter().map(|(id, address)| TxnOp::put(self.key(&format!("nodes/{id}")), address)));
        let absent = [Compare::CreateRevision(map_key, 0)];
        let done = self.client.txn(&absent, &puts).await.context("creating the cluster map in etcd")?;
        anyhow::ensure!(
            done,
            "a cluster map exists already under `{}` in etcd: `shardlite cluster status` shows it",
            self.prefix
        );
        Ok(())
    }

    /// Gives `partition` to node `to` in one transaction on the map's revision as read here,
    /// which fails if the map changed meanwhile; refused if `from` does not own it. If `to`
    /// kept a copy of it, `from` keeps one in its place; the copies of the nodes of `stale` are
    /// named stale. The view after it.
    pub async fn reassign(&mut self, partition: u32, from: &str, to: &str, stale: &[String]) -> anyhow::Result<View> {
        let change = |map: &mut ClusterMap| {
            let owner = map.owners.get(partition as usize).context("no such partition in the cluster map")?;
            anyhow::ensure!(owner == from, "node `{from}` does not own partition {partition} in etcd: `{owner}` does");
            // The map may have changed since the owner looked.
            anyhow::ensure!(
                map.may_own(partition, to),
                "node `{to}` keeps no up-to-date copy of partition {partition} in etcd"
            );
            map.give(partition, to, false);
            for node in stale {
                map.mark_stale(partition, node);
            }
            Ok(())
        };
        self.change_map(change, Vec::new()).await.with_context(|| format!("giving partition {partition} to `{to}`"))
    }

    /// Sets every partition's copies to `copies` and the map's acks to `acks` (`acks` of `None`:
    /// as they are, but no more than `copies`), in one transaction on the map's revision as read
    /// here ([`ClusterMap::set_copies`]: new copies go to the nodes owning partitions, in id
    /// order after each owner, stale until brought up to date). The view after it.
    pub async fn set_copies(&mut self, copies: u32, acks: Option<u32>) -> anyhow::Result<View> {
        let change = |map: &mut ClusterMap| {
            let owning: std::collections::BTreeSet<String> = map.owners.iter().cloned().collect();
            let nodes: Vec<String> = owning.into_iter().collect();
            let acks = acks.unwrap_or(map.acks.min(copies));
            map.set_copies(&nodes, copies, acks).map_err(anyhow::Error::msg)
        };
        self.change_map(change, Vec::new()).await.with_context(|| format!("setting {copies} copies of each partition"))
    }

    /// Moves each `(partition, from, to)` of `moves`, `from`'s copy of the partition to `to`
    /// ([`ClusterMap::move_copy`]), in one transaction on the map's revision as read here. The
    /// view after it.
    pub async fn move_copies(&mut self, moves: &[(u32, String, String)]) -> anyhow::Result<View> {
        let change = |map: &mut ClusterMap| {
            for (partition, from, to) in moves {
                map.move_copy(*partition, from, to)
                    .map_err(anyhow::Error::msg)
                    .with_context(|| format!("moving `{from}`'s copy of partition {partition}"))?;
            }
            Ok(())
        };
        self.change_map(change, Vec::new()).await
    }

    /// Adds node `id` at `address` to the cluster, owning nothing yet (a spare): refused if the
    /// cluster has a node of that id, or no map.
    pub async fn add_node(&mut self, id: &str, address: &str) -> anyhow::Result<()> {
        let key = self.key(&format!("nodes/{id}"));
        let checks = [Compare::CreateRevision(key.clone(), 0)];
        let view = self.existing_view().await?;
        anyhow::ensure!(!view.addresses.contains_key(id), "the cluster has a node `{id}` already");
        let done = self.client.txn(&checks, &[TxnOp::put(key.as_str(), address)]).await.context("adding the node")?;
        anyhow::ensure!(done, "the cluster has a node `{id}` already");
        Ok(())
    }

    /// Removes node `id` from the cluster (its address, replica URL and stopped mark), in one
    /// transaction on the map's revision as read here: refused while it owns a partition or
    /// keeps a copy of one, or holds its lease (it runs).
    pub async fn remove_node(&mut self, id: &str) -> anyhow::Result<()> {
        let (map, revision) = self.read_map().await?;
        let view = self.existing_view().await?;
        anyhow::ensure!(view.addresses.contains_key(id), "no node `{id}` in the cluster map");
        anyhow::ensure!(
            !map.holds_any(id),
            "node `{id}` owns partitions or keeps copies: move them off first (`shardlite cluster balance --drain {id}`)"
        );
        anyhow::ensure!(!view.alive.contains(id), "node `{id}` is running: stop it first");
        let checks = [
            Compare::ModRevision(self.key("map"), revision),
            Compare::CreateRevision(self.key(&format!("alive/{id}")), 0),
        ];
        let gone = ["nodes", "replicas", "stopped"].map(|k| TxnOp::Delete(self.key(&format!("{k}/{id}"))));
        let done = self.client.txn(&checks, &gone).await.context("removing the node")?;
        anyhow::ensure!(done, "the cluster map changed meanwhile, or node `{id}` started: try again");
        Ok(())
    }

    /// Names `node`'s copies of `partitions` up to date again (no longer stale), in one
    /// transaction on the map's revision as read here. The view after it.
    pub async fn refresh(&mut self, node: &str, partitions: &[u32]) -> anyhow::Result<View> {
        let change = |map: &mut ClusterMap| {
            for &p in partitions {
                map.unstale(p, node);
            }
            Ok(())
        };
        self.change_map(change, Vec::new()).await.with_context(|| format!("naming `{node}`'s copies up to date"))
    }

    /// Gives each partition of `assigned` to its node, taking them from the dead node `dead`
    /// (whose copy, where it keeps one, is stale, as are the copies of `stale`), in one
    /// transaction that fails if the map is no longer at `version` (another failover or move
    /// won) or `dead` holds a lease again (it came back: it serves them itself). The view after it.
    pub async fn fail_over(
        &mut self,
        dead: &str,
        assigned: &BTreeMap<u32, String>,
        stale: &[(u32, String)],
        version: u64,
    ) -> anyhow::Result<View> {
        let change = |map: &mut ClusterMap| {
            anyhow::ensure!(map.version == version, "the map is at version {}, not {version}", map.version);
            for (&p, to) in assigned {
                anyhow::ensure!(map.owners[p as usize] == dead, "node `{dead}` does not own partition {p} in etcd");
                map.give(p, to, true);
            }
            for (p, node) in stale {
                map.mark_stale(*p, node);
            }
            Ok(())
        };
        let alive = self.key(&format!("alive/{dead}"));
        let gone = Compare::CreateRevision(alive, 0);
        let context = || format!("giving the partitions of node `{dead}` to the survivors (did `{dead}` come back?)");
        self.change_map(change, vec![gone]).await.with_context(context)
    }

    /// Reads the map, applies `change` to it and writes it with its version bumped, in one
    /// transaction that fails if the map changed since the read or any of `also` fails.
    async fn change_map(
        &mut self,
        change: impl FnOnce(&mut ClusterMap) -> anyhow::Result<()>,
        also: Vec<Compare>,
    ) -> anyhow::Result<View> {
        let (mut map, revision) = self.read_map().await?;
        change(&mut map)?;
        map.validate().map_err(anyhow::Error::msg)?;
        map.version += 1;
        let map_key = self.key("map");
        let put = TxnOp::put(map_key.as_str(), map.to_text().map_err(anyhow::Error::msg)?);
        let mut compares = vec![Compare::ModRevision(map_key, revision)];
        compares.extend(also);
        let done = self.client.txn(&compares, &[put]).await.context("changing the cluster map in etcd")?;
        anyhow::ensure!(done, "the cluster map changed in etcd meanwhile (another move or failover?)");
        self.existing_view().await
    }

    /// The map as stored, and the revision it was last changed at (for a transaction that
    /// fails if it changed since).
    async fn read_map(&mut self) -> anyhow::Result<(ClusterMap, i64)> {
        let read = self.client.get(&self.key("map")).await.context("reading the cluster map from etcd")?;
        let kv = read.context("no cluster map in etcd")?;
        Ok((ClusterMap::parse(kv.value_str()?).map_err(anyhow::Error::msg)?, kv.mod_revision))
    }

    /// Records where `node`'s Litestream replicates its partitions.
    pub async fn record_replica(&mut self, node: &str, url: &str) -> anyhow::Result<()> {
        self.client.put(&self.key(&format!("replicas/{node}")), url, None).await.context("recording the replica")?;
        Ok(())
    }

    /// Where `node`'s Litestream replicates its partitions, if it said.
    pub async fn replica(&mut self, node: &str) -> anyhow::Result<Option<String>> {
        self.value(&format!("replicas/{node}")).await
    }

    /// Marks `node` as stopped in order (`stopped`), or clears the mark (at its start).
    pub async fn mark_stopped(&mut self, node: &str, stopped: bool) -> anyhow::Result<()> {
        let key = self.key(&format!("stopped/{node}"));
        match stopped {
            true => self.client.put(&key, "", None).await,
            false => self.client.delete(&key).await.map(drop),
        }
        .context("marking the node stopped")
    }

    /// Whether `node` stopped in order (and has not started since).
    pub async fn stopped(&mut self, node: &str) -> anyhow::Result<bool> {
        Ok(self.value(&format!("stopped/{node}")).await?.is_some())
    }

    /// Claims the failover of `dead` for `by` while `lease` lives: false if another node holds
    /// the claim.
    pub async fn claim_failover(&mut self, dead: &str, by: &str, lease: i64) -> anyhow::Result<bool> {
        let key = self.key(&format!("failover/{dead}"));
        let put = TxnOp::Put { key: key.clone(), value: by.to_owned(), lease: Some(lease) };
        self.client.txn(&[Compare::CreateRevision(key, 0)], &[put]).await.context("claiming the failover")
    }

    /// Gives the claim on `dead`'s failover up.
    pub async fn release_failover(&mut self, dead: &str) -> anyhow::Result<()> {
        self.client.delete(&self.key(&format!("failover/{dead}"))).await.context("releasing the failover")?;
        Ok(())
    }

    /// The value of `PREFIX name`, if there is one.
    async fn value(&mut self, name: &str) -> anyhow::Result<Option<String>> {
        let read = self.client.get(&self.key(name)).await.with_context(|| format!("reading `{name}` in etcd"))?;
        read.map(|kv| Ok(kv.value_str()?.to_owned())).transpose()
    }

    /// Grants a lease of `ttl` and attaches `node`'s liveness key (its `address`) to it.
    pub async fn register(&mut self, node: &str, address: &str, ttl: Duration) -> anyhow::Result<i64> {
        let ttl = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let lease = self.client.lease_grant(ttl).await.context("granting a lease in etcd")?;
        let key = self.key(&format!("alive/{node}"));
        self.client.put(&key, address, Some(lease)).await.context("registering this node's liveness in etcd")?;
        Ok(lease)
    }

    /// Renews `lease` until it cannot be (etcd unreachable, or the lease expired): the error.
    /// After each renewal, `renewed` is told until when it holds: the moment the renewal was
    /// sent plus the time to live etcd answered (etcd counts from later, when it got it).
    pub async fn keep_alive(&mut self, lease: i64, every: Duration, renewed: impl Fn(Instant)) -> anyhow::Error {
        loop {
            let sent = Instant::now();
            // No answer for a whole time to live: the lease has lapsed here anyway.
            match tokio::time::timeout(every * 3, self.client.lease_keep_alive(lease)).await {
                Ok(Ok(ttl)) if ttl > 0 => renewed(sent + Duration::from_secs(ttl.unsigned_abs())),
                Ok(Ok(_)) => return anyhow::Error::new(Expired),
                Ok(Err(err)) => return anyhow::Error::new(err).context("renewing the lease"),
                Err(_) => return anyhow::anyhow!("etcd did not answer a renewal of the lease in time"),
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Ends `lease` at once: the node's liveness key goes with it.
    pub async fn revoke(&mut self, lease: i64) -> anyhow::Result<()> {
        self.client.lease_revoke(lease).await.context("revoking the lease")?;
        Ok(())
    }

    /// A stream of every change under the prefix from now on.
    pub async fn watch(&mut self) -> anyhow::Result<Watch> {
        self.client.watch_prefix(&self.prefix).await.context("watching the cluster map")
    }
}
