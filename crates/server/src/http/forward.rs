//! Forwarding a request to the node owning its partition: one pooled HTTP/1.1 client per server
//! (kept-alive connections to each owner), the request sent on with its method, path, query,
//! body and headers (the conditional ones and the token included, so the owner decides as if
//! asked directly) plus [`FORWARDED_BY`], and the owner's answer returned as it is: status,
//! headers, body (streamed when the owner streams it, as `GET /export` does).

use std::{path::Path, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{
    body::Incoming,
    header::{HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING, UPGRADE},
    http::request::Parts,
    HeaderMap, StatusCode,
};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::TokioExecutor,
};

use super::{
    error::ApiError,
    response::{self, Response},
};
use crate::cluster::Owner;

/// The header a forwarding node adds (its node id): a request carrying it is never forwarded
/// again, so a stale map cannot make two nodes bounce a request between them.
pub const FORWARDED_BY: HeaderName = HeaderName::from_static("shardlite-forwarded-by");

/// The header a forwarding node adds with the version of the map that named the owner: an
/// owner whose own map is older waits for its watch to bring that one before it places the
/// request.
pub const MAP_VERSION: HeaderName = HeaderName::from_static("shardlite-map-version");

/// The map version a forwarding node sent in `headers` ([`MAP_VERSION`]), if any.
pub fn map_version(headers: &hyper::HeaderMap) -> Option<u64> {
    headers.get(MAP_VERSION).and_then(|v| v.to_str().ok()?.parse().ok())
}

/// How long connecting to an owner may take before the request fails with 503.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Chunks of a streamed answer buffered between the owner and the client.
const STREAM_CHUNKS: usize = 16;

/// The pooled client that forwards requests.
#[derive(Debug, Clone)]
pub struct Forwarder {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Forwarder {
    /// A client with an empty pool, for `http://` and `https://` nodes: it trusts the system's
    /// roots and the CAs of the PEM file `node_ca` (the cluster's own CA).
    pub fn new(node_ca: Option<&Path>) -> Result<Self, String> {
        let mut http = HttpConnector::new();
        // Requests are small and sent whole: no Nagle delay, as on the server's side.
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        // hyper-rustls hands the connector `https://` URLs too.
        http.enforce_http(false);
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(super::tls::node_client(node_ca)?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Self { client: Client::builder(TokioExecutor::new()).build(connector) })
    }

    /// Sends the request (`head`, `body`) to `owner` on behalf of node `by`; the owner's
    /// answer as it is, or 503 `unavailable` if it cannot be reached (the client may retry).
    pub async fn forward(&self, owner: &Owner, by: &str, head: &Parts, body: Bytes) -> Result<Response, ApiError> {
        let (parts, body) = self.send(owner, by, head, body).await?.into_parts();
        let mut resp = if parts.headers.contains_key(CONTENT_LENGTH) {
            let bytes = body.collect().await.map_err(|e| unreachable(owner, &e))?.to_bytes();
            response::whole(parts.status, bytes)
        } else {
            response::relayed(parts.status, stream(body))
        };
        copy_end_to_end(&parts.headers, resp.headers_mut());
        Ok(resp)
    }

    /// Sends the request to `owner` and reads its whole answer (a part of a split batch).
    pub async fn exchange(
        &self,
        owner: &Owner,
        by: &str,
        head: &Parts,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), ApiError> {
        let (parts, body) = self.send(owner, by, head, body).await?.into_parts();
        let bytes = body.collect().await.map_err(|e| unreachable(owner, &e))?.to_bytes();
        Ok((parts.status, bytes))
    }

    /// The owner's answer to the request, its body still to come.
    pub async fn send(
        &self,
        owner: &Owner,
        by: &str,
        head: &Parts,
        body: Bytes,
    ) -> Result<hyper::Response<Incoming>, ApiError> {
        let path = head.uri.path_and_query().map_or("/", |pq| pq.as_str());
        let uri: hyper::Uri = format!("{}{path}", owner.address).parse().map_err(|e| unreachable(owner, &e))?;
        let mut req = hyper::Request::new(Full::new(body));
        *req.method_mut() = head.method.clone();
        *req.uri_mut() = uri;
        copy_end_to_end(&head.headers, req.headers_mut());
        // The body may be a part of the request's (a split batch): hyper states its length.
        req.headers_mut().remove(CONTENT_LENGTH);
        req.headers_mut().insert(FORWARDED_BY, HeaderValue::from_str(by).map_err(|e| unreachable(owner, &e))?);
        req.headers_mut().insert(MAP_VERSION, HeaderValue::from(owner.map_version));
        self.client.request(req).await.map_err(|e| unreachable(owner, &e))
    }
}

/// 503 `unavailable` (the client may retry): the owner cannot be reached, and why.
fn unreachable(owner: &Owner, err: &dyn std::error::Error) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        format!(
            "partition {} is served by node `{}` at {}, which cannot be reached: {}",
            owner.partition,
            owner.node,
            owner.address,
            error_chain(err)
        ),
    )
    .with_header(hyper::header::RETRY_AFTER, HeaderValue::from_static("1"))
}

/// The chunks of `body` as they come, on a channel (ends early if the owner fails mid-way:
/// the export format's end marker is then missing, which readers detect).
fn stream(mut body: Incoming) -> tokio::sync::mpsc::Receiver<Bytes> {
    let (tx, rx) = tokio::sync::mpsc::channel(STREAM_CHUNKS);
    tokio::spawn(async move {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                if tx.send(data).await.is_err() {
                    break;
                }
            }
        }
    });
    rx
}

/// Copies the headers that describe the message itself, leaving out those of one connection
/// (RFC 9110, 7.6.1) and `Host`, which the client sets for the owner.
fn copy_end_to_end(from: &HeaderMap, to: &mut HeaderMap) {
    const HOP_BY_HOP: [&str; 4] = ["keep-alive", "te", "trailer", "proxy-connection"];
    let hop = |name: &HeaderName| {
        [CONNECTION, TRANSFER_ENCODING, UPGRADE, HOST].contains(name) || HOP_BY_HOP.contains(&name.as_str())
    };
    for (name, value) in from.iter().filter(|(name, _)| !hop(name)) {
        to.append(name.clone(), value.clone());
    }
}

/// An error and its causes, on one line (hyper's own message is only "client error (Connect)").
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(err) = cause {
        text.push_str(": ");
        text.push_str(&err.to_string());
        cause = err.source();
    }
    text
}
