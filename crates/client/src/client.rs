//! [`Client`]: the key-value operations of docs/http-api.md — read, write, conditional
//! writes, delete, batch, a page of keys — each one request (retried on 503 as
//! [`crate::retry`] says) whose answer becomes typed values or an [`Error`].
//! Compare-and-set is [`crate::cas`]'s, the batch format [`crate::batch`]'s.

use std::sync::Arc;

use bytes::Bytes;
use hyper::{Method, StatusCode};

use crate::{
    batch::{self, Op, OpResult},
    error::{Error, ErrorCode},
    etag::{Condition, ETag, Record, Written},
    keys::{self, KeyPage},
    retry::{Repeat, Retry},
    transport::{Answer, Transport},
};

/// A client of one shardlite server. Cheap to clone: clones share the connection pool, so make
/// one and hand clones to tasks.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    transport: Transport,
    retry: Retry,
    cas_attempts: u32,
}

/// One request of an operation: what is sent, and whether repeating it is safe.
struct Call<'a> {
    method: Method,
    path: &'a str,
    condition: &'a Condition,
    body: Bytes,
    repeat: Repeat,
}

impl<'a> Call<'a> {
    /// A plain `GET` of `path`: no condition, no body, safe to repeat.
    fn read(path: &'a str) -> Self {
        Self { method: Method::GET, path, condition: &Condition::Always, body: Bytes::new(), repeat: Repeat::Safe }
    }
}

impl Client {
    pub(crate) fn from_parts(transport: Transport, retry: Retry, cas_attempts: u32) -> Self {
        Self { inner: Arc::new(Inner { transport, retry, cas_attempts }) }
    }

    /// Conditional writes [`Client::compare_and_set`] tries.
    pub(crate) fn cas_attempts(&self) -> u32 {
        self.inner.cas_attempts
    }

    /// The record of `key`, or `None` if there is none (`GET /kv/{key}`).
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Record>, Error> {
        let path = kv_path(key.as_ref());
        let call = Call::read(&path);
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
        let path = kv_path(key.as_ref());
        let repeat = if condition.is_always() { Repeat::Safe } else { Repeat::Unsafe };
        let answer = self
            .call(Call { method: Method::PUT, path: &path, condition: &condition, body: value.into(), repeat })
            .await?;
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
        let path = kv_path(key.as_ref());
        let call = Call {
            method: Method::DELETE,
            path: &path,
            condition: &condition,
            body: Bytes::new(),
            repeat: Repeat::Unsafe,
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
    pub async fn batch(&self, ops: &[Op]) -> Result<Vec<OpResult>, Error> {
        let body = Bytes::from(batch::encode(ops));
        let call =
            Call { method: Method::POST, path: "/batch", condition: &Condition::Always, body, repeat: Repeat::Unsafe };
        let answer = self.call(call).await?;
        match answer.status {
            StatusCode::OK => batch::decode(&answer.body, ops.len()),
            _ => Err(answer.refusal().into()),
        }
    }

    /// One page of the keys of `partition`, starting after the cursor `after` (`None`: from
    /// the start), at most `limit` keys (`GET /keys`).
    pub async fn keys(&self, partition: u32, after: Option<&str>, limit: u32) -> Result<KeyPage, Error> {
        let path = keys::path(partition, after, limit);
        let call = Call::read(&path);
        let answer = self.call(call).await?;
        match answer.status {
            StatusCode::OK => keys::decode(&answer.body),
            _ => Err(answer.refusal().into()),
        }
    }

    /// Sends `call`, again after each retryable 503 while retries remain; the last answer.
    async fn call(&self, call: Call<'_>) -> Result<Answer, Error> {
        let Inner { transport, retry, .. } = &*self.inner;
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
