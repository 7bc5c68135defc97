//! Which requests are another node's, and what this node answers for them.
//!
//! ```text
//!  request ─> partition of its key (or its ?partition=) ─> owner in the map
//!     owner is this node, lease held ─────────────> served here
//!     owner is this node, lease not held ─────────> 503 fenced
//!     owner elsewhere, request not yet forwarded ─> forwarded (default) | 421 (--redirect)
//!     owner elsewhere, request already forwarded ─> 421 (never forwarded twice)
//!  a read with `Shardlite-Read-From: copy`, this node keeping an up-to-date copy that follows
//!  its owner's stream ─> served here from the copy (`Shardlite-Copy: THIS_NODE`)
//! ```
//!
//! `/kv/{key}` goes by its key's partition, `/keys` and `/export` by their `partition=`; a
//! request this node cannot place (a malformed key, no partition given) is served here, where
//! it gets its usual 400. The rest (`/batch` aside, split in `super::batch`) acts on this node.
//! A read served here ([`read`]) keeps its answer only if no move gave the partition away while
//! it ran, else it goes to the new owner (docs/cluster.md, "Reads racing the flip").

use std::{future::Future, time::Duration};

use bytes::Bytes;
use hyper::{
    body::Incoming,
    header::{HeaderName, HeaderValue},
    http::request::Parts,
    HeaderMap, Method, Request,
};

use crate::{
    cluster::{Cluster, Owner},
    http::{
        body::{self, Limit},
        error::ApiError,
        forward::{self, FORWARDED_BY},
        key::parse_key,
        read_from::{self, ReadFrom},
        response::Response,
        routes::{kv_key, Route},
        state::State,
    },
};

/// Where the request `req` for one partition goes: `Ok(Some(owner))` to another node, `Ok(None)`
/// here (or it is no request for one partition); refused while this node does not hold its
/// lease.
pub fn owner_elsewhere(cluster: &Cluster, route: Route, req: &Request<Incoming>) -> Result<Option<Owner>, ApiError> {
    match partition_of(cluster, route, req) {
        Some(partition) => place(cluster, partition),
        None => Ok(None),
    }
}

/// The partition the request `req` reads (`GET` or `HEAD` of `/kv/{key}`, `/keys`,
/// `/export`), if it is such a read; `None` for any other request.
pub fn read_of(cluster: &Cluster, route: Route, req: &Request<Incoming>) -> Option<u32> {
    let reads = match route {
        Route::Kv => matches!(*req.method(), Method::GET | Method::HEAD),
        Route::Keys | Route::Export => true,
        _ => false,
    };
    reads.then(|| partition_of(cluster, route, req)).flatten()
}

/// Answers the read `head` of partition `partition`: made here by `serve` while this node owns
/// the partition, else asked of its owner (or 421, as in [`answer`]). An answer made here is
/// kept only if no move gave the partition away meanwhile (the count is read before the map,
/// and the move counts after following the new map, before emptying the copy here): else the
/// read is placed again, and goes to the new owner.
pub async fn read<F>(
    state: &State,
    cluster: &Cluster,
    partition: u32,
    head: &Parts,
    serve: impl Fn() -> F,
) -> Result<Response, ApiError>
where
    F: Future<Output = Result<Response, ApiError>>,
{
    let copy = match read_from::parse(&head.headers)? {
        ReadFrom::Copy(within) => follows_here(state, cluster, partition, within),
        ReadFrom::Owner => false,
    };
    if copy {
        // Node ids are header-safe (the map checks them).
        let here = HeaderValue::from_str(cluster.node()).unwrap_or(HeaderValue::from_static("?"));
        return match serve().await {
            Ok(mut answer) => {
                answer.headers_mut().insert(COPY, here);
                Ok(answer)
            }
            Err(refused) => Err(refused.with_header(COPY, here)),
        };
    }
    loop {
        let departures = cluster.moves().departures(partition);
        if let Some(owner) = place(cluster, partition)? {
            if !forwards(cluster, &head.headers) {
                return Err(ApiError::misdirected(owner, cluster.node()));
            }
            return state.forwarder.forward(&owner, cluster.node(), head, Bytes::new()).await;
        }
        pause_read(state).await;
        let answer = serve().await;
        if cluster.moves().departures(partition) == departures {
            return answer;
        }
    }
}

/// The answer's header naming the node whose copy answered.
const COPY: HeaderName = HeaderName::from_static("shardlite-copy");

/// Whether this node keeps a copy of `partition` that the map names up to date and that follows
/// its owner's stream: not the owner (its own reads are linearizable), not stale, not waiting
/// for a snapshot, its owner not sealed (a failover under way), and a frame of the owner's taken
/// `within` this long, if bounded.
fn follows_here(state: &State, cluster: &Cluster, partition: u32, within: Option<Duration>) -> bool {
    let view = cluster.view();
    let (map, me) = (&view.map, cluster.node());
    let Some(owner) = map.owners.get(partition as usize) else { return false };
    owner != me
        && map.replicas_of(partition).iter().any(|n| n == me)
        && !map.is_stale(partition, me)
        && state.backend.copy_heard(owner, partition).is_some_and(|ago| within.is_none_or(|bound| ago <= bound))
}

/// The partition of a request for one partition: `/kv/{key}` by its key, `/keys` and
/// `/export` by their `partition=`; `None` for others, and for those this node cannot place.
fn partition_of(cluster: &Cluster, route: Route, req: &Request<Incoming>) -> Option<u32> {
    match route {
        Route::Kv => {
            parse_key(kv_key(req.uri().path())).ok().map(|key| cluster.view().map.hasher().locate(&key).partition)
        }
        Route::Keys | Route::Export => req.uri().query().and_then(partition_param),
        _ => None,
    }
}

/// Where `partition` is served: `Ok(None)` here (refused while this node does not hold its
/// lease), else its owner.
fn place(cluster: &Cluster, partition: u32) -> Result<Option<Owner>, ApiError> {
    match cluster.elsewhere(partition) {
        Some(owner) => Ok(Some(owner)),
        None => ensure_leased(cluster, partition).map(|()| None),
    }
}

/// Refuses to serve this node's partition `partition` while it does not hold its lease:
/// another node may have been given it by a failover.
fn ensure_leased(cluster: &Cluster, partition: u32) -> Result<(), ApiError> {
    match cluster.lease().held() {
        true => Ok(()),
        false => Err(ApiError::fenced(cluster.node(), partition)),
    }
}

/// Whether this node forwards a request with `headers` for another node's partition: not when
/// it redirects, nor a request forwarded already.
fn forwards(cluster: &Cluster, headers: &HeaderMap) -> bool {
    !cluster.redirects() && !headers.contains_key(FORWARDED_BY)
}

/// Waits while a move holds frozen the partition a write (`PUT` or `DELETE` of `/kv/{key}`)
/// goes to, and holds it while the write runs: the guard to keep until it is answered.
pub async fn hold_write(
    cluster: &Cluster,
    route: Route,
    req: &Request<Incoming>,
) -> Vec<tokio::sync::OwnedRwLockReadGuard<()>> {
    if route != Route::Kv || matches!(*req.method(), Method::GET | Method::HEAD) {
        return Vec::new();
    }
    let Ok(key) = parse_key(kv_key(req.uri().path())) else { return Vec::new() };
    let partition = cluster.view().map.hasher().locate(&key).partition;
    cluster.moves().hold([partition]).await
}

/// How long a request forwarded by a node with a newer map waits for this node's watch to bring
/// it.
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(2);

/// A request forwarded by a node whose map is newer than this node's (it sent the request here
/// as to the owner, after a move this node's watch has not delivered yet) waits, at most
/// [`CATCH_UP`], for that map, so that the request is placed by it rather than bounced back
/// with 421.
pub async fn catch_up(cluster: &Cluster, headers: &HeaderMap) {
    if let Some(theirs) = forward::map_version(headers).filter(|_| headers.contains_key(FORWARDED_BY)) {
        cluster.await_version(theirs, CATCH_UP).await;
    }
}

/// Waits `--test-read-pause-ms` before a read served here (tests only; nothing by default).
async fn pause_read(state: &State) {
    let pause = state.options.test_read_pause_ms;
    if !pause.is_zero() {
        tokio::time::sleep(pause).await;
    }
}

/// The `partition=` of a query, if it is a number.
fn partition_param(query: &str) -> Option<u32> {
    query.split('&').find_map(|pair| pair.strip_prefix("partition=")).and_then(|p| p.parse().ok())
}

/// Answers a request for `owner`'s partition: forwarded to it, or 421 when this node redirects
/// or the request was forwarded already (the forwarder's map and this node's disagree: the
/// client, or the forwarder's next map, must resolve it, not another hop).
pub async fn answer(
    state: &State,
    cluster: &Cluster,
    owner: Owner,
    req: Request<Incoming>,
) -> Result<Response, ApiError> {
    if !forwards(cluster, req.headers()) {
        return Err(ApiError::misdirected(owner, cluster.node()));
    }
    let (head, body) = req.into_parts();
    let max = state.options.batch_max_bytes.max(state.backend.max_value());
    let body =
        body::read(body, Limit { max, code: "value_too_large", what: "the body" }, state.options.body_timeout_ms)
            .await?;
    state.forwarder.forward(&owner, cluster.node(), &head, body.into()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_parameter_is_found_anywhere_in_the_query() {
        assert_eq!(partition_param("partition=3"), Some(3));
        assert_eq!(partition_param("limit=5&partition=12&after=9"), Some(12));
        assert_eq!(partition_param("partition=x"), None);
        assert_eq!(partition_param("limit=5"), None);
    }
}
