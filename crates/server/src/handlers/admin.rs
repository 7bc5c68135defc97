//! The admin routes on this node's storage (docs/http-api.md); a cluster's are in `cluster`:
//! - `/admin/check`: `GET` checks every partition and answers each one's report.
//! - `/admin/backup`: `POST` starts a backup of the whole storage into a directory on the
//!   server's machine (`{"to": "/abs/dir", "max_rate_mib": 100}`) and answers `202` with its
//!   status at once; `GET` answers the status of the backup running or last run.
//! - `/admin/compact`: `POST` compacts every partition, one after the other, and answers what
//!   each gave back once all are done.

use std::path::PathBuf;

use hyper::{body::Incoming, Method, StatusCode};
use serde::Deserialize;
use shardlite_engine::backup::BackupOptions;

use crate::http::{
    body::{self, Limit},
    error::ApiError,
    response::{self, Response},
    state::State,
};

/// The largest `POST /admin/backup` body: a path and a number.
const MAX_BODY: usize = 16 << 10;

/// What `POST /admin/backup` asks for.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackupRequest {
    /// The backup directory on the server's machine: absolute, new or empty.
    to: PathBuf,
    /// MiB per second to write at most (none: as fast as the disk goes).
    #[serde(default)]
    max_rate_mib: Option<f64>,
}

/// Serves `/admin/backup`.
pub async fn backup(state: &State, method: &Method, body: Incoming) -> Result<Response, ApiError> {
    let (status, answer) = if *method == Method::POST {
        let limit = Limit { max: MAX_BODY, code: "body_too_large", what: "the backup request" };
        let bytes = body::read(body, limit, state.options.body_timeout_ms).await?;
        let (to, options) = parse(&bytes)?;
        (StatusCode::ACCEPTED, state.backend.start_backup(to, options).await?)
    } else {
        (StatusCode::OK, state.backend.backup_status().await?)
    };
    let json = serde_json::to_vec(&answer)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(response::json(status, json))
}

/// Serves `POST /admin/compact`.
pub async fn compact(state: &State) -> Result<Response, ApiError> {
    let report = state.backend.compact().await?;
    let json = serde_json::to_vec(&report)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(response::json(StatusCode::OK, json))
}

/// `/admin/check`: every partition's check, `{"reports": [...]}` (what `shardlite check --url`
/// reads and judges).
pub async fn check(state: &State) -> Result<Response, ApiError> {
    #[derive(serde::Serialize)]
    struct Reports {
        reports: Vec<shardlite_engine::PartitionCheck>,
    }
    let reports = state.backend.check().await?;
    let body = serde_json::to_vec(&Reports { reports })
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("check report: {e}")))?;
    Ok(response::json(StatusCode::OK, body))
}

fn parse(bytes: &[u8]) -> Result<(PathBuf, BackupOptions), ApiError> {
    let bad = |message: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message);
    let request: BackupRequest = serde_json::from_slice(bytes)
        .map_err(|e| bad(format!("the body must be {{\"to\": \"/absolute/dir\", \"max_rate_mib\": N}}: {e}")))?;
    if !request.to.is_absolute() {
        return Err(bad(format!("\"to\" must be an absolute path on the server's machine, not {:?}", request.to)));
    }
    let max_rate = match request.max_rate_mib {
        Some(mib) if !(mib > 0.0 && mib.is_finite()) => {
            return Err(bad(format!("\"max_rate_mib\" must be a positive number, not {mib}")))
        }
        rate => rate.map(|mib| (mib * 1048576.0) as u64),
    };
    Ok((request.to, BackupOptions { max_rate }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_request_needs_an_absolute_destination_and_a_positive_rate() {
        let (to, options) = parse(br#"{"to": "/b", "max_rate_mib": 2}"#).unwrap();
        assert_eq!((to, options.max_rate), (PathBuf::from("/b"), Some(2 << 20)));
        assert_eq!(parse(br#"{"to": "/b"}"#).unwrap().1.max_rate, None);
        for bad in [&br#"{"to": "b"}"#[..], br#"{"to": "/b", "max_rate_mib": 0}"#, br#"{"to": "/b", "x": 1}"#, b"{"] {
            assert_eq!(parse(bad).unwrap_err().status, StatusCode::BAD_REQUEST);
        }
    }
}
