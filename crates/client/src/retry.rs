//! [`Retry`]: which refusals are tried again, and how long to wait before each attempt.
//!
//! Only a 503 is retried, and only when sending the request again cannot do anything twice:
//!
//! - `overloaded` (a full write or lookup queue) and `closed` (the store is shutting down):
//!   the server refuses these before the request enters a queue, so nothing was done — every
//!   request, writes included, is retried.
//! - `unavailable` (the storage is still opening; on the PostgreSQL backend also a pool with no
//!   connection, or a connection that broke while its statement ran, which may have
//!   committed) and any other 503: retried only for requests that are safe to repeat — reads,
//!   and unconditional puts (a repeated upsert leaves the same value, under a newer tag).
//!   A conditional write or a delete that did commit would fail when repeated (412, 404).
//!
//! Timeouts and broken connections are not retried: a write may have been applied.
//! The wait before attempt *n* is the server's `Retry-After` if it sent one, else `backoff ×
//! 2^n` with jitter (a random half to whole of it, so that clients refused together do not
//! come back together); either way at most `max_backoff`.

use std::{
    hash::{BuildHasher, Hasher},
    time::Duration,
};

use crate::error::{Error, ErrorCode};

/// How a client retries requests the server refused with 503.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts after the first (0: never retry).
    pub retries: u32,
    /// The wait before the first retry when the server did not say (`Retry-After`); doubled
    /// for each later one.
    pub backoff: Duration,
    /// The longest wait, whatever `Retry-After` says.
    pub max_backoff: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self { retries: 3, backoff: Duration::from_millis(50), max_backoff: Duration::from_secs(2) }
    }
}

/// Whether sending a request twice leaves what sending it once leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Reads and unconditional puts.
    Safe,
    /// Conditional writes, deletes, batches.
    Unsafe,
}

impl Retry {
    /// How long to wait before retrying after `err`, the answer to attempt `attempt` (0 for the
    /// first), or `None` if it is not retried.
    pub(crate) fn wait(&self, err: &Error, attempt: u32, repeat: Repeat) -> Option<Duration> {
        let Error::Server(refusal) = err else { return None };
        let nothing_done = matches!(refusal.code, ErrorCode::Overloaded | ErrorCode::Closed);
        if refusal.status != 503 || attempt >= self.retries || !(nothing_done || repeat == Repeat::Safe) {
            return None;
        }
        let wait = refusal.retry_after.unwrap_or_else(|| jitter(self.backoff.saturating_mul(1 << attempt.min(20))));
        Some(wait.min(self.max_backoff))
    }
}

/// A random duration between half of `d` and `d`.
fn jitter(d: Duration) -> Duration {
    // A fresh `RandomState` is randomly keyed: enough randomness for spreading retries.
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    let fraction = 0.5 + (random >> 11) as f64 / (1u64 << 53) as f64 / 2.0;
    d.mul_f64(fraction)
}

/// The seconds of a `Retry-After` header (the HTTP-date form is not used by the server).
pub(crate) fn parse_retry_after(value: &hyper::header::HeaderValue) -> Option<Duration> {
    value.to_str().ok()?.trim().parse().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ServerError;

    fn refusal(status: u16, code: ErrorCode, retry_after: Option<u64>) -> Error {
        Error::Server(ServerError {
            status,
            code,
            message: String::new(),
            etag: None,
            retry_after: retry_after.map(Duration::from_secs),
        })
    }

    #[test]
    fn only_503s_are_retried_and_only_when_repeating_is_safe() {
        let retry = Retry { retries: 2, backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(5) };
        let overloaded = refusal(503, ErrorCode::Overloaded, Some(1));
        assert_eq!(retry.wait(&overloaded, 0, Repeat::Unsafe), Some(Duration::from_secs(1)));
        assert_eq!(retry.wait(&overloaded, 2, Repeat::Safe), None, "retries exhausted");
        let unavailable = refusal(503, ErrorCode::Unavailable, None);
        assert_eq!(retry.wait(&unavailable, 0, Repeat::Unsafe), None);
        let wait = retry.wait(&unavailable, 1, Repeat::Safe).unwrap();
        assert!(wait >= Duration::from_millis(100) && wait <= Duration::from_millis(200), "{wait:?}");
        assert_eq!(retry.wait(&refusal(500, ErrorCode::Internal, None), 0, Repeat::Safe), None);
        assert_eq!(retry.wait(&Error::Timeout(Duration::from_secs(1)), 0, Repeat::Safe), None);
    }

    #[test]
    fn waits_are_capped() {
        let retry = Retry { retries: 9, backoff: Duration::from_millis(10), max_backoff: Duration::from_millis(20) };
        assert_eq!(
            retry.wait(&refusal(503, ErrorCode::Closed, Some(1)), 0, Repeat::Safe),
            Some(Duration::from_millis(20))
        );
        assert!(
            retry.wait(&refusal(503, ErrorCode::Closed, None), 8, Repeat::Safe).unwrap() <= Duration::from_millis(20)
        );
    }

    #[test]
    fn retry_after_is_seconds() {
        use hyper::header::HeaderValue;
        assert_eq!(parse_retry_after(&HeaderValue::from_static("1")), Some(Duration::from_secs(1)));
        assert_eq!(parse_retry_after(&HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT")), None);
    }
}
