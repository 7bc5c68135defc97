//! A client of etcd's v3 API through its JSON gateway: what shardlite's cluster asks of etcd
//! (ranges, puts, deletes, transactions, leases, watches) as JSON over HTTP.
//!
//! Why not gRPC: the gRPC client crates compile etcd's `.proto` files at build time, so building
//! shardlite would need `protoc` on the machine. The gateway (`/v3/kv/range`, `/v3/kv/txn`,
//! `/v3/lease/grant`, `/v3/watch`, ...) is served by every etcd since 3.4 on its client port and
//! speaks the same API: keys and values in base64, 64-bit numbers as strings.
//!
//! A [`Client`] holds several endpoints and sends each request to the one that last answered;
//! a request that could not connect moves on to the next (it never reached etcd, so it is safe
//! to send again), any other failure is the caller's to judge.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde::{de::DeserializeOwned, Deserialize, Deserializer};
use serde_json::{json, Value};

/// What a request to etcd can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No endpoint was given.
    #[error("no etcd endpoint given")]
    NoEndpoint,
    /// The request did not get an answer (connection refused, timed out, cut).
    #[error("etcd at {endpoint}: {source}")]
    Transport {
        /// The endpoint last tried.
        endpoint: String,
        /// What failed.
        source: reqwest::Error,
    },
    /// etcd answered with an error (a gRPC status code and its message).
    #[error("etcd at {endpoint} answered an error (code {code}): {message}")]
    Etcd {
        /// The endpoint that answered.
        endpoint: String,
        /// The gRPC status code (5: not found, for example a lease that expired).
        code: i64,
        /// etcd's message.
        message: String,
    },
    /// The answer was not what the API describes.
    #[error("etcd at {endpoint} answered something unreadable: {what}")]
    Decode {
        /// The endpoint that answered.
        endpoint: String,
        /// What was wrong.
        what: String,
    },
    /// The TLS configuration for `https://` endpoints could not be built.
    #[error("TLS for etcd: {0}")]
    Tls(String),
}

/// What a call returns.
pub type Result<T> = std::result::Result<T, Error>;

/// One key and its value as etcd stores it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KeyValue {
    /// The key.
    #[serde(deserialize_with = "base64_bytes")]
    pub key: Vec<u8>,
    /// The value (empty if it is empty).
    #[serde(default, deserialize_with = "base64_bytes")]
    pub value: Vec<u8>,
    /// The revision that created the key.
    #[serde(default, deserialize_with = "number")]
    pub create_revision: i64,
    /// The revision of the key's last change.
    #[serde(default, deserialize_with = "number")]
    pub mod_revision: i64,
    /// The lease the key is attached to (0: none).
    #[serde(default, deserialize_with = "number")]
    pub lease: i64,
}

impl KeyValue {
    /// The key as text.
    pub fn key_str(&self) -> Result<&str> {
        std::str::from_utf8(&self.key).map_err(|e| decode("", format!("a key that is not UTF-8: {e}")))
    }

    /// The value as text.
    pub fn value_str(&self) -> Result<&str> {
        std::str::from_utf8(&self.value).map_err(|e| decode("", format!("a value that is not UTF-8: {e}")))
    }
}

/// A condition of a transaction: a key's revision equals a number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// The key was created at this revision (0: the key does not exist).
    CreateRevision(String, i64),
    /// The key was last changed at this revision.
    ModRevision(String, i64),
}

impl Compare {
    fn to_json(&self) -> Value {
        match self {
            Compare::CreateRevision(key, rev) => {
                json!({"target": "CREATE", "result": "EQUAL", "key": b64(key), "create_revision": rev.to_string()})
            }
            Compare::ModRevision(key, rev) => {
                json!({"target": "MOD", "result": "EQUAL", "key": b64(key), "mod_revision": rev.to_string()})
            }
        }
    }
}

/// A change a transaction makes if its conditions hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    /// Sets the key to the value, attached to the lease if one is given.
    Put {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// The lease to attach the key to.
        lease: Option<i64>,
    },
    /// Removes the key.
    Delete(String),
}

impl TxnOp {
    /// A put of `value` at `key`, without a lease.
    pub fn put(key: impl Into<String>, value: impl Into<String>) -> Self {
        TxnOp::Put { key: key.into(), value: value.into(), lease: None }
    }

    fn to_json(&self) -> Value {
        match self {
            TxnOp::Put { key, value, lease } => json!({"request_put": put_body(key, value.as_bytes(), *lease)}),
            TxnOp::Delete(key) => json!({"request_delete_range": {"key": b64(key)}}),
        }
    }
}

/// How long connecting to an endpoint may take, and each request unless the client says.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// A client of one etcd cluster. Cheap to clone: clones share their connections.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    endpoints: Arc<Vec<String>>,
    /// The endpoint that answered last: where requests go first.
    current: Arc<AtomicUsize>,
    timeout: Duration,
}

impl Client {
    /// A client of the etcd cluster at `endpoints` (`http://HOST:PORT` or `https://...`, the
    /// latter trusting the system's roots); each request may take up to 5 seconds.
    pub fn new<S: AsRef<str>>(endpoints: &[S]) -> Result<Self> {
        Self::with_timeout(endpoints, DEFAULT_TIMEOUT)
    }

    /// As [`Client::new`], each connection and request bounded by `timeout`.
    pub fn with_timeout<S: AsRef<str>>(endpoints: &[S], timeout: Duration) -> Result<Self> {
        let endpoints: Vec<String> = endpoints
            .iter()
            .map(|e| e.as_ref().trim().trim_end_matches('/').to_owned())
            .filter(|e| !e.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(Error::NoEndpoint);
        }
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls_config()?)
            .connect_timeout(timeout)
            .no_proxy()
            .build()
            .map_err(|e| Error::Tls(e.to_string()))?;
        Ok(Self { http, endpoints: Arc::new(endpoints), current: Arc::new(AtomicUsize::new(0)), timeout })
    }

    /// The key `key`, if it exists.
    pub async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.range(json!({"key": b64(key)})).await?.into_iter().next())
    }

    /// Every key that starts with `prefix`, in key order, at one revision.
    pub async fn get_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>> {
        self.range(json!({"key": b64(prefix), "range_end": STANDARD.encode(prefix_end(prefix))})).await
    }

    async fn range(&self, body: Value) -> Result<Vec<KeyValue>> {
        #[derive(Deserialize)]
        struct Range {
            #[serde(default)]
            kvs: Vec<KeyValue>,
        }
        Ok(self.call::<Range>("/v3/kv/range", &body).await?.kvs)
    }

    /// Sets `key` to `value`, attached to `lease` if one is given.
    pub async fn put(&self, key: &str, value: &str, lease: Option<i64>) -> Result<()> {
        self.call::<Value>("/v3/kv/put", &put_body(key, value.as_bytes(), lease)).await.map(drop)
    }

    /// Removes `key`; whether it existed.
    pub async fn delete(&self, key: &str) -> Result<bool> {
        #[derive(Deserialize)]
        struct Deleted {
            #[serde(default, deserialize_with = "number")]
            deleted: i64,
        }
        Ok(self.call::<Deleted>("/v3/kv/deleterange", &json!({"key": b64(key)})).await?.deleted > 0)
    }

    /// Makes the changes `then` in one step if every condition of `when` holds; whether they
    /// held (and the changes were made).
    pub async fn txn(&self, when: &[Compare], then: &[TxnOp]) -> Result<bool> {
        #[derive(Deserialize)]
        struct Txn {
            #[serde(default)]
            succeeded: bool,
        }
        let body = json!({
            "compare": when.iter().map(Compare::to_json).collect::<Vec<_>>(),
            "success": then.iter().map(TxnOp::to_json).collect::<Vec<_>>(),
        });
        Ok(self.call::<Txn>("/v3/kv/txn", &body).await?.succeeded)
    }

    /// A new lease of `ttl` seconds: its id.
    pub async fn lease_grant(&self, ttl: i64) -> Result<i64> {
        #[derive(Deserialize)]
        struct Granted {
            #[serde(rename = "ID", deserialize_with = "number")]
            id: i64,
        }
        Ok(self.call::<Granted>("/v3/lease/grant", &json!({"TTL": ttl.to_string()})).await?.id)
    }

    /// Renews `lease` once: the seconds it now has to live, 0 if it had already expired.
    pub async fn lease_keep_alive(&self, lease: i64) -> Result<i64> {
        #[derive(Deserialize)]
        struct Renewed {
            #[serde(rename = "TTL", default, deserialize_with = "number")]
            ttl: i64,
        }
        #[derive(Deserialize)]
        struct Streamed {
            result: Renewed,
        }
        let body = json!({"ID": lease.to_string()});
        Ok(self.call::<Streamed>("/v3/lease/keepalive", &body).await?.result.ttl)
    }

    /// Ends `lease` now: the keys attached to it go with it.
    pub async fn lease_revoke(&self, lease: i64) -> Result<()> {
        self.call::<Value>("/v3/lease/revoke", &json!({"ID": lease.to_string()})).await.map(drop)
    }

    /// Watches every key that starts with `prefix` from now on.
    pub async fn watch_prefix(&self, prefix: &str) -> Result<Watch> {
        let body = json!({"create_request": {"key": b64(prefix), "range_end": STANDARD.encode(prefix_end(prefix))}});
        let (endpoint, response) = self.send("/v3/watch", &body, None).await?;
        Ok(Watch { endpoint, response, buffer: Vec::new() })
    }

    /// Posts `body` to `path` and reads the answer as `T`.
    async fn call<T: DeserializeOwned>(&self, path: &str, body: &Value) -> Result<T> {
        let (endpoint, response) = self.send(path, body, Some(self.timeout)).await?;
        let bytes = response.bytes().await.map_err(|source| Error::Transport { endpoint: endpoint.clone(), source })?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| decode(&endpoint, e.to_string()))?;
        check(&endpoint, &value)?;
        serde_json::from_value(value).map_err(|e| decode(&endpoint, e.to_string()))
    }

    /// Posts `body` to `path` at the current endpoint, moving on to the next while one cannot
    /// be connected to; the endpoint that answered and its answer.
    async fn send(&self, path: &str, body: &Value, timeout: Option<Duration>) -> Result<(String, reqwest::Response)> {
        let first = self.current.load(Ordering::Relaxed);
        let mut last = None;
        for attempt in 0..self.endpoints.len() {
            let at = (first + attempt) % self.endpoints.len();
            let endpoint = &self.endpoints[at];
            let mut request = self
                .http
                .post(format!("{endpoint}{path}"))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
            if let Some(timeout) = timeout {
                request = request.timeout(timeout);
            }
            match request.send().await {
                Ok(response) => {
                    self.current.store(at, Ordering::Relaxed);
                    return Ok((endpoint.clone(), response));
                }
                Err(source) if source.is_connect() => {
                    last = Some(Error::Transport { endpoint: endpoint.clone(), source })
                }
                Err(source) => return Err(Error::Transport { endpoint: endpoint.clone(), source }),
            }
        }
        Err(last.unwrap_or(Error::NoEndpoint))
    }
}

/// The changes under a prefix, as etcd streams them.
#[derive(Debug)]
pub struct Watch {
    endpoint: String,
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Watch {
    /// Waits for the next changes: how many keys changed, or `None` once etcd ended the watch.
    pub async fn next(&mut self) -> Result<Option<usize>> {
        loop {
            while let Some(message) = self.take_message()? {
                check(&self.endpoint, &message)?;
                let result = &message["result"];
                if result["canceled"].as_bool() == Some(true) {
                    return Ok(None);
                }
                let events = result["events"].as_array().map_or(0, Vec::len);
                if events > 0 {
                    return Ok(Some(events));
                }
            }
            let chunk = self.response.chunk().await;
            match chunk.map_err(|source| Error::Transport { endpoint: self.endpoint.clone(), source })? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => return Ok(None),
            }
        }
    }

    /// The first whole JSON message in the buffer, removed from it.
    fn take_message(&mut self) -> Result<Option<Value>> {
        let mut messages = serde_json::Deserializer::from_slice(&self.buffer).into_iter::<Value>();
        match messages.next() {
            Some(Ok(message)) => {
                let used = messages.byte_offset();
                self.buffer.drain(..used);
                Ok(Some(message))
            }
            Some(Err(err)) if err.is_eof() => Ok(None),
            None => Ok(None),
            Some(Err(err)) => Err(decode(&self.endpoint, err.to_string())),
        }
    }
}

/// An error etcd answered instead of a result: `{"error": ..., "code": N, "message": ...}`, or
/// a stream's `{"error": {"grpc_code": N, "message": ...}}`.
fn check(endpoint: &str, answer: &Value) -> Result<()> {
    let Some(error) = answer.get("error") else { return Ok(()) };
    let (code, message) = match error {
        Value::Object(inner) => (inner.get("grpc_code").or(inner.get("code")), inner.get("message")),
        _ => (answer.get("code"), answer.get("message").or(Some(error))),
    };
    Err(Error::Etcd {
        endpoint: endpoint.to_owned(),
        code: code.and_then(Value::as_i64).unwrap_or(-1),
        message: message.and_then(Value::as_str).unwrap_or_default().to_owned(),
    })
}

fn decode(endpoint: &str, what: String) -> Error {
    Error::Decode { endpoint: endpoint.to_owned(), what }
}

fn put_body(key: &str, value: &[u8], lease: Option<i64>) -> Value {
    let mut body = json!({"key": b64(key), "value": STANDARD.encode(value)});
    if let Some(lease) = lease {
        body["lease"] = json!(lease.to_string());
    }
    body
}

fn b64(text: &str) -> String {
    STANDARD.encode(text.as_bytes())
}

/// The end of the range of keys that start with `prefix`: the prefix with its last byte below
/// 0xff incremented and what follows cut (etcd's convention; `\0` for "to the end").
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// TLS for `https://` endpoints: the system's roots, ring's cryptography.
fn tls_config() -> Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// A 64-bit number etcd's gateway wrote as a string (or, in some versions, as a number).
fn number<'de, D: Deserializer<'de>>(de: D) -> std::result::Result<i64, D::Error> {
    match Value::deserialize(de)? {
        Value::String(s) => s.parse().map_err(serde::de::Error::custom),
        Value::Number(n) => n.as_i64().ok_or_else(|| serde::de::Error::custom("not a 64-bit integer")),
        other => Err(serde::de::Error::custom(format!("not a number: {other}"))),
    }
}

fn base64_bytes<'de, D: Deserializer<'de>>(de: D) -> std::result::Result<Vec<u8>, D::Error> {
    let text = String::deserialize(de)?;
    STANDARD.decode(text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_where_its_last_byte_below_0xff_is_incremented() {
        assert_eq!(prefix_end("/shardlite/"), b"/shardlite0");
        assert_eq!(prefix_end("a"), b"b");
        assert_eq!(prefix_end(""), [0]);
    }

    #[test]
    fn the_gateways_numbers_and_base64_are_read() {
        let kv: KeyValue = serde_json::from_value(json!({
            "key": "L3AvYQ==", "create_revision": "2", "mod_revision": 7, "version": "1", "value": "aGVsbG8="
        }))
        .unwrap();
        assert_eq!((kv.key_str().unwrap(), kv.value_str().unwrap()), ("/p/a", "hello"));
        assert_eq!((kv.create_revision, kv.mod_revision, kv.lease), (2, 7, 0));
    }

    #[test]
    fn errors_in_both_of_the_gateways_shapes_are_told() {
        let unary = json!({"error": "etcdserver: requested lease not found", "code": 5, "message": "lease not found"});
        assert!(matches!(check("e", &unary), Err(Error::Etcd { code: 5, .. })));
        let streamed = json!({"error": {"grpc_code": 14, "message": "unavailable"}});
        assert!(matches!(check("e", &streamed), Err(Error::Etcd { code: 14, .. })));
        assert!(check("e", &json!({"result": {}})).is_ok());
    }
}
