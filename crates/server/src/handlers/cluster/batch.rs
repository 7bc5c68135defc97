//! `POST /batch` on a cluster node: the operations are split by the owner of their key's
//! partition; this node's run here (`crate::handlers::batch`), each other owner's are sent to it
//! as one batch of their own (all parts at once), and the answers are put back in the request's
//! order. An owner's results come back as it gave them; an owner that cannot be reached, or
//! refuses its part as a whole, gives each of its operations that answer. A batch that was
//! forwarded already, or any batch on a node with `--redirect`, gets 421 for each operation this
//! node does not own: never a second hop.
//!
//! The whole request is checked (JSON, operation count, each item) before it is split, so a
//! batch is refused or accepted the same on every node. As on one node, operations of different
//! partitions are not one transaction; each owner commits its part as one node would. While
//! this node does not hold its lease, each of its own operations gets 503 `fenced`.

use std::collections::BTreeMap;

use bytes::Bytes;
use hyper::{body::Incoming, http::request::Parts, Request, StatusCode};
use serde::Deserialize;
use shardlite_engine::Op;

use crate::{
    cluster::{Cluster, Owner},
    handlers::batch::{self, error_result, run_here, Answer, Batch},
    http::{
        error::ApiError,
        forward::{Forwarder, FORWARDED_BY},
        response::Response,
        state::State,
    },
};

/// The request's operations as sent, to pass each on unchanged.
#[derive(Deserialize)]
struct RawBatch {
    ops: Vec<serde_json::Value>,
}

/// An owner's answer to its part.
#[derive(Deserialize)]
struct RawResults {
    results: Vec<serde_json::Value>,
}

/// One owner's part: the owner and the positions of its operations in the request.
type Part = (Owner, Vec<usize>);

/// A part on its way: resolves to the positions of its operations and their answers.
type Sent = tokio::task::JoinHandle<(Vec<usize>, Vec<Answer>)>;

/// Serves `POST /batch` on a node of `cluster`.
pub async fn handle(state: &State, cluster: &Cluster, req: Request<Incoming>) -> Result<Response, ApiError> {
    let Batch { head, bytes, items } = batch::read(state, req).await?;
    batch::answer(run(state, cluster, &head, &bytes, items).await?)
}

/// Runs the decoded batch `items` (sent as `bytes`, with the request head `head`) across the
/// cluster: one answer per item, in order.
async fn run(
    state: &State,
    cluster: &Cluster,
    head: &Parts,
    bytes: &[u8],
    items: Vec<Result<Op, ApiError>>,
) -> Result<Vec<Answer>, ApiError> {
    // Split after any move of its partitions is over, so that a moved partition's operations
    // go to its new owner.
    let hasher = cluster.view().map.hasher();
    let _held = cluster.moves().hold(items.iter().flatten().map(|op| hasher.locate(op.key()).partition)).await;
    let refuse = cluster.redirects() || head.headers.contains_key(FORWARDED_BY);
    let leased = cluster.lease().held();
    let mut answers: Vec<Option<Answer>> = (0..items.len()).map(|_| None).collect();
    let (mut here, mut here_slots, mut parts) = (Vec::new(), Vec::new(), BTreeMap::<String, Part>::new());
    for (i, item) in items.into_iter().enumerate() {
        let owner = item.as_ref().ok().and_then(|op| cluster.elsewhere(hasher.locate(op.key()).partition));
        match (owner, &item) {
            (None, Ok(op)) if !leased => {
                let partition = hasher.locate(op.key()).partition;
                answers[i] = Some(Answer::Here(error_result(ApiError::fenced(cluster.node(), partition))));
            }
            (None, _) => {
                here.push(item);
                here_slots.push(i);
            }
            (Some(owner), _) if refuse => {
                answers[i] = Some(Answer::Here(error_result(ApiError::misdirected(owner, cluster.node()))));
            }
            (Some(owner), _) => parts.entry(owner.node.clone()).or_insert_with(|| (owner, Vec::new())).1.push(i),
        }
    }
    let sent = send_parts(&state.forwarder, cluster, head, bytes, parts)?;
    for (slot, result) in here_slots.into_iter().zip(run_here(state, here).await?) {
        answers[slot] = Some(Answer::Here(result));
    }
    for task in sent {
        let (slots, results) = task.await.map_err(|e| internal(format!("a batch part failed: {e}")))?;
        for (slot, answer) in slots.into_iter().zip(results) {
            answers[slot] = Some(answer);
        }
    }
    answers.into_iter().map(|a| a.ok_or_else(|| internal("an operation got no answer".into()))).collect()
}

/// A task per owner sending it its operations; each resolves to the positions and their answers.
fn send_parts(
    forwarder: &Forwarder,
    cluster: &Cluster,
    head: &Parts,
    bytes: &[u8],
    parts: BTreeMap<String, Part>,
) -> Result<Vec<Sent>, ApiError> {
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    // Decoded already, so this parse cannot fail on a body that got here.
    let raw: RawBatch = serde_json::from_slice(bytes).map_err(|e| internal(e.to_string()))?;
    let mut tasks = Vec::with_capacity(parts.len());
    for (owner, slots) in parts.into_values() {
        let ops: Vec<&serde_json::Value> = slots.iter().map(|&i| &raw.ops[i]).collect();
        let body =
            Bytes::from(serde_json::to_vec(&serde_json::json!({ "ops": ops })).map_err(|e| internal(e.to_string()))?);
        let (forwarder, node, head) = (forwarder.clone(), cluster.node().to_owned(), head.clone());
        tasks.push(tokio::spawn(async move {
            let answered = forwarder.exchange(&owner, &node, &head, body).await;
            let answers = part_answers(answered, slots.len());
            (slots, answers)
        }));
    }
    Ok(tasks)
}

/// The answers of a part of `count` operations: the owner's results, or its refusal (or the
/// reason it could not be asked) for each.
fn part_answers(answered: Result<(StatusCode, Bytes), ApiError>, count: usize) -> Vec<Answer> {
    let refusal = match answered {
        Ok((StatusCode::OK, body)) => match serde_json::from_slice::<RawResults>(&body) {
            Ok(raw) if raw.results.len() == count => return raw.results.into_iter().map(Answer::Relayed).collect(),
            _ => internal(format!("the owner's answer to a batch part is not {count} results")),
        },
        Ok((status, body)) => owner_refusal(status, &body),
        Err(err) => err,
    };
    (0..count).map(|_| Answer::Here(error_result(refusal.clone()))).collect()
}

/// The error an owner answered a whole part with: its status and message, and the code of
/// the refusals a whole batch can get from a healthy owner (else `internal`).
fn owner_refusal(status: StatusCode, body: &[u8]) -> ApiError {
    #[derive(Deserialize)]
    struct Refusal {
        message: String,
    }
    let message = serde_json::from_slice::<Refusal>(body)
        .map_or_else(|_| format!("the owner answered a batch part with {status}"), |r| r.message);
    let code = match status {
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        _ => "internal",
    };
    ApiError::new(status, code, message)
}

fn internal(message: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
}
