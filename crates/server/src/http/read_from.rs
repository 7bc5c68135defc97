//! The `Shardlite-Read-From` request header: who may answer a read. `owner` (the default: the
//! partition's owner, linearizable) or `copy` (on a cluster node keeping an up-to-date copy of
//! the partition, that copy, possibly missing the owner's last writes). Any other value is
//! refused (400 `bad_header`), on every server, so that a typo does not go unnoticed.

use hyper::{header::HeaderName, HeaderMap};

use super::error::ApiError;

/// The header's name.
pub const READ_FROM: HeaderName = HeaderName::from_static("shardlite-read-from");

/// Who may answer a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    Owner,
    Copy,
}

/// The header's value in `headers` (`owner` without one); 400 `bad_header` for any other than
/// `owner` or `copy` (in any case).
pub fn parse(headers: &HeaderMap) -> Result<ReadFrom, ApiError> {
    let Some(value) = headers.get(READ_FROM) else { return Ok(ReadFrom::Owner) };
    let bytes = value.as_bytes();
    if bytes.eq_ignore_ascii_case(b"owner") {
        Ok(ReadFrom::Owner)
    } else if bytes.eq_ignore_ascii_case(b"copy") {
        Ok(ReadFrom::Copy)
    } else {
        Err(ApiError::bad_header(format!(
            "Shardlite-Read-From takes `owner` or `copy`, not `{}`",
            String::from_utf8_lossy(bytes)
        )))
    }
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
        assert_eq!(parse(&headers).unwrap(), ReadFrom::Copy);
        headers.insert(READ_FROM, HeaderValue::from_static("{}"));
        assert!(parse(&headers).is_err());
    }
}
