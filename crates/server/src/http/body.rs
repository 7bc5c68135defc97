//! Reading request bodies within bounds: a declared length over the limit is refused (413)
//! before a byte is read, a body that keeps arriving past the limit is cut off (413), and one
//! that does not arrive within the body timeout answers 408.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper::{body::Body, body::Incoming, StatusCode};

use super::error::ApiError;

/// What a body is, for messages and codes.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    /// Most bytes accepted.
    pub max: usize,
    /// Error code of a body over the limit (e.g. `value_too_large`).
    pub code: &'static str,
    /// What the body is, in words (e.g. "the value").
    pub what: &'static str,
}

/// The body's declared length, if the client declared one (`Content-Length`).
pub fn declared_len(body: &Incoming) -> Option<u64> {
    body.size_hint().exact()
}

/// Reads the whole body, within `limit` and `timeout`.
pub async fn read(body: Incoming, limit: Limit, timeout: Duration) -> Result<Vec<u8>, ApiError> {
    let declared = declared_len(&body);
    if let Some(len) = declared {
        check(len, limit)?;
    }
    let capacity = declared.map_or(0, |len| usize::try_from(len).unwrap_or(usize::MAX).min(limit.max));
    tokio::time::timeout(timeout, collect(body, capacity, limit)).await.unwrap_or_else(|_| {
        Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!("{} did not arrive within {} ms", limit.what, timeout.as_millis()),
        ))
    })
}

fn check(len: u64, limit: Limit) -> Result<(), ApiError> {
    if len > limit.max as u64 {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            limit.code,
            format!("{} has {len} bytes; the most is {}", limit.what, limit.max),
        ));
    }
    Ok(())
}

async fn collect(mut body: Incoming, capacity: usize, limit: Limit) -> Result<Vec<u8>, ApiError> {
    let mut buf = Vec::with_capacity(capacity);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            ApiError::new(StatusCode::BAD_REQUEST, "bad_body", format!("reading {} failed: {e}", limit.what))
        })?;
        if let Ok(data) = frame.into_data() {
            check((buf.len() + data.len()) as u64, limit)?;
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf)
}
