//! What a failover asks of the cluster's nodes, shared by its plans with and without replicas
//! (`super::failover`, `super::promotion`): whether a node may be failed over (dead, owning
//! partitions), and a request to a live node, asked again while it refuses.

use std::time::{Duration, Instant};

use anyhow::Context;
use shardlite_server::cluster::View;

/// How long a survivor's refusal to take a partition over is asked again.
const REFUSED_FOR: Duration = Duration::from_secs(2);

/// The partitions of `dead`; refused unless `dead` is a node of the map holding no lease and
/// owning partitions.
pub(super) fn dead_owners_partitions(view: &View, dead: &str) -> anyhow::Result<Vec<u32>> {
    anyhow::ensure!(
        view.addresses.contains_key(dead),
        "no node `{dead}` in the cluster map (its nodes: {})",
        view.addresses.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    anyhow::ensure!(
        !view.alive.contains(dead),
        "node `{dead}` holds its lease: a failover takes over only a dead node's partitions (stop it, or wait \
         until its lease expires)"
    );
    let partitions = view.map.owned_by(dead);
    anyhow::ensure!(!partitions.is_empty(), "node `{dead}` owns no partition (map version {})", view.map.version);
    Ok(partitions)
}

/// Sends `method url` (with `body`) with the node `token`; the answer's body if it succeeded. A
/// refusal (409) is asked again for up to [`REFUSED_FOR`]: the node's own view may not show the
/// dead node's lease gone yet (its watch is milliseconds behind etcd).
pub(super) async fn ask(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<&[u8]>,
    token: Option<&str>,
) -> anyhow::Result<bytes::Bytes> {
    let deadline = Instant::now() + REFUSED_FOR;
    loop {
        let mut request = client.request(method.clone(), url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.body(body.to_vec());
        }
        let answer = request.send().await.with_context(|| format!("asking {url}"))?;
        let status = answer.status();
        let bytes = answer.bytes().await?;
        if status == reqwest::StatusCode::CONFLICT && Instant::now() < deadline {
            tokio::time::sleep(REFUSED_FOR / 20).await;
            continue;
        }
        anyhow::ensure!(status.is_success(), "{method} {url}: {status} {}", String::from_utf8_lossy(&bytes));
        return Ok(bytes);
    }
}
