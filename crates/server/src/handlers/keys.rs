//! `GET /keys?partition=P&after=CURSOR&limit=N`: one page of a partition's keys with their
//! entity tags, in a stable order (the engine's record ids, which never change), so a client
//! lists every key by walking the partitions page by page (docs/http-api.md, "GET /keys").

use hyper::StatusCode;
use serde::Serialize;

use crate::http::{
    error::ApiError,
    response::{self, etag_text, Response},
    state::State,
};

/// Keys a page holds unless `limit` says otherwise.
const DEFAULT_LIMIT: usize = 1000;
/// The most keys a page may hold: bounds the work and the memory of one request.
pub const MAX_LIMIT: usize = 10_000;

/// What a page asks for.
#[derive(Debug, PartialEq, Eq)]
struct Query {
    partition: u32,
    after: u64,
    limit: usize,
}

/// A page as JSON.
#[derive(Serialize)]
struct Page {
    partition: u32,
    partitions: u32,
    keys: Vec<Key>,
    /// The `after` of the next page, as text (opaque to clients); `null` at the partition's end.
    next: Option<String>,
}

#[derive(Serialize)]
struct Key {
    key: String,
    etag: String,
}

/// Serves one `/keys` request.
pub async fn handle(state: &State, query: Option<&str>) -> Result<Response, ApiError> {
    let Query { partition, after, limit } = parse(query.unwrap_or_default())?;
    let page = state.backend.keys(partition, after, limit).await?;
    let keys =
        page.keys.into_iter().map(|(key, version)| Key { key: hex::encode(key), etag: etag_text(version) }).collect();
    let page = Page { partition, partitions: page.partitions, keys, next: page.next.map(|n| n.to_string()) };
    let body = serde_json::to_vec(&page)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(response::json(StatusCode::OK, body))
}

fn parse(query: &str) -> Result<Query, ApiError> {
    let bad = |message: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_query", message);
    let number = |name: &str, value: &str| {
        value.parse::<u64>().map_err(|_| bad(format!("`{name}` must be a whole number, not `{value}`")))
    };
    let (mut partition, mut after, mut limit) = (None, 0, DEFAULT_LIMIT);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "partition" => partition = Some(number(name, value)?),
            "after" => after = number(name, value)?,
            "limit" => limit = number(name, value)? as usize,
            _ => return Err(bad(format!("unknown parameter `{name}`: /keys takes partition, after and limit"))),
        }
    }
    let partition = partition.ok_or_else(|| bad("`partition` is required".to_owned()))?;
    let partition = u32::try_from(partition).map_err(|_| bad(format!("partition {partition} does not exist")))?;
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(bad(format!("`limit` must be 1..={MAX_LIMIT}, not {limit}")));
    }
    Ok(Query { partition, after, limit })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_with_defaults_and_bounds() {
        assert_eq!(parse("partition=3").unwrap(), Query { partition: 3, after: 0, limit: DEFAULT_LIMIT });
        assert_eq!(parse("limit=5&after=77&partition=0").unwrap(), Query { partition: 0, after: 77, limit: 5 });
        for (query, message) in [
            ("", "`partition` is required"),
            ("partition=x", "`partition` must be a whole number, not `x`"),
            ("partition=1&limit=0", "`limit` must be 1..=10000, not 0"),
            ("partition=1&limit=10001", "`limit` must be 1..=10000, not 10001"),
            ("partition=1&cursor=2", "unknown parameter `cursor`: /keys takes partition, after and limit"),
        ] {
            let err = parse(query).unwrap_err();
            assert_eq!((err.status.as_u16(), err.code, err.message.as_str()), (400, "bad_query", message), "{query}");
        }
    }
}
