//! The response type and the few ways the server builds one. Responses are built with
//! `Response::new` and direct header inserts rather than `Response::builder()`, which
//! re-validates every header on the hot path.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, ETAG},
    StatusCode,
};
use shardlite_engine::Version;

/// Every response the server sends: the whole body is in memory.
pub type Response = hyper::Response<Full<Bytes>>;

const OCTET_STREAM: HeaderValue = HeaderValue::from_static("application/octet-stream");
const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// A response with a status and a body of the given content type.
pub fn with_body(status: StatusCode, content_type: HeaderValue, body: impl Into<Bytes>) -> Response {
    let mut resp = hyper::Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, content_type);
    resp
}

/// A JSON response.
pub fn json(status: StatusCode, body: impl Into<Bytes>) -> Response {
    with_body(status, JSON, body)
}

/// A response with no body.
pub fn empty(status: StatusCode) -> Response {
    let mut resp = hyper::Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = status;
    resp
}

/// A stored value: `200`, `ETag`, the bytes (or, for HEAD, only their length).
pub fn value(version: Version, value: Vec<u8>, head: bool) -> Response {
    let mut resp = if head {
        let mut resp = empty(StatusCode::OK);
        resp.headers_mut().insert(CONTENT_TYPE, OCTET_STREAM);
        resp.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from(value.len()));
        resp
    } else {
        with_body(StatusCode::OK, OCTET_STREAM, value)
    };
    resp.headers_mut().insert(ETAG, etag(version));
    resp
}

/// The entity tag of a record: its version, quoted (a strong validator; opaque to clients).
pub fn etag(version: Version) -> HeaderValue {
    // Digits, dots and quotes are valid in any header value, so the fallback is never taken.
    HeaderValue::try_from(etag_text(version)).unwrap_or(HeaderValue::from_static("\"0\""))
}

/// The entity tag's text, as the `ETag` header carries it (quotes included).
pub fn etag_text(version: Version) -> String {
    format!("\"{version}\"")
}
