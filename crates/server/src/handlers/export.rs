//! `GET /export?partition=P`: every record of one partition, from one consistent snapshot, as a
//! `bin` stream (docs/import-export.md, "bin") sent as it is read: what `shardlite export --url`
//! reads. The answer carries the partition count in `Shardlite-Partitions`; a stream that
//! ends without its end marker failed part way (the status was sent before the first record).
//! The answer starts with the stream's first chunk, once the snapshot is taken: a cluster node
//! then knows whether a move emptied the partition before it (docs/cluster.md, "Reads racing
//! the flip").

use hyper::{
    header::{HeaderName, HeaderValue},
    StatusCode,
};

use crate::http::{
    error::ApiError,
    response::{self, Response, OCTET_STREAM},
    state::State,
};

/// The header carrying the storage's partition count.
pub const PARTITIONS: HeaderName = HeaderName::from_static("shardlite-partitions");

/// Serves one `/export` request.
pub async fn handle(state: &State, query: Option<&str>) -> Result<Response, ApiError> {
    let partition = parse(query.unwrap_or_default())?;
    let mut export = state.backend.export(partition).await?;
    // Read from within the snapshot (or after it ended): the snapshot was taken before.
    let first = export.chunks.recv().await;
    let mut resp = response::streamed(OCTET_STREAM, first, export.chunks);
    resp.headers_mut().insert(PARTITIONS, HeaderValue::from(export.partitions));
    Ok(resp)
}

/// The partition a query names.
fn parse(query: &str) -> Result<u32, ApiError> {
    let bad = |message: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_query", message);
    let mut partition = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=').unwrap_or((pair, "")) {
            ("partition", value) => {
                let number = value
                    .parse::<u32>()
                    .map_err(|_| bad(format!("`partition` must be a partition number, not `{value}`")))?;
                partition = Some(number);
            }
            (name, _) => return Err(bad(format!("unknown parameter `{name}`: /export takes partition"))),
        }
    }
    partition.ok_or_else(|| bad("`partition` is required".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_names_one_partition() {
        assert_eq!(parse("partition=7").unwrap(), 7);
        for (query, message) in [
            ("", "`partition` is required"),
            ("partition=-1", "`partition` must be a partition number, not `-1`"),
            ("partition=1&after=2", "unknown parameter `after`: /export takes partition"),
        ] {
            let err = parse(query).unwrap_err();
            assert_eq!((err.status.as_u16(), err.code, err.message.as_str()), (400, "bad_query", message), "{query}");
        }
    }
}
