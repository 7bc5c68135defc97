//! [`ApiError`]: every refusal the server answers, with its status, its JSON body
//! `{"error": "<code>", "message": "..."}` and the headers that go with it (`Retry-After`,
//! `Allow`, `WWW-Authenticate`, `ETag`); and the one mapping from engine errors to statuses.
//! `docs/http-api.md` documents the same table: change both together.

use hyper::{
    header::{HeaderName, HeaderValue, ALLOW, RETRY_AFTER, WWW_AUTHENTICATE},
    StatusCode,
};
use serde::Serialize;
use shardlite_engine::Error as EngineError;

use crate::{
    backend::BackendError,
    response::{self, etag, Response},
};

/// Seconds a client is told to wait after an overloaded or closing server answered 503.
const RETRY_AFTER_SECS: &str = "1";

/// A request the server refuses or could not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code (the body's `error` field).
    pub code: &'static str,
    /// What went wrong, for people.
    pub message: String,
    /// Headers the status calls for.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// The JSON body of an error.
#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
    message: &'a str,
}

impl ApiError {
    /// An error with no extra headers.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), headers: Vec::new() }
    }

    /// Adds a header to the answer.
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// 400: a malformed key.
    pub fn bad_key(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_key", message)
    }

    /// 400: a malformed header.
    pub fn bad_header(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_header", message)
    }

    /// 404 for a path no route serves.
    pub fn unknown_route(path: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "unknown_route", format!("no route serves {path}"))
    }

    /// 405, naming the methods the route allows.
    pub fn method_not_allowed(method: &hyper::Method, allow: &'static str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{method} is not allowed here; use {allow}"),
        )
        .with_header(ALLOW, HeaderValue::from_static(allow))
    }

    /// 401 with the Bearer challenge (RFC 6750).
    pub fn unauthorized(token_given: bool) -> Self {
        let (challenge, message) = if token_given {
            (r#"Bearer error="invalid_token""#, "the bearer token is not valid")
        } else {
            ("Bearer", "this server requires `Authorization: Bearer <token>`")
        };
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
            .with_header(WWW_AUTHENTICATE, HeaderValue::from_static(challenge))
    }

    /// 503 + `Retry-After`.
    fn unavailable(code: &'static str, message: String) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
            .with_header(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS))
    }

    /// Renders the error as a response.
    pub fn into_response(self) -> Response {
        let body = serde_json::to_vec(&Body { error: self.code, message: &self.message })
            .unwrap_or_else(|_| br#"{"error":"internal","message":"unprintable error"}"#.to_vec());
        let mut resp = response::json(self.status, body);
        for (name, value) in self.headers {
            resp.headers_mut().append(name, value);
        }
        resp
    }
}

impl From<BackendError> for ApiError {
    fn from(err: BackendError) -> Self {
        match err {
            BackendError::Engine(err) => Self::from(err),
            BackendError::Unavailable(_) => Self::unavailable("unavailable", err.to_string()),
            BackendError::Database(_) => {
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "database_error", err.to_string())
            }
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(err: EngineError) -> Self {
        let message = err.to_string();
        match err {
            EngineError::InvalidKey { len: 0, .. } => Self::bad_key(message),
            EngineError::InvalidKey { .. } => Self::new(StatusCode::PAYLOAD_TOO_LARGE, "key_too_large", message),
            EngineError::ValueTooLarge { .. } => Self::new(StatusCode::PAYLOAD_TOO_LARGE, "value_too_large", message),
            EngineError::NotFound => Self::new(StatusCode::NOT_FOUND, "not_found", message),
            EngineError::ConditionFailed { current } => {
                let err = Self::new(StatusCode::PRECONDITION_FAILED, "precondition_failed", message);
                // The current tag lets a compare-and-set client retry without a GET.
                match current {
                    Some(version) => err.with_header(hyper::header::ETAG, etag(version)),
                    None => err,
                }
            }
            // Index mode `none` serves only unconditional PUTs on /kv.
            EngineError::Unsupported { .. } => Self::new(StatusCode::METHOD_NOT_ALLOWED, "unsupported", message)
                .with_header(ALLOW, HeaderValue::from_static("PUT")),
            EngineError::Overloaded { .. } => Self::unavailable("overloaded", message),
            EngineError::Closed => Self::unavailable("closed", message),
            EngineError::DiskFull(_) => Self::new(StatusCode::INSUFFICIENT_STORAGE, "disk_full", message),
            EngineError::PartitionFull { .. } => Self::new(StatusCode::INSUFFICIENT_STORAGE, "partition_full", message),
            EngineError::Poisoned { .. } => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "poisoned", message),
            EngineError::Corrupt { .. } => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt", message),
            EngineError::Io { .. } => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "io_error", message),
            EngineError::Sqlite(_) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "sqlite_error", message),
            // Manifest, Config and any variant added later: none is the client's doing.
            _ => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_map_to_the_documented_statuses() {
        let status = |e: EngineError| ApiError::from(e).status.as_u16();
        assert_eq!(status(EngineError::InvalidKey { len: 0, max: 1024 }), 400);
        assert_eq!(status(EngineError::InvalidKey { len: 2000, max: 1024 }), 413);
        assert_eq!(status(EngineError::ValueTooLarge { len: 2, max: 1 }), 413);
        assert_eq!(status(EngineError::NotFound), 404);
        assert_eq!(status(EngineError::ConditionFailed { current: None }), 412);
        assert_eq!(status(EngineError::Unsupported { operation: "get" }), 405);
        assert_eq!(status(EngineError::Overloaded { partition: 1 }), 503);
        assert_eq!(status(EngineError::Closed), 503);
        assert_eq!(status(EngineError::DiskFull("x".into())), 507);
        assert_eq!(status(EngineError::PartitionFull { partition: 1 }), 507);
        assert_eq!(status(EngineError::Poisoned { partition: 1, reason: "fsync".into() }), 500);
        assert_eq!(status(EngineError::Sqlite("x".into())), 500);
    }

    #[test]
    fn overload_says_when_to_retry_and_a_failed_condition_names_the_current_tag() {
        let err = ApiError::from(EngineError::Overloaded { partition: 1 });
        assert!(err.headers.contains(&(RETRY_AFTER, HeaderValue::from_static("1"))));
        let current = Some(shardlite_engine::Version { epoch: 9, id: 3, counter: 7 });
        let err = ApiError::from(EngineError::ConditionFailed { current });
        assert!(err.headers.contains(&(hyper::header::ETAG, HeaderValue::from_static("\"9.3.7\""))));
        assert_eq!(err.message, "the condition does not hold: the record is now at version 9.3.7");
        let err = ApiError::from(BackendError::Unavailable("no connection".into()));
        assert_eq!((err.status.as_u16(), err.code), (503, "unavailable"));
        assert!(err.headers.contains(&(RETRY_AFTER, HeaderValue::from_static("1"))));
        let err = ApiError::from(BackendError::Database("relation missing".into()));
        assert_eq!((err.status.as_u16(), err.code), (500, "database_error"));
    }
}
