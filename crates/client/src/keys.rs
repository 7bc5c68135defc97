//! `GET /keys` (docs/http-api.md, "GET /keys"): one page of a partition's keys, each with its
//! record's tag, and the cursor of the next page.

use serde::Deserialize;

use crate::{error::Error, etag::ETag};

/// One page of a partition's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPage {
    /// The partition listed.
    pub partition: u32,
    /// How many partitions the server has (list `0..partitions` to see every key).
    pub partitions: u32,
    /// The keys of the page with their records' tags, in the partition's record-id order.
    pub keys: Vec<(Vec<u8>, ETag)>,
    /// The cursor of the next page (the `after` to ask with), `None` at the partition's end.
    pub next: Option<String>,
}

#[derive(Deserialize)]
struct Page {
    partition: u32,
    partitions: u32,
    keys: Vec<Entry>,
    next: Option<String>,
}

#[derive(Deserialize)]
struct Entry {
    key: String,
    etag: String,
}

/// The path and query of a page.
pub(crate) fn path(partition: u32, after: Option<&str>, limit: u32) -> String {
    let mut path = format!("/keys?partition={partition}&limit={limit}");
    if let Some(after) = after {
        // The cursor is opaque text; today digits. Anything else is sent escaped.
        path.push_str("&after=");
        for b in after.bytes() {
            match b {
                b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'-' | b'.' | b'_' | b'~' => path.push(char::from(b)),
                _ => path.push_str(&format!("%{b:02X}")),
            }
        }
    }
    path
}

/// The page of a 200 answer.
pub(crate) fn decode(body: &[u8]) -> Result<KeyPage, Error> {
    let page: Page =
        serde_json::from_slice(body).map_err(|e| Error::Protocol(format!("a key page that is not its JSON: {e}")))?;
    let keys = page
        .keys
        .into_iter()
        .map(|entry| {
            let key =
                hex::decode(&entry.key).map_err(|e| Error::Protocol(format!("a listed key that is not hex: {e}")))?;
            Ok((key, ETag::new(&entry.etag)?))
        })
        .collect::<Result<_, Error>>()?;
    Ok(KeyPage { partition: page.partition, partitions: page.partitions, keys, next: page.next })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_asked_for_and_read() {
        assert_eq!(path(2, None, 10), "/keys?partition=2&limit=10");
        assert_eq!(path(0, Some("17"), 1), "/keys?partition=0&limit=1&after=17");
        assert_eq!(path(0, Some("a b"), 1), "/keys?partition=0&limit=1&after=a%20b");
        let page =
            decode(br#"{"partition":2,"partitions":4,"keys":[{"key":"6b32","etag":"\"1.1.4\""}],"next":"1"}"#).unwrap();
        assert_eq!((page.partition, page.partitions, page.next.as_deref()), (2, 4, Some("1")));
        assert_eq!(page.keys, vec![(b"k2".to_vec(), ETag::new("\"1.1.4\"").unwrap())]);
    }
}
