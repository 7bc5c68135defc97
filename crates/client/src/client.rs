//! [`Client`]: the key-value operations of docs/http-api.md — read, write, conditional
//! writes, delete, batch, a page of keys — each one request (retried on 503 as
//! [`crate::retry`] says) whose answer becomes typed values or an [`Error`].
//! Compare-and-set is [`crate::cas`]'s, the batch format [`crate::batch`]'s. A client of a
//! cluster sends each request to its key's owner and a batch in one part per owner
//! ([`crate::cluster`] keeps the map).

use std::{collections::BTreeMap, sync::Arc};

use bytes::Bytes;
use hyper::{Method, StatusCode};

use crate::{
    batch::{self, Op, OpResult},
    cluster::{Router, Target, MISDIRECTED_RETRIES},
    error::{Error, ErrorCode},
    etag::{Condition, ETag, Record, Written},
    keys::{self, KeyPage},
    retry::{Repeat, Retry},
    transport::{Answer, Transport},
};

/// A client of one shardlite server, or of a cluster's nodes ([`crate::ClientBuilder::cluster`]).
/// Cheap to clone: clones share the connection pools, so make one and hand clones to tasks.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    servers: Servers,
    retry: Retry,
    cas_attempts: u32,
}

/// Where requests go.
#[derive(Debug)]
pub(crate) enum Servers {
    /// Every request to one server.
    One(Transport),
    /// Each request to its partition's owner in a cluster's map (boxed: the router holds the
    /// nodes' settings, and one server's client should not carry their size).
    Cluster(Box<Router>),
}

/// One request of an operation: what is sent, whether repeating it is safe, and the key or
/// partition it is for (which node of a cluster it goes to).
struct Call<'a> {
    method: Method,
    path: &'a str,
    condition: &'a Condition,
    body: Bytes,
    repeat: Repeat,
    target: Target<'a>,
}

impl<'a> Call<'a> {
    /// A plain `GET` of `path` for `target`: no condition, no body, safe to repeat.
    fn read(path: &'a str, target: Target<'a>) -> Self {
        Self {
            method: Method::GET,
            path,
            condition: &Condition::Always,
            body: Bytes::new(),
            repeat: Repeat::Safe,
            target,
        }
    }
}

impl Client {
    pub(crate) fn from_parts(servers: Servers, retry: Retry, cas_attempts: u32) -> Self {
        Self { inner: Arc::new(Inner { servers, retry, cas_attempts }) }
    }

    /// The version of the cluster map the client routes by: `None` for a client of one server,
    /// or before its first request read the map.
    pub fn map_version(&self) -> Option<u64> {
        match &self.inner.servers {
            Servers::One(_) => None,
            Servers::Cluster(router) => router.version(),
        }
    }

    /// Conditional writes [`Client::compare_and_set`] tries.
    pub(crate) fn cas_attempts(&self) -> u32 {
        self.inner.cas_attempts
    }

    /// The record of `key`, or `None` if there is none (`GET /kv/{key}`).
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Record>, Error> {
        let key = key.as_ref();
        let path = kv_path(key);
        let call = Call::read(&path, Target::Key(key));
        let answer = self.call(call).await?;
        match answer.status {
            StatusCode::OK => Ok(Some(Record { etag: answer.etag()?, value: answer.body })),
            StatusCode::NOT_FOUND if answer.refusal().code == ErrorCode::NotFound => Ok(None),
            _ => Err(answer.refusal().into()),
        }
    }

    /// Writes `value` under `key`, whatever is there (an upsert: `PUT /kv/{key}`).
    pub async fn put(&self, key: impl AsRef<[u8]>, value: impl Into<Bytes>) -> Result<Written, Error> {
        self.put_with(key, value, Condition::Always).await
    }

    /// Writes `value` under `key` if the record is still in the state `etag` names
    /// (compare-and-set, `If-Match`). A failed condition, also on an absent key, is
    /// [`Error::Server`] 412 `precondition_failed` carrying the current tag.
    pub async fn put_if(&self, key: impl AsRef<[u8]>, value: impl Into<Bytes>, etag: &ETag) -> Result<Written, Error> {
        self.put_with(key, value, Condition::Matches(etag.clone())).await
    }

    /// Writes `value` under `key` only if the key is absent (`If-None-Match: *`); 412
    /// `precondition_failed` if it exists.
    pub async fn create(&self, key: impl AsRef<[u8]>, value: impl Into<Bytes>) -> Result<ETag, Error> {
        Ok(self.put_with(key, value, Condition::Absent).await?.etag)
    }

    /// Writes `value` under `key` if `condition` holds.
    pub async fn put_with(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<Bytes>,
        condition: Condition,
    ) -> Result<Written, Error> {
        let key = key.as_ref();
        let path = kv_path(key);
        let repeat = if condition.is_always() { Repeat::Safe } else { Repeat::Unsafe };
        let (method, target, body) = (Method::PUT, Target::Key(key), value.into());
        let answer = self.call(Call { method, path: &path, condition: &condition, body, repeat, target }).await?;
        match answer.status {
            StatusCode::CREATED | StatusCode::OK => {
                Ok(Written { etag: answer.etag()?, created: answer.status == StatusCode::CREATED })
            }
            _ => Err(answer.refusal().into()),
        }
    }

    /// Deletes the record of `key`: `true` if there was one, `false` if the key was absent.
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool, Error> {
        match self.delete_with(key, Condition::Always).await {
            Ok(()) => Ok(true),
            Err(e) if e.code() == Some(&ErrorCode::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes the record of `key` if it is still in the state `etag` names (`If-Match`); 412
    /// `precondition_failed` otherwise, also if the key is absent.
    pub async fn delete_if(&self, key: impl AsRef<[u8]>, etag: &ETag) -> Result<(), Error> {
        self.delete_with(key, Condition::Matches(etag.clone())).await
    }

    /// Deletes the record of `key` if `condition` holds ([`Condition::Absent`] is refused: 400
    /// `bad_header`). An absent key without a condition is 404 `not_found`.
    pub async fn delete_with(&self, key: impl AsRef<[u8]>, condition: Condition) -> Result<(), Error> {
        let key = key.as_ref();
        let path = kv_path(key);
        let call = Call {
            method: Method::DELETE,
            path: &path,
            condition: &condition,
            body: Bytes::new(),
            repeat: Repeat::Unsafe,
            target: Target::Key(key),
        };
        let answer = self.call(call).await?;
        match answer.status {
            StatusCode::NO_CONTENT => Ok(()),
            _ => Err(answer.refusal().into()),
        }
    }

    /// Runs `ops` in one `POST /batch`: one result per operation, in order. The operations of
    /// one partition commit in one transaction, in order; a batch is not atomic across
    /// partitions. An operation's own failure (404, 412, a 503 of its partition's queue) is its
    /// result's error, not the call's: those are not retried here.
    ///
    /// In a cluster the batch is sent in one part per owner, all parts at once; a part its
    /// owner refuses as a whole gives that refusal to each of its operations, as a node that
    /// splits a batch does.
    pub async fn batch(&self, ops: &[Op]) -> Result<Vec<OpResult>, Error> {
        match &self.inner.servers {
            Servers::One(transport) => {
                let answer = self.send(transport, &batch_call(ops)).await?;
                match answer.status {
                    StatusCode::OK => batch::decode(&answer.body, ops.len()),
                    _ => Err(answer.refusal().into()),
                }
            }
            Servers::Cluster(router) => self.batch_by_owner(router, ops).await,
        }
    }

    /// One page of the keys of `partition`, starting after the cursor `after` (`None`: from
    /// the start), at most `limit` keys (`GET /keys`).
    pub async fn keys(&self, partition: u32, after: Option<&str>, limit: u32) -> Result<KeyPage, Error> {
        let path = keys::path(partition, after, limit);
        let call = Call::read(&path, Target::Partition(partition));
        let answer = self.call(call).await?;
        match answer.status {
            StatusCode::OK => keys::decode(&answer.body),
            _ => Err(answer.refusal().into()),
        }
    }

    /// Sends `call` to its server: the one server, or its target's owner in the cluster's map.
    async fn call(&self, call: Call<'_>) -> Result<Answer, Error> {
        match &self.inner.servers {
            Servers::One(transport) => self.send(transport, &call).await,
            Servers::Cluster(router) => self.call_owner(router, &call).await,
        }
    }

    /// Sends `call` to the owner of its target, and after a 421 (the map changed) again to the
    /// owner of the map read anew, while attempts remain.
    async fn call_owner(&self, router: &Router, call: &Call<'_>) -> Result<Answer, Error> {
        let mut routes = router.routes().await?;
        let mut attempt = 0;
        loop {
            let transport = &routes.node(routes.node_of(call.target)).transport;
            let answer = self.send(transport, call).await?;
            if answer.status != StatusCode::MISDIRECTED_REQUEST || attempt == MISDIRECTED_RETRIES {
                return Ok(answer);
            }
            routes = router.after_misdirected(transport, &routes, attempt).await?;
            attempt += 1;
        }
    }

    /// Sends `call` to `transport`'s server, again after each retryable 503 while retries
    /// remain; the last answer.
    async fn send(&self, transport: &Transport, call: &Call<'_>) -> Result<Answer, Error> {
        let retry = &self.inner.retry;
        let mut attempt = 0;
        loop {
            let answer =
                transport.send(call.method.clone(), call.path, call.condition.header(), call.body.clone()).await?;
            if answer.status != StatusCode::SERVICE_UNAVAILABLE {
                return Ok(answer);
            }
            let refused = Error::Server(answer.refusal());
            match retry.wait(&refused, attempt, call.repeat) {
                Some(wait) => tokio::time::sleep(wait).await,
                None => return Ok(answer),
            }
            attempt += 1;
        }
    }

    /// [`Client::batch`] in a cluster: one part per owner, all at once; the operations that
    /// met a 421 are sent again, by the map read anew, while attempts remain.
    async fn batch_by_owner(&self, router: &Router, ops: &[Op]) -> Result<Vec<OpResult>, Error> {
        let mut results: Vec<Option<OpResult>> = vec![None; ops.len()];
        let mut pending: Vec<usize> = (0..ops.len()).collect();
        let mut routes = router.routes().await?;
        for attempt in 0.. {
            let mut parts = BTreeMap::<usize, Vec<usize>>::new();
            for &i in &pending {
                parts.entry(routes.node_of(Target::Key(ops[i].key()))).or_default().push(i);
            }
            let mut sent = tokio::task::JoinSet::new();
            for (node, slots) in parts {
                let (client, transport) = (self.clone(), Arc::clone(&routes.node(node).transport));
                let part: Vec<Op> = slots.iter().map(|&i| ops[i].clone()).collect();
                sent.spawn(async move { (node, slots, client.batch_part(&transport, &part).await) });
            }
            let (mut misdirected, mut retried) = (None, Vec::new());
            while let Some(joined) = sent.join_next().await {
                let (node, slots, answered) = joined.map_err(|e| Error::Transport(Box::new(e)))?;
                for (slot, result) in slots.into_iter().zip(answered?) {
                    if attempt < MISDIRECTED_RETRIES && result.as_ref().is_err_and(|e| e.status == 421) {
                        misdirected = Some(node);
                        retried.push(slot);
                    }
                    results[slot] = Some(result);
                }
            }
            let Some(node) = misdirected else { break };
            routes = router.after_misdirected(&routes.node(node).transport, &routes, attempt).await?;
            pending = retried;
        }
        // Every operation was in a part, and every part answered each of its operations.
        results.into_iter().map(|r| r.ok_or_else(|| Error::Protocol("an operation got no result".into()))).collect()
    }

    /// One owner's part of a batch: its results, or its refusal of the whole part for each.
    async fn batch_part(&self, transport: &Transport, ops: &[Op]) -> Result<Vec<OpResult>, Error> {
        let answer = self.send(transport, &batch_call(ops)).await?;
        match answer.status {
            StatusCode::OK => batch::decode(&answer.body, ops.len()),
            _ => Ok(vec![Err(answer.refusal()); ops.len()]),
        }
    }
}

/// `POST /batch` of `ops` (the target is unused: a batch is split before it is sent).
fn batch_call(ops: &[Op]) -> Call<'static> {
    let body = Bytes::from(batch::encode(ops));
    let (condition, target) = (&Condition::Always, Target::Partition(0));
    Call { method: Method::POST, path: "/batch", condition, body, repeat: Repeat::Unsafe, target }
}

/// `/kv/{key}`, the key in lowercase hex: digit by digit into one buffer (`hex::encode` would
/// build a string of its own, and this runs for every request).
fn kv_path(key: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut path = String::with_capacity(4 + 2 * key.len());
    path.push_str("/kv/");
    for byte in key {
        path.push(char::from(DIGITS[usize::from(byte >> 4)]));
        path.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_travel_in_lowercase_hex() {
        assert_eq!(kv_path(b"key"), "/kv/6b6579");
        assert_eq!(kv_path(&[0xAB, 0x01]), "/kv/ab01");
    }
}
