//! `POST /batch` on this node: many gets, puts and deletes in one request (the format is
//! documented in `docs/http-api.md`). Items that are malformed get their own 4xx result and are
//! not sent; the rest go to the backend as one batch (SQLite: the operations of one partition
//! commit in one transaction, in order; PostgreSQL: the whole batch is one transaction). The
//! answer is 200 with one result per item, in the request's order.
//!
//! A cluster node splits the batch by owner (`super::cluster::batch`) with the pieces here:
//! [`read`] the request, [`run_here`] its own part, [`answer`] the results.

use hyper::{body::Incoming, header::HeaderValue, header::RETRY_AFTER, http::request::Parts, Request, StatusCode};
use serde::{Deserialize, Serialize};
use shardlite_engine::{Condition, Op, Outcome, Version};

use crate::{
    backend::BackendError,
    cluster::Owner,
    http::{
        body::{self, Limit},
        conditional::{parse_tags, write_condition},
        error::ApiError,
        key::{decode, parse_key},
        response::{self, etag_text, Response},
        state::State,
    },
};

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchRequest {
    ops: Vec<Object<WireOp>>,
}

/// A `T` read only from a JSON object: serde reads a struct from an array as well (`[[]]` would
/// be an empty batch, `["get", "aa"]` an operation), which the API does not accept.
#[derive(Debug)]
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Only<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Only<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(Only(std::marker::PhantomData)).map(Object)
    }
}

/// One operation as sent.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
enum WireOp {
    Get {
        key: String,
    },
    Put {
        key: String,
        value: String,
        /// An entity tag as the `ETag` header (or a result's `etag`) gives it, or `"*"`;
        /// anything else is this item's 400, so it is taken as any JSON value.
        #[serde(default)]
        if_match: Option<serde_json::Value>,
        #[serde(default)]
        if_none_match: Option<String>,
    },
    Delete {
        key: String,
        #[serde(default)]
        if_match: Option<serde_json::Value>,
    },
}

/// The response body.
#[derive(Debug, Serialize)]
struct BatchResponse {
    results: Vec<Answer>,
}

/// One operation's answer: served here, or (in a cluster) as the partition's owner gave it.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum Answer {
    /// Served by this node.
    Here(ItemResult),
    /// One of the owner's `results`, as it is.
    Relayed(serde_json::Value),
}

impl Answer {
    fn status(&self) -> u64 {
        match self {
            Answer::Here(result) => u64::from(result.status),
            Answer::Relayed(value) => value.get("status").and_then(serde_json::Value::as_u64).unwrap_or_default(),
        }
    }
}

/// One operation's result: its HTTP status, and what the single-key route would have said:
/// the record's entity tag (`ETag`) and, beside it, its update counter.
#[derive(Debug, Serialize, Default)]
pub(crate) struct ItemResult {
    status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    etag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    counter: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// A 421's owner of the partition.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    owner: Option<Box<Owner>>,
}

/// A `POST /batch` request, read and decoded.
pub(crate) struct Batch {
    /// The request's head.
    pub head: Parts,
    /// Its body, as sent.
    pub bytes: Vec<u8>,
    /// One item per operation, in order: the operation, or its own refusal.
    pub items: Vec<Result<Op, ApiError>>,
}

/// Serves `POST /batch` on a server that is no node of a cluster: every operation runs here.
pub async fn handle(state: &State, req: Request<Incoming>) -> Result<Response, ApiError> {
    let Batch { items, .. } = read(state, req).await?;
    answer(run_here(state, items).await?.into_iter().map(Answer::Here).collect())
}

/// Reads the request's body (within `--batch-max-bytes`) and decodes it.
pub(crate) async fn read(state: &State, req: Request<Incoming>) -> Result<Batch, ApiError> {
    let (head, body) = req.into_parts();
    let limit = Limit { max: state.options.batch_max_bytes, code: "batch_too_large", what: "the batch" };
    let bytes = body::read(body, limit, state.options.body_timeout_ms).await?;
    let items = decode_batch(&bytes, state.options.batch_max_ops, state.backend.max_value())?;
    Ok(Batch { head, bytes, items })
}

/// The answer to a batch: 200 with its `results`, and `Retry-After` if any of them is a 503.
pub(crate) fn answer(results: Vec<Answer>) -> Result<Response, ApiError> {
    let overloaded = results.iter().any(|r| r.status() == u64::from(StatusCode::SERVICE_UNAVAILABLE.as_u16()));
    let body = serde_json::to_vec(&BatchResponse { results })
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    let mut resp = response::json(StatusCode::OK, body);
    if overloaded {
        resp.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("1"));
    }
    Ok(resp)
}

/// Runs decoded operations on this node's backend: one result per item, in order (a
/// malformed item's is its error).
pub(crate) async fn run_here(state: &State, items: Vec<Result<Op, ApiError>>) -> Result<Vec<ItemResult>, ApiError> {
    let mut results: Vec<Option<ItemResult>> = Vec::with_capacity(items.len());
    let (mut ops, mut slots) = (Vec::new(), Vec::new());
    for (i, item) in items.into_iter().enumerate() {
        match item {
            Ok(op) => {
                ops.push(op);
                slots.push(i);
                results.push(None);
            }
            Err(err) => results.push(Some(error_result(err))),
        }
    }
    if !ops.is_empty() {
        let outcomes = state.backend.batch(ops).await?;
        for (slot, outcome) in slots.into_iter().zip(outcomes) {
            results[slot] = Some(match outcome {
                Ok(outcome) => success_result(outcome),
                Err(err) => backend_error_result(err),
            });
        }
    }
    Ok(results.into_iter().map(Option::unwrap_or_default).collect())
}

/// Decodes a `POST /batch` body: a whole-request 4xx error (not the JSON format, more than
/// `max_ops` operations), or one result per operation in order: the engine's operation, or that
/// item's own 4xx error (bad key, bad value, value over `max_value`, bad condition).
pub fn decode_batch(body: &[u8], max_ops: usize, max_value: usize) -> Result<Vec<Result<Op, ApiError>>, ApiError> {
    let Object(request): Object<BatchRequest> = serde_json::from_slice(body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_batch", format!("the batch is not valid: {e}")))?;
    if request.ops.len() > max_ops {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_ops",
            format!("the batch has {} operations; the most is {max_ops}", request.ops.len()),
        ));
    }
    Ok(request.ops.into_iter().map(|Object(wire)| to_op(wire, max_value)).collect())
}

/// Checks and decodes one operation.
fn to_op(wire: WireOp, max_value: usize) -> Result<Op, ApiError> {
    Ok(match wire {
        WireOp::Get { key } => Op::Get { key: parse_key(&key)? },
        WireOp::Put { key, value, if_match, if_none_match } => {
            let key = parse_key(&key)?;
            if value.len() / 2 > max_value {
                return Err(ApiError::from(BackendError::ValueTooLarge { len: value.len() / 2, max: max_value }));
            }
            let value = decode(&value).map_err(|why| bad_item("bad_value", format!("the value {why}")))?;
            let absent = match if_none_match.as_deref() {
                None => false,
                Some("*") => true,
                Some(_) => return Err(bad_item("bad_condition", "if_none_match takes only \"*\"")),
            };
            let condition = match (if_match.map(if_match_condition).transpose()?, absent) {
                (None, false) => Condition::None,
                (None, true) => Condition::Absent,
                (Some(condition), false) => condition,
                // As the same pair of headers on a PUT: they never both hold (RFC 9110 §13.2.2),
                // so a condition that matches nothing: 412 with the current tag.
                (Some(_), true) => Condition::UnknownVersion,
            };
            Op::Put { key, value, condition }
        }
        WireOp::Delete { key, if_match } => {
            Op::Delete { key: parse_key(&key)?, condition: if_match.map_or(Ok(Condition::None), if_match_condition)? }
        }
    })
}

/// `if_match`: the text of an `If-Match` header, in a JSON string.
fn if_match_condition(m: serde_json::Value) -> Result<Condition, ApiError> {
    let serde_json::Value::String(text) = m else {
        return Err(bad_item(
            "bad_condition",
            format!("if_match takes an entity tag as a string (as the ETag header gives it) or \"*\", not {m}"),
        ));
    };
    let tags = parse_tags(text.as_bytes()).map_err(|why| bad_item("bad_condition", format!("if_match: {why}")))?;
    write_condition(tags).map_err(|why| bad_item("bad_condition", format!("if_match: {why}")))
}

fn bad_item(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code, message)
}

fn success_result(outcome: Outcome) -> ItemResult {
    match outcome {
        Outcome::Found(Some(record)) => {
            ItemResult { status: 200, value: Some(hex::encode(record.value)), ..versioned(Some(record.version)) }
        }
        Outcome::Found(None) => backend_error_result(BackendError::NotFound),
        Outcome::Written(w) => ItemResult { status: if w.created { 201 } else { 200 }, ..versioned(Some(w.version)) },
        Outcome::Deleted { version } => ItemResult { status: 204, ..versioned(Some(version)) },
    }
}

/// A result naming a version (or none): its tag and update counter.
fn versioned(version: Option<Version>) -> ItemResult {
    ItemResult { etag: version.map(etag_text), counter: version.map(|v| v.counter), ..ItemResult::default() }
}

/// An item's refusal as its result (a 421 names the owner, as the single-key route does).
pub(crate) fn error_result(err: ApiError) -> ItemResult {
    ItemResult {
        status: err.status.as_u16(),
        error: Some(err.code),
        message: Some(err.message),
        owner: err.owner,
        ..ItemResult::default()
    }
}

fn backend_error_result(err: BackendError) -> ItemResult {
    // The single-key route sends a failed condition's current tag as the ETag.
    let current = match err {
        BackendError::ConditionFailed { current } => current,
        _ => None,
    };
    let ItemResult { etag, counter, .. } = versioned(current);
    ItemResult { etag, counter, ..error_result(ApiError::from(err)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Vec<Result<Op, ApiError>> {
        let req: BatchRequest = serde_json::from_str(json).unwrap();
        req.ops.into_iter().map(|Object(w)| to_op(w, 4)).collect()
    }

    /// The body and each operation must be JSON objects: serde alone would read `[[]]` as an
    /// empty batch.
    #[test]
    fn a_batch_or_an_operation_that_is_not_an_object_is_refused() {
        for body in ["[[]]", " [[{\"op\": \"get\", \"key\": \"aa\"}]]", "{\"ops\": [[\"get\", \"aa\"]]}"] {
            let err = decode_batch(body.as_bytes(), 10, 4).unwrap_err();
            assert_eq!((err.status, err.code), (StatusCode::BAD_REQUEST, "bad_batch"), "{body}");
        }
    }

    #[test]
    fn decodes_every_kind_of_operation() {
        let ops = parse(
            r#"{"ops": [{"op": "get", "key": "aa"},
                        {"op": "put", "key": "bb", "value": "0102", "if_none_match": "*"},
                        {"op": "put", "key": "bb", "value": "", "if_match": "\"4.1.3\""},
                        {"op": "delete", "key": "cc", "if_match": "*"}]}"#,
        );
        assert_eq!(ops[0], Ok(Op::Get { key: vec![0xaa] }));
        assert_eq!(ops[1], Ok(Op::Put { key: vec![0xbb], value: vec![1, 2], condition: Condition::Absent }));
        let version = Version { epoch: 4, id: 1, counter: 3 };
        assert_eq!(ops[2], Ok(Op::Put { key: vec![0xbb], value: vec![], condition: Condition::Version(version) }));
        assert_eq!(ops[3], Ok(Op::Delete { key: vec![0xcc], condition: Condition::Present }));
    }

    #[test]
    fn if_match_with_if_none_match_is_a_condition_that_never_holds() {
        let ops = parse(
            r#"{"ops": [{"op": "put", "key": "bb", "value": "", "if_match": "*", "if_none_match": "*"},
                        {"op": "put", "key": "bb", "value": "", "if_match": "x", "if_none_match": "*"},
                        {"op": "put", "key": "bb", "value": "", "if_match": "*", "if_none_match": "\"1\""}]}"#,
        );
        assert_eq!(ops[0], Ok(Op::Put { key: vec![0xbb], value: vec![], condition: Condition::UnknownVersion }));
        assert_eq!(ops[1].as_ref().unwrap_err().status.as_u16(), 400, "a malformed one is 400 whatever the other");
        assert_eq!(ops[2].as_ref().unwrap_err().status.as_u16(), 400);
    }

    #[test]
    fn malformed_items_fail_alone_with_a_status() {
        let ops = parse(
            r#"{"ops": [{"op": "get", "key": "AA"},
                        {"op": "put", "key": "bb", "value": "0102030405"},
                        {"op": "put", "key": "bb", "value": "zz"},
                        {"op": "put", "key": "bb", "value": "", "if_none_match": "\"1\""},
                        {"op": "delete", "key": "cc", "if_match": "x"},
                        {"op": "delete", "key": "cc", "if_match": 3},
                        {"op": "delete", "key": "cc", "if_match": "\"1\", \"2\""}]}"#,
        );
        let status: Vec<u16> = ops.iter().map(|r| r.as_ref().unwrap_err().status.as_u16()).collect();
        assert_eq!(status, [400, 413, 400, 400, 400, 400, 400]);
        let foreign = parse(r#"{"ops": [{"op": "delete", "key": "cc", "if_match": "W/\"4.1.3\""}]}"#);
        assert_eq!(foreign[0], Ok(Op::Delete { key: vec![0xcc], condition: Condition::UnknownVersion }));
    }

    #[test]
    fn whole_request_errors_come_before_any_item() {
        let status = |body: &str| decode_batch(body.as_bytes(), 2, 4).unwrap_err().status.as_u16();
        assert_eq!(status("not json"), 400);
        assert_eq!(status(r#"{"ops": [{"op": "get", "key": "aa"}, {"op": "get", "key": "zz"}, {}]}"#), 400);
        assert_eq!(
            status(r#"{"ops": [{"op": "get", "key": "aa"}, {"op": "get", "key": "zz"}, {"op": "get", "key": "bb"}]}"#),
            413
        );
        assert_eq!(decode_batch(br#"{"ops": [{"op": "get", "key": "zz"}]}"#, 2, 4).unwrap().len(), 1);
    }

    #[test]
    fn unknown_fields_and_ops_are_refused() {
        assert!(serde_json::from_str::<BatchRequest>(r#"{"ops": [{"op": "scan", "key": "aa"}]}"#).is_err());
        assert!(serde_json::from_str::<BatchRequest>(r#"{"ops": [{"op": "get", "key": "aa", "x": 1}]}"#).is_err());
        assert!(serde_json::from_str::<BatchRequest>(r#"{"ops": [], "extra": true}"#).is_err());
    }
}
