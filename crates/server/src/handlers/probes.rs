//! The probes, which need no token: `/healthz` (liveness: the process answers, whatever its
//! storage) and `/readyz` (whether this server can serve its storage now).

use std::sync::atomic::Ordering;

use hyper::{header::HeaderValue, StatusCode};

use crate::http::{
    error::ApiError,
    response::{self, Response},
    state::State,
};

/// `/healthz`: 200 `ok` as long as the process answers.
pub fn healthz() -> Response {
    response::with_body(StatusCode::OK, HeaderValue::from_static("text/plain"), "ok\n")
}

/// `/readyz`: 200 once the storage is open and healthy; 503 `not_ready` with the reason while
/// it opens, while a partition is poisoned (or the commit log failed), while a cluster node
/// does not hold its lease (fenced), and during shutdown. A node whose partitions have too few
/// copies able to hold their writes stays ready (it serves reads, and other partitions'
/// writes), and says so: `{"ready":true,"degraded":"..."}` names those partitions and why.
pub fn readyz(state: &State) -> Result<Response, ApiError> {
    let fenced = state.cluster.as_ref().is_some_and(|cluster| !cluster.lease().held());
    let reason = if state.closing.load(Ordering::Relaxed) {
        Some("the server is shutting down".to_owned())
    } else if fenced {
        Some("this cluster node does not hold its lease in etcd: its partitions are fenced".to_owned())
    } else {
        state.backend.unready()
    };
    match reason {
        Some(reason) => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", reason)),
        None => Ok(response::json(StatusCode::OK, ready(state))),
    }
}

/// The ready answer's body: `degraded` while some partitions' writes would be refused.
fn ready(state: &State) -> Vec<u8> {
    let report = state.cluster.as_ref().and_then(|c| c.replication_report());
    match report.filter(|r| !r.short.is_empty()) {
        None => br#"{"ready":true}"#.to_vec(),
        Some(report) => {
            let why = report.short_why.unwrap_or_default();
            let degraded = format!("partitions {}: {why}", partition_list(&report.short));
            serde_json::to_vec(&serde_json::json!({ "ready": true, "degraded": degraded })).unwrap_or_default()
        }
    }
}

fn partition_list(partitions: &[u32]) -> String {
    partitions.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}
