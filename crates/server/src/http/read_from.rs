//! The `Shardlite-Read-From` request header: who may answer a read. `owner` (the default: the
//! partition's owner, linearizable) or `copy` (on a cluster node keeping an up-to-date copy of
//! the partition, that copy, possibly missing the owner's last writes). Any other value is
//! refused (400 `bad_header`), on every server, so that a typo does not go unnoticed. With
//! `copy`, `Shardlite-Max-Staleness-Ms: N` bounds how stale: the copy answers only if it took a
//! frame of the owner's within the last N ms (else the owner does).

use std::time::Duration;

use hyper::{header::HeaderName, HeaderMap};

use super::error::ApiError;

/// The header's name.
pub const READ_FROM: HeaderName = HeaderName::from_static("shardlite-read-from");
/// The bound on a copy's staleness, ms.
pub const MAX_STALENESS: HeaderName = HeaderName::from_static("shardlite-max-staleness-ms");

/// Who may answer a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    Owner,
    /// A copy that took a frame of the owner's within this long, if bounded.
    Copy(Option<Duration>),
}

/// The header's value in `headers` (`owner` without one); 400 `bad_header` for any other than
/// `owner` or `copy` (in any case).
pub fn parse(headers: &HeaderMap) -> Result<ReadFrom, ApiError> {
    let within = max_staleness(headers)?;
    let Some(value) = headers.get(READ_FROM) else { return Ok(ReadFrom::Owner) };
    let bytes = value.as_bytes();
    if bytes.eq_ignore_ascii_case(b"owner") {
        Ok(ReadFrom::Owner)
    } else if bytes.eq_ignore_ascii_case(b"copy") {
        Ok(ReadFrom::Copy(within))
    } else {
        Err(ApiError::bad_header(format!(
            "Shardlite-Read-From takes `owner` or `copy`, not `{}`",
            String::from_utf8_lossy(bytes)
        )))
    }
}

/// `Shardlite-Max-Staleness-Ms`, if given: a whole number of milliseconds (400 `bad_header`
/// else).
fn max_staleness(headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
    let Some(value) = headers.get(MAX_STALENESS) else { return Ok(None) };
    let ms = value.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()).ok_or_else(|| {
        ApiError::bad_header(format!(
            "Shardlite-Max-Staleness-Ms takes a whole number of milliseconds, not `{}`",
            String::from_utf8_lossy(value.as_bytes())
        ))
    })?;
    Ok(Some(Duration::from_millis(ms)))
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    #[test]
    fn owner_by_default_copy_when_asked_and_nothing_else() {
        let mut headers = HeaderMap::new();
        assert_eq!(parse(&headers).unwrap(), ReadFrom::Owner);
        headers.insert(READ_FROM, HeaderValue::from_static("Copy"));
        assert_eq!(parse(&headers).unwrap(), ReadFrom::Copy(None));
        headers.insert(READ_FROM, HeaderValue::from_static("{}"));
        assert!(parse(&headers).is_err());
    }

    #[test]
    fn a_copy_read_may_bound_its_staleness_in_whole_milliseconds() {
        let mut headers = HeaderMap::new();
        headers.insert(READ_FROM, HeaderValue::from_static("copy"));
        headers.insert(MAX_STALENESS, HeaderValue::from_static("250"));
        assert_eq!(parse(&headers).unwrap(), ReadFrom::Copy(Some(Duration::from_millis(250))));
        for bad in ["-1", "0.5", "soon", ""] {
            headers.insert(MAX_STALENESS, HeaderValue::from_static(bad));
            assert!(parse(&headers).is_err(), "{bad}");
        }
    }
}
