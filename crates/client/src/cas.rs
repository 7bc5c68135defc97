//! [`Client::compare_and_set`]: a read-modify-write of one record that never loses another
//! writer's update. Read the record, compute its new value, write it only if the record is
//! still in the state read (`If-Match` its tag; `If-None-Match: *` if it was absent); if
//! another writer got in between (412), read again and recompute — at most the client's
//! `cas_attempts` writes, then [`Error::Contention`].
//!
//! The condition is checked inside the server's write transaction, so each successful write
//! applied the function to the state it replaced: `n` successful increments of a counter add
//! exactly `n`. The 412's `ETag` names the new state, but the function needs its value too, so
//! the record is read again.

use bytes::Bytes;

use crate::{
    client::Client,
    error::Error,
    etag::{Condition, Written},
};

impl Client {
    /// Replaces the value of `key` with `update(current)` — `current` is `None` if the key is
    /// absent — atomically with respect to every other write of the key, retrying while others
    /// change it in between (up to [`ClientBuilder::cas_attempts`](crate::ClientBuilder::cas_attempts)
    /// writes). `update` may run several times: it should only compute.
    pub async fn compare_and_set<F, V>(&self, key: impl AsRef<[u8]>, mut update: F) -> Result<Written, Error>
    where
        F: FnMut(Option<&[u8]>) -> V,
        V: Into<Bytes>,
    {
        let key = key.as_ref();
        let mut current = self.get(key).await?;
        for _ in 0..self.cas_attempts() {
            let value = update(current.as_ref().map(|r| &r.value[..])).into();
            let condition = match &current {
                Some(record) => Condition::Matches(record.etag.clone()),
                None => Condition::Absent,
            };
            match self.put_with(key, value, condition).await {
                Err(e) if e.is_precondition_failed() => current = self.get(key).await?,
                written => return written,
            }
        }
        Err(Error::Contention { attempts: self.cas_attempts() })
    }
}
