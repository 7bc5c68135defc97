//! `POST /batch` (docs/http-api.md, "POST /batch"): [`Op`], one operation as the caller builds
//! it; the JSON the server reads (keys and values in lowercase hex, conditions as
//! `if_match` / `if_none_match`); and each operation's result, an [`Outcome`] or the
//! operation's own [`ServerError`].

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{
    error::{Error, ErrorCode, ServerError},
    etag::{Condition, ETag},
};

/// One operation of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    kind: Kind,
    key: Bytes,
    condition: Condition,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Get,
    Put(Bytes),
    Delete,
}

impl Op {
    /// Read `key`.
    pub fn get(key: impl Into<Bytes>) -> Self {
        Self { kind: Kind::Get, key: key.into(), condition: Condition::Always }
    }

    /// Write `value` under `key`.
    pub fn put(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        Self { kind: Kind::Put(value.into()), key: key.into(), condition: Condition::Always }
    }

    /// Delete `key`.
    pub fn delete(key: impl Into<Bytes>) -> Self {
        Self { kind: Kind::Delete, key: key.into(), condition: Condition::Always }
    }

    /// The key the operation is for.
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Runs the operation only if `condition` holds, as the headers of a single write do (the
    /// server refuses conditions on a get, and [`Condition::Absent`] on a delete, with the
    /// operation's 400 `bad_condition`).
    #[must_use]
    pub fn when(mut self, condition: Condition) -> Self {
        self.condition = condition;
        self
    }
}

/// What one operation of a batch did: its status as the single-key request would have answered
/// (get 200, put 201 or 200, delete 204), or the operation's own refusal (404, 412 with the
/// current tag, 503 if its partition's queue was full, ...).
pub type OpResult = Result<Outcome, ServerError>;

/// A successful operation's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// 200 (get, or put of an existing key), 201 (put of a new key), 204 (delete).
    pub status: u16,
    /// The record's tag: a get's, a put's new one, a deleted record's last one.
    pub etag: Option<ETag>,
    /// The record's update counter (1 on insert, +1 on every update), for information:
    /// conditions take the tag.
    pub counter: Option<u64>,
    /// A get's value.
    pub value: Option<Bytes>,
}

#[derive(Serialize)]
struct Request<'a> {
    ops: Vec<WireOp<'a>>,
}

#[derive(Serialize)]
struct WireOp<'a> {
    op: &'static str,
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    if_match: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    if_none_match: Option<&'a str>,
}

#[derive(Deserialize)]
struct Answer {
    results: Vec<WireResult>,
}

#[derive(Deserialize)]
struct WireResult {
    status: u16,
    etag: Option<String>,
    counter: Option<u64>,
    value: Option<String>,
    error: Option<String>,
    message: Option<String>,
}

/// The request body for `ops`.
pub(crate) fn encode(ops: &[Op]) -> Vec<u8> {
    let ops = ops
        .iter()
        .map(|op| {
            let (name, value) = match &op.kind {
                Kind::Get => ("get", None),
                Kind::Put(value) => ("put", Some(hex::encode(value))),
                Kind::Delete => ("delete", None),
            };
            let (if_match, if_none_match) = match &op.condition {
                Condition::Always => (None, None),
                Condition::Matches(tag) => (Some(tag.as_str()), None),
                Condition::Exists => (Some("*"), None),
                Condition::Absent => (None, Some("*")),
            };
            WireOp { op: name, key: hex::encode(&op.key), value, if_match, if_none_match }
        })
        .collect();
    // Strings and numbers only: serializing cannot fail.
    serde_json::to_vec(&Request { ops }).unwrap_or_default()
}

/// The results of a 200 answer to a batch of `ops` operations.
pub(crate) fn decode(body: &[u8], ops: usize) -> Result<Vec<OpResult>, Error> {
    let answer: Answer = serde_json::from_slice(body)
        .map_err(|e| Error::Protocol(format!("a batch answer that is not its JSON: {e}")))?;
    if answer.results.len() != ops {
        return Err(Error::Protocol(format!("{} batch results for {ops} operations", answer.results.len())));
    }
    answer.results.into_iter().map(result).collect()
}

fn result(wire: WireResult) -> Result<OpResult, Error> {
    let etag = wire.etag.as_deref().map(ETag::new).transpose()?;
    if let Some(code) = wire.error {
        let message = wire.message.unwrap_or_default();
        return Ok(Err(ServerError {
            status: wire.status,
            code: ErrorCode::parse(&code),
            message,
            etag,
            retry_after: None,
        }));
    }
    let value = wire
        .value
        .map(|v| hex::decode(v).map(Bytes::from))
        .transpose()
        .map_err(|e| Error::Protocol(format!("a batch value that is not hex: {e}")))?;
    Ok(Ok(Outcome { status: wire.status, etag, counter: wire.counter, value }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_written_as_the_server_reads_them() {
        let tag = ETag::new("\"1.4.7\"").unwrap();
        let ops = [
            Op::put(&b"k1"[..], &b"value"[..]),
            Op::put(&b"k2"[..], Bytes::new()).when(Condition::Absent),
            Op::put(&b"k3"[..], &[0u8][..]).when(Condition::Matches(tag)),
            Op::get(&b"k1"[..]),
            Op::delete(&b"k5"[..]).when(Condition::Exists),
        ];
        let json: serde_json::Value = serde_json::from_slice(&encode(&ops)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"ops": [
                {"op": "put", "key": "6b31", "value": "76616c7565"},
                {"op": "put", "key": "6b32", "value": "", "if_none_match": "*"},
                {"op": "put", "key": "6b33", "value": "00", "if_match": "\"1.4.7\""},
                {"op": "get", "key": "6b31"},
                {"op": "delete", "key": "6b35", "if_match": "*"},
            ]})
        );
    }

    #[test]
    fn results_are_outcomes_or_the_operations_refusals() {
        let body = br#"{"results": [
            {"status": 201, "etag": "\"1.12.1\"", "counter": 1},
            {"status": 412, "etag": "\"1.3.5\"", "counter": 5, "error": "precondition_failed", "message": "no"},
            {"status": 200, "etag": "\"1.12.1\"", "counter": 1, "value": "76616c7565"}
        ]}"#;
        let results = decode(body, 3).unwrap();
        let created = results[0].as_ref().unwrap();
        assert_eq!((created.status, created.counter), (201, Some(1)));
        let refused = results[1].as_ref().unwrap_err();
        assert_eq!(
            (refused.code.clone(), refused.etag.as_ref().unwrap().as_str()),
            (ErrorCode::PreconditionFailed, "\"1.3.5\"")
        );
        assert_eq!(results[2].as_ref().unwrap().value.as_deref(), Some(&b"value"[..]));
        assert!(matches!(decode(body, 2), Err(Error::Protocol(_))));
        assert!(matches!(decode(b"{}", 0), Err(Error::Protocol(_))));
    }
}
