//! The cluster's keys in etcd (the one place that names them) and the operations on them:
//!
//! | key | value | written by |
//! |---|---|---|
//! | `PREFIX` `map` | the map document ([`ClusterMap`]: TOML and its checksum line) | `cluster init`; later changes by transactions comparing its previous revision |
//! | `PREFIX` `nodes/ID` | the node's HTTP address, `http://HOST:PORT` | `cluster init` |
//! | `PREFIX` `alive/ID` | the address the node serves on, attached to its lease | `serve --cluster`, kept alive while it runs |
//!
//! One range read over `PREFIX` returns all of them at one etcd revision: a [`View`] is always
//! one consistent moment of the cluster.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use anyhow::Context;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp, WatchOptions, WatchStream,
};
use serde::{Deserialize, Serialize};
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
        let connect = ConnectOptions::new().with_connect_timeout(TIMEOUT).with_timeout(TIMEOUT);
        let client = Client::connect(&endpoints, Some(connect))
            .await
            .with_context(|| format!("connecting to etcd at {}", endpoints.join(",")))?;
        Ok(Self { client, prefix: options.etcd_prefix.clone() })
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The cluster as etcd holds it now; `None` if no map was created under the prefix.
    pub async fn view(&mut self) -> anyhow::Result<Option<View>> {
        let read = self.client.get(self.prefix.as_str(), Some(GetOptions::new().with_prefix())).await;
        let read = read.context("reading the cluster map from etcd")?;
        let (mut map, mut addresses, mut alive) = (None, BTreeMap::new(), BTreeSet::new());
        for kv in read.kvs() {
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
        let mut puts = vec![TxnOp::put(map_key.as_str(), map.to_text().map_err(anyhow::Error::msg)?, None)];
        puts.extend(
            addresses.iter().map(|(id, address)| TxnOp::put(self.key(&format!("nodes/{id}")), address.as_str(), None)),
        );
        let txn = Txn::new().when([Compare::create_revision(map_key.as_str(), CompareOp::Equal, 0)]).and_then(puts);
        let done = self.client.txn(txn).await.context("creating the cluster map in etcd")?;
        anyhow::ensure!(
            done.succeeded(),
            "a cluster map exists already under `{}` in etcd: `shardlite cluster status` shows it",
            self.prefix
        );
        Ok(())
    }

    /// Gives `partition` to node `to` in one transaction on the map's revision as read here,
    /// which fails if the map changed meanwhile; refused if `from` does not own it. The view
    /// after it.
    pub async fn reassign(&mut self, partition: u32, from: &str, to: &str) -> anyhow::Result<View> {
        let map_key = self.key("map");
        let read = self.client.get(map_key.as_str(), None).await.context("reading the cluster map from etcd")?;
        let kv = read.kvs().first().context("no cluster map in etcd")?;
        let mut map = ClusterMap::parse(kv.value_str()?).map_err(anyhow::Error::msg)?;
        let owner = map.owners.get(partition as usize).context("no such partition in the cluster map")?;
        anyhow::ensure!(owner == from, "node `{from}` does not own partition {partition} in etcd: `{owner}` does");
        map.owners[partition as usize] = to.to_owned();
        map.version += 1;
        let put = TxnOp::put(map_key.as_str(), map.to_text().map_err(anyhow::Error::msg)?, None);
        let txn = Txn::new()
            .when([Compare::mod_revision(map_key.as_str(), CompareOp::Equal, kv.mod_revision())])
            .and_then([put]);
        let done = self.client.txn(txn).await.context("changing the cluster map in etcd")?;
        anyhow::ensure!(done.succeeded(), "the cluster map changed in etcd meanwhile (another move?)");
        self.existing_view().await
    }

    /// Grants a lease of `ttl` and attaches `node`'s liveness key (its `address`) to it.
    pub async fn register(&mut self, node: &str, address: &str, ttl: Duration) -> anyhow::Result<i64> {
        let ttl = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let lease = self.client.lease_grant(ttl, None).await.context("granting a lease in etcd")?.id();
        let key = self.key(&format!("alive/{node}"));
        self.client
            .put(key, address, Some(PutOptions::new().with_lease(lease)))
            .await
            .context("registering this node's liveness in etcd")?;
        Ok(lease)
    }

    /// Renews `lease` until it cannot be (etcd unreachable, or the lease expired): the error.
    pub async fn keep_alive(&mut self, lease: i64, every: Duration) -> anyhow::Error {
        let (mut keeper, mut answers) = match self.client.lease_keep_alive(lease).await {
            Ok(pair) => pair,
            Err(err) => return anyhow::Error::new(err).context("renewing the lease"),
        };
        loop {
            if let Err(err) = keeper.keep_alive().await {
                return anyhow::Error::new(err).context("renewing the lease");
            }
            match answers.message().await {
                Ok(Some(answer)) if answer.ttl() > 0 => {}
                Ok(_) => return anyhow::anyhow!("the lease expired"),
                Err(err) => return anyhow::Error::new(err).context("renewing the lease"),
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
    pub async fn watch(&mut self) -> anyhow::Result<WatchStream> {
        let prefix = self.prefix.clone();
        self.client.watch(prefix, Some(WatchOptions::new().with_prefix())).await.context("watching the cluster map")
    }
}
