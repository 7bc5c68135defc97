//! The response type and the few ways the server builds one. Responses are built with
//! `Response::new` and direct header inserts rather than `Response::builder()`, which
//! re-validates every header on the hot path.

use std::{
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::{
    body::{Body, Frame},
    header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, ETAG},
    StatusCode,
};
use shardlite_engine::Version;

/// Every response the server sends: the whole body in memory, or (`GET /export`) streamed.
pub type Response = hyper::Response<Either<Full<Bytes>, Streamed>>;

/// A body sent as it is produced: a first chunk already read, if any, then the chunks of a
/// channel, until its sender is dropped.
#[derive(Debug)]
pub struct Streamed {
    first: Option<Bytes>,
    rest: tokio::sync::mpsc::Receiver<Bytes>,
}

impl Body for Streamed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        self.rest.poll_recv(cx).map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// A `200` whose body is `first` (a chunk already taken from the channel, if any), then the
/// chunks of `chunks`, of the given content type.
pub fn streamed(
    content_type: HeaderValue,
    first: Option<Bytes>,
    chunks: tokio::sync::mpsc::Receiver<Bytes>,
) -> Response {
    let mut resp = hyper::Response::new(Either::Right(Streamed { first, rest: chunks }));
    resp.headers_mut().insert(CONTENT_TYPE, content_type);
    resp
}

/// A response of a status whose body is the chunks of `chunks`, with no header yet (a
/// forwarded answer the owner streams).
pub fn relayed(status: StatusCode, chunks: tokio::sync::mpsc::Receiver<Bytes>) -> Response {
    let mut resp = hyper::Response::new(Either::Right(Streamed { first: None, rest: chunks }));
    *resp.status_mut() = status;
    resp
}

pub const OCTET_STREAM: HeaderValue = HeaderValue::from_static("application/octet-stream");
const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// A response with a status and a body of the given content type.
pub fn with_body(status: StatusCode, content_type: HeaderValue, body: impl Into<Bytes>) -> Response {
    let mut resp = hyper::Response::new(Either::Left(Full::new(body.into())));
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
    whole(status, Bytes::new())
}

/// A response of a status and a whole body, with no header yet (a forwarded answer's).
pub fn whole(status: StatusCode, body: Bytes) -> Response {
    let mut resp = hyper::Response::new(Either::Left(Full::new(body)));
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
