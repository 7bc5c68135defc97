//! [`Transport`]: one request and its whole answer over the client's [`Pool`] of keep-alive
//! connections (`http://` and `https://` through hyper-rustls), with the bearer token, the
//! timeout, and the server's error body decoded into a [`ServerError`]. [`Transport::send`] is
//! one attempt; retries are the caller's ([`crate::retry`]).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, ETAG, HOST, RETRY_AFTER},
    HeaderMap, Method, Request, StatusCode, Uri,
};
use hyper_util::client::legacy::connect::HttpConnector;
use serde::Deserialize;

use crate::{
    error::{Error, ErrorCode, ServerError},
    etag::ETag,
    pool::Pool,
    retry::parse_retry_after,
};

/// A whole answer: status, headers, body.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Answer {
    /// The answer's `ETag`, which a successful write or read must carry.
    pub fn etag(&self) -> Result<ETag, Error> {
        self.headers
            .get(ETAG)
            .and_then(ETag::from_header)
            .ok_or_else(|| Error::Protocol(format!("a {} answer without an ETag", self.status)))
    }

    /// The answer as the server's refusal.
    pub fn refusal(&self) -> ServerError {
        #[derive(Deserialize)]
        struct Body {
            error: String,
            message: String,
        }
        let is_json = self.headers.get(CONTENT_TYPE).is_some_and(|ct| ct.as_bytes().starts_with(b"application/json"));
        let body = is_json.then(|| serde_json::from_slice::<Body>(&self.body).ok()).flatten();
        let (code, message) = match body {
            Some(b) => (ErrorCode::parse(&b.error), b.message),
            // Not from shardlite's handlers (a proxy, hyper's own 400): the body as text.
            None => (ErrorCode::Other(String::new()), String::from_utf8_lossy(&self.body).into_owned()),
        };
        ServerError {
            status: self.status.as_u16(),
            code,
            message,
            etag: self.headers.get(ETAG).and_then(ETag::from_header),
            retry_after: self.headers.get(RETRY_AFTER).and_then(parse_retry_after),
        }
    }
}

/// Where the server is and how to reach it.
#[derive(Debug)]
pub(crate) struct Transport {
    /// The connections.
    pool: Pool,
    /// The `Host` header: the URL's authority.
    host: HeaderValue,
    /// The URL's path prefix, without a trailing `/` (often empty).
    prefix: String,
    /// `Bearer <token>`, if the server wants one.
    authorization: Option<HeaderValue>,
    /// How long one attempt may take, from sending to the answer's last byte.
    timeout: Duration,
    /// Requests carry [`ROUTED_BY_CLIENT`]: a cluster's node answers 421 for a partition it
    /// does not own rather than forwarding it (the client chose the node from its map).
    routed: bool,
}

/// `Shardlite-Forwarded-By: client` on a request a cluster-aware client sent to the owner its
/// map names: the node's loop guard then answers 421 `misdirected` if the client's map is stale,
/// instead of paying a forward the client would never learn of (docs/cluster.md, "Routing").
const ROUTED_BY_CLIENT: (HeaderName, HeaderValue) =
    (HeaderName::from_static("shardlite-forwarded-by"), HeaderValue::from_static("client"));

/// How the transport is set up (from the builder).
#[derive(Clone)]
pub(crate) struct Setup {
    /// The server's URL.
    pub url: String,
    /// The bearer token.
    pub token: Option<String>,
    /// See [`Transport::timeout`].
    pub timeout: Duration,
    /// The longest a connection may take to open (TCP, and the TLS handshake).
    pub connect_timeout: Duration,
    /// How long an unused connection stays in the pool.
    pub idle_timeout: Duration,
    /// The most unused connections kept per server.
    pub max_idle: usize,
    /// The TLS configuration for `https://`.
    pub tls: rustls::ClientConfig,
    /// See [`Transport::routed`].
    pub routed: bool,
}

/// The URL only: the token stays out of logs.
impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Transport {
    /// The transport `setup` describes.
    pub fn new(setup: Setup) -> Result<Self, Error> {
        let uri: Uri = setup.url.parse().map_err(|e| Error::Config(format!("bad URL `{}`: {e}", setup.url)))?;
        let scheme = uri.scheme_str().unwrap_or_default();
        if !matches!(scheme, "http" | "https") || uri.authority().is_none() {
            return Err(Error::Config(format!("`{}` is not an http:// or https:// URL", setup.url)));
        }
        if uri.query().is_some() {
            return Err(Error::Config(format!("`{}`: the URL of a server has no query", setup.url)));
        }
        let authorization = setup
            .token
            .map(|token| {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| Error::Config("the token is not a valid header value".into()))?;
                value.set_sensitive(true);
                Ok::<_, Error>(value)
            })
            .transpose()?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        // Requests are written whole: send them now, not after Nagle's delay.
        http.set_nodelay(true);
        http.set_connect_timeout(Some(setup.connect_timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(setup.tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
        let origin = Uri::builder()
            .scheme(scheme)
            .authority(authority)
            .path_and_query("/")
            .build()
            .map_err(|e| Error::Config(format!("bad URL `{}`: {e}", setup.url)))?;
        let host =
            HeaderValue::from_str(authority).map_err(|e| Error::Config(format!("bad host `{authority}`: {e}")))?;
        Ok(Self {
            pool: Pool::new(connector, origin, setup.idle_timeout, setup.max_idle),
            host,
            prefix: uri.path().trim_end_matches('/').to_owned(),
            authorization,
            timeout: setup.timeout,
            routed: setup.routed,
        })
    }

    /// Sends one request to `path` (which starts with `/`) and reads its whole answer, within
    /// the timeout.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        header: Option<(HeaderName, HeaderValue)>,
        body: Bytes,
    ) -> Result<Answer, Error> {
        let uri = match self.prefix.as_str() {
            "" => Uri::try_from(path),
            prefix => Uri::try_from(format!("{prefix}{path}")),
        };
        // Built in place rather than through `Request::builder`, which moves its parts at each
        // step: this runs for every request.
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri.map_err(|e| Error::Config(format!("bad path `{path}`: {e}")))?;
        let headers = request.headers_mut();
        headers.insert(HOST, self.host.clone());
        if let Some(auth) = &self.authorization {
            headers.insert(AUTHORIZATION, auth.clone());
        }
        if let Some((name, value)) = header {
            headers.insert(name, value);
        }
        if self.routed {
            let (name, value) = ROUTED_BY_CLIENT;
            headers.insert(name, value);
        }
        let exchange = async {
            let (parts, body) = self.pool.exchange(request).await?;
            Ok(Answer { status: parts.status, headers: parts.headers, body })
        };
        tokio::time::timeout(self.timeout, exchange).await.map_err(|_| Error::Timeout(self.timeout))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(url: &str) -> Setup {
        Setup {
            url: url.into(),
            token: None,
            timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            max_idle: 1,
            tls: crate::builder::tls_config(&[]).unwrap(),
            routed: false,
        }
    }

    #[tokio::test]
    async fn urls_are_checked() {
        let plain = Transport::new(setup("http://127.0.0.1:8080/")).unwrap();
        assert_eq!((plain.host.to_str().unwrap(), plain.prefix.as_str()), ("127.0.0.1:8080", ""));
        let prefixed = Transport::new(setup("https://db.example:8443/api")).unwrap();
        assert_eq!((prefixed.host.to_str().unwrap(), prefixed.prefix.as_str()), ("db.example:8443", "/api"));
        for bad in ["ftp://127.0.0.1", "127.0.0.1:8080", "http://h/?x=1", "not a url"] {
            assert!(matches!(Transport::new(setup(bad)), Err(Error::Config(_))), "{bad}");
        }
        let mut with_bad_token = setup("http://127.0.0.1:1");
        with_bad_token.token = Some("a\nb".into());
        assert!(matches!(Transport::new(with_bad_token), Err(Error::Config(_))));
    }

    #[test]
    fn refusals_are_decoded() {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ETAG, HeaderValue::from_static("\"1.2.3\""));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        let body = Bytes::from_static(br#"{"error":"precondition_failed","message":"no"}"#);
        let answer = Answer { status: StatusCode::PRECONDITION_FAILED, headers, body };
        let refusal = answer.refusal();
        assert_eq!(
            (refusal.status, refusal.code, refusal.message.as_str()),
            (412, ErrorCode::PreconditionFailed, "no")
        );
        assert_eq!(refusal.etag.unwrap().as_str(), "\"1.2.3\"");
        assert_eq!(refusal.retry_after, Some(Duration::from_secs(1)));
        let bare =
            Answer { status: StatusCode::BAD_REQUEST, headers: HeaderMap::new(), body: Bytes::from_static(b"x") };
        assert_eq!(bare.refusal().code, ErrorCode::Other(String::new()));
    }
}
