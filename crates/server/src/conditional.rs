//! Conditional requests: `If-Match` and `If-None-Match` against the record's counter (its
//! `ETag`). Writes turn them into an engine [`Condition`], evaluated inside the writer's
//! transaction, so compare-and-set is atomic; reads evaluate them after the lookup (RFC 9110
//! §13.2.2: `If-Match` first, then `If-None-Match`, which answers 304 on a match).

use hyper::{
    header::{HeaderName, IF_MATCH, IF_NONE_MATCH},
    HeaderMap, StatusCode,
};
use shardlite_engine::Condition;

use crate::error::ApiError;

/// The entity tags a conditional header lists.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tags {
    /// `*`: any current record.
    Any,
    /// `"<counter>"`, ...
    Counters(Vec<u64>),
}

impl Tags {
    fn matches(&self, counter: u64) -> bool {
        match self {
            Tags::Any => true,
            Tags::Counters(list) => list.contains(&counter),
        }
    }
}

/// The precondition of a `PUT`: none (upsert), `If-None-Match: *` (insert only), or
/// `If-Match: *` / `If-Match: "<counter>"` (update only, compare-and-set).
pub fn for_put(headers: &HeaderMap) -> Result<Condition, ApiError> {
    let if_match = tags(headers, &IF_MATCH, false)?;
    let if_none_match = tags(headers, &IF_NONE_MATCH, false)?;
    match (if_match, if_none_match) {
        (None, None) => Ok(Condition::None),
        (Some(_), Some(_)) => Err(ApiError::bad_header("send If-Match or If-None-Match, not both")),
        (None, Some(Tags::Any)) => Ok(Condition::Absent),
        (None, Some(Tags::Counters(_))) => {
            Err(ApiError::bad_header("on PUT, If-None-Match supports only `*` (insert only)"))
        }
        (Some(tags), None) => match_condition(tags),
    }
}

/// The precondition of a `DELETE`: none, or `If-Match`.
pub fn for_delete(headers: &HeaderMap) -> Result<Condition, ApiError> {
    if headers.contains_key(IF_NONE_MATCH) {
        return Err(ApiError::bad_header("DELETE takes If-Match, not If-None-Match"));
    }
    tags(headers, &IF_MATCH, false)?.map_or(Ok(Condition::None), match_condition)
}

fn match_condition(tags: Tags) -> Result<Condition, ApiError> {
    match tags {
        Tags::Any => Ok(Condition::Present),
        Tags::Counters(list) => match list[..] {
            [counter] => Ok(Condition::Counter(counter)),
            _ => Err(ApiError::bad_header("If-Match on a write takes one entity tag (or `*`)")),
        },
    }
}

/// What the conditional headers of a GET or HEAD say once the record's counter is known:
/// `Ok(None)` to answer normally, `Ok(Some(status))` to answer 304 or 412 instead.
pub fn for_read(headers: &HeaderMap, counter: Option<u64>) -> Result<Option<StatusCode>, ApiError> {
    if let Some(tags) = tags(headers, &IF_MATCH, false)? {
        if !counter.is_some_and(|c| tags.matches(c)) {
            return Ok(Some(StatusCode::PRECONDITION_FAILED));
        }
    }
    if let Some(tags) = tags(headers, &IF_NONE_MATCH, true)? {
        if counter.is_some_and(|c| tags.matches(c)) {
            return Ok(Some(StatusCode::NOT_MODIFIED));
        }
    }
    Ok(None)
}

/// Parses every `name` header into one list. Our tags are strong; `weak_ok` admits `W/`
/// tags, which compare equal to the strong one (If-None-Match uses the weak comparison).
fn tags(headers: &HeaderMap, name: &HeaderName, weak_ok: bool) -> Result<Option<Tags>, ApiError> {
    let mut values = headers.get_all(name).iter().peekable();
    if values.peek().is_none() {
        return Ok(None);
    }
    let mut counters = Vec::new();
    for value in values {
        let text = value.to_str().map_err(|_| ApiError::bad_header(format!("{name} is not visible ASCII")))?;
        for item in text.split(',').map(str::trim) {
            if item == "*" {
                return Ok(Some(Tags::Any));
            }
            let strong = match item.strip_prefix("W/") {
                Some(_) if !weak_ok => {
                    return Err(ApiError::bad_header(format!("{name}: a weak entity tag ({item}) never matches here")))
                }
                Some(rest) => rest,
                None => item,
            };
            let counter = strong
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|digits| digits.parse::<u64>().ok());
            match counter {
                Some(c) => counters.push(c),
                None => {
                    return Err(ApiError::bad_header(format!(
                        "{name}: `{item}` is not `*` or an entity tag of this server (`\"<counter>\"`)"
                    )))
                }
            }
        }
    }
    Ok(Some(Tags::Counters(counters)))
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    fn headers(pairs: &[(HeaderName, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn put_conditions_follow_the_spec() {
        assert_eq!(for_put(&headers(&[])), Ok(Condition::None));
        assert_eq!(for_put(&headers(&[(IF_NONE_MATCH, "*")])), Ok(Condition::Absent));
        assert_eq!(for_put(&headers(&[(IF_MATCH, "*")])), Ok(Condition::Present));
        assert_eq!(for_put(&headers(&[(IF_MATCH, "\"42\"")])), Ok(Condition::Counter(42)));
        for bad in ["42", "\"x\"", "\"\"", "\"+1\"", "W/\"1\"", "\"1\", \"2\"", "\"99999999999999999999\""] {
            let err = for_put(&headers(&[(IF_MATCH, bad)])).unwrap_err();
            assert_eq!((err.status, err.code), (StatusCode::BAD_REQUEST, "bad_header"), "{bad}");
        }
        assert!(for_put(&headers(&[(IF_MATCH, "*"), (IF_NONE_MATCH, "*")])).is_err());
        assert!(for_put(&headers(&[(IF_NONE_MATCH, "\"1\"")])).is_err());
    }

    #[test]
    fn delete_takes_only_if_match() {
        assert_eq!(for_delete(&headers(&[(IF_MATCH, "\"3\"")])), Ok(Condition::Counter(3)));
        assert!(for_delete(&headers(&[(IF_NONE_MATCH, "*")])).is_err());
    }

    #[test]
    fn reads_answer_304_and_412() {
        let h = headers(&[(IF_NONE_MATCH, "\"1\", W/\"2\"")]);
        assert_eq!(for_read(&h, Some(2)), Ok(Some(StatusCode::NOT_MODIFIED)));
        assert_eq!(for_read(&h, Some(3)), Ok(None));
        assert_eq!(for_read(&h, None), Ok(None));
        let h = headers(&[(IF_MATCH, "\"5\"")]);
        assert_eq!(for_read(&h, Some(5)), Ok(None));
        assert_eq!(for_read(&h, Some(6)), Ok(Some(StatusCode::PRECONDITION_FAILED)));
        assert_eq!(for_read(&h, None), Ok(Some(StatusCode::PRECONDITION_FAILED)));
    }
}
