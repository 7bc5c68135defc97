//! [`ApiError`]: every refusal the server answers, with its status, its JSON body
//! `{"error": "<code>", "message": "..."}` and the headers that go with it (`Retry-After`,
//! `Allow`, `WWW-Authenticate`, `ETag`); and the one mapping from backend errors to statuses.
//! `docs/http-api.md` documents the same table: change both together.

use hyper::{
    header::{HeaderName, HeaderValue, ALLOW, RETRY_AFTER, WWW_AUTHENTICATE},
    StatusCode,
};
use serde::Serialize;
use shardlite_engine::Version;

use super::response::{self, etag, Response};
use crate::{backend::BackendError, cluster::Owner};

/// 421's headers: the owner's address, its node id, the partition, the map version.
pub const OWNER: HeaderName = HeaderName::from_static("shardlite-owner");
/// The owner's node id, on a 421.
pub const OWNER_NODE: HeaderName = HeaderName::from_static("shardlite-owner-node");
/// The partition of the request's key, on a 421.
pub const PARTITION: HeaderName = HeaderName::from_static("shardlite-partition");
/// The cluster map version the answering node follows, on a 421.
pub const MAP_VERSION: HeaderName = HeaderName::from_static("shardlite-map-version");

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
    /// For 421 `misdirected`: the partition's owner, also in the body (boxed: most errors
    /// have none, and every `Result` carrying an error stays small).
    pub owner: Option<Box<Owner>>,
}

/// The JSON body of an error.
#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
    message: &'a str,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    owner: Option<&'a Owner>,
}

impl ApiError {
    /// An error with no extra headers.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), headers: Vec::new(), owner: None }
    }

    /// 421: the partition is another node's, and this node does not forward the request (it
    /// runs with `--redirect`, or the request was forwarded once already). Names the owner in
    /// the headers and the body, with the map version that says so.
    pub fn misdirected(owner: Owner, by: &str) -> Self {
        let message = format!(
            "partition {} is served by node `{}` at {} (cluster map version {}), not by node `{by}`",
            owner.partition, owner.node, owner.address, owner.map_version
        );
        let header = |text: String| HeaderValue::try_from(text).unwrap_or(HeaderValue::from_static(""));
        let mut err = Self::new(StatusCode::MISDIRECTED_REQUEST, "misdirected", message)
            .with_header(OWNER, header(owner.address.clone()))
            .with_header(OWNER_NODE, header(owner.node.clone()))
            .with_header(PARTITION, HeaderValue::from(owner.partition))
            .with_header(MAP_VERSION, HeaderValue::from(owner.map_version));
        err.owner = Some(Box::new(owner));
        err
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

    /// 403: a valid token that lacks the role the route needs.
    pub fn forbidden(role: &str) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", format!("this token lacks the `{role}` role this request needs"))
    }

    /// 404: no record has the key.
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", BackendError::NotFound.to_string())
    }

    /// 412: a condition did not hold; the current tag (if the key exists) as the `ETag`, so a
    /// compare-and-set client can retry without a GET.
    pub fn precondition_failed(current: Option<Version>) -> Self {
        let err = Self::new(
            StatusCode::PRECONDITION_FAILED,
            "precondition_failed",
            BackendError::ConditionFailed { current }.to_string(),
        );
        match current {
            Some(version) => err.with_header(hyper::header::ETAG, etag(version)),
            None => err,
        }
    }

    /// 503 `fenced`: this node owns `partition` in its map but does not hold its lease in etcd
    /// (etcd unreachable, or the lease expired), so another node may own it by now.
    pub fn fenced(node: &str, partition: u32) -> Self {
        Self::unavailable(
            "fenced",
            format!(
                "node `{node}` does not hold its lease in etcd, so it serves no partition (partition {partition} \
                 asked): retry; once it holds the lease again and has read the cluster map, the request is \
                 served or forwarded"
            ),
        )
    }

    /// 503 + `Retry-After`.
    fn unavailable(code: &'static str, message: String) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
            .with_header(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS))
    }

    /// Renders the error as a response.
    pub fn into_response(self) -> Response {
        let body = serde_json::to_vec(&Body { error: self.code, message: &self.message, owner: self.owner.as_deref() })
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
        let message = err.to_string();
        match err {
            BackendError::InvalidKey { len: 0, .. } => Self::bad_key(message),
            BackendError::InvalidKey { .. } => Self::new(StatusCode::PAYLOAD_TOO_LARGE, "key_too_large", message),
            BackendError::ValueTooLarge { .. } => Self::new(StatusCode::PAYLOAD_TOO_LARGE, "value_too_large", message),
            BackendError::NotFound => Self::not_found(),
            BackendError::ConditionFailed { current } => Self::precondition_failed(current),
            // Index mode `none` serves only unconditional PUTs on /kv.
            BackendError::Unsupported(_) => Self::new(StatusCode::METHOD_NOT_ALLOWED, "unsupported", message)
                .with_header(ALLOW, HeaderValue::from_static("PUT")),
            BackendError::Overloaded(_) => Self::unavailable("overloaded", message),
            BackendError::Closed => Self::unavailable("closed", message),
            BackendError::Unavailable(_) => Self::unavailable("unavailable", message),
            BackendError::Unreplicated(_) => Self::unavailable("unreplicated", message),
            BackendError::DiskFull(_) => Self::new(StatusCode::INSUFFICIENT_STORAGE, "disk_full", message),
            BackendError::PartitionFull(_) => Self::new(StatusCode::INSUFFICIENT_STORAGE, "partition_full", message),
            BackendError::Poisoned(_) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "poisoned", message),
            BackendError::Corrupt(_) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt", message),
            BackendError::Io(_) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "io_error", message),
            BackendError::Sqlite(_) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "sqlite_error", message),
            BackendError::Database(_) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "database_error", message),
            BackendError::BadQuery(_) => Self::new(StatusCode::BAD_REQUEST, "bad_query", message),
            BackendError::Conflict(_) => Self::new(StatusCode::CONFLICT, "conflict", message),
            BackendError::NotImplemented(_) => Self::new(StatusCode::NOT_IMPLEMENTED, "not_implemented", message),
            // Internal and any variant added later: none is the client's doing.
            _ => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use shardlite_engine::Error as EngineError;

    #[test]
    fn engine_errors_map_to_the_documented_statuses() {
        let status = |e: EngineError| ApiError::from(BackendError::from(e)).status.as_u16();
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
        let err = ApiError::from(BackendError::from(EngineError::Overloaded { partition: 1 }));
        assert!(err.headers.contains(&(RETRY_AFTER, HeaderValue::from_static("1"))));
        let current = Some(shardlite_engine::Version { epoch: 9, id: 3, counter: 7 });
        let err = ApiError::from(BackendError::from(EngineError::ConditionFailed { current }));
        assert!(err.headers.contains(&(hyper::header::ETAG, HeaderValue::from_static("\"9.3.7\""))));
        assert_eq!(err.message, "the condition does not hold: the record is now at version 9.3.7");
        let err = ApiError::from(BackendError::Unavailable("no connection".into()));
        assert_eq!((err.status.as_u16(), err.code), (503, "unavailable"));
        assert!(err.headers.contains(&(RETRY_AFTER, HeaderValue::from_static("1"))));
        let err = ApiError::from(BackendError::Database("relation missing".into()));
        assert_eq!((err.status.as_u16(), err.code), (500, "database_error"));
    }
}
