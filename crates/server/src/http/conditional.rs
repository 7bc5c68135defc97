//! Conditional requests: `If-Match` and `If-None-Match` against the record's entity tag, the
//! quoted text of its [`Version`] (opaque to clients). Writes turn them into an engine
//! [`Condition`], evaluated inside the writer's transaction, so compare-and-set is atomic;
//! reads evaluate them after the lookup (RFC 9110 §13.2.2: `If-Match` first, then
//! `If-None-Match`, which answers 304 on a match). `POST /batch` takes the same tags.
//!
//! A well-formed tag this server never issued is not an error: it matches nothing. `If-Match`
//! uses the strong comparison, so a weak tag there never matches; `If-None-Match` the weak one.

use hyper::{
    header::{HeaderName, IF_MATCH, IF_NONE_MATCH},
    HeaderMap, StatusCode,
};
use shardlite_engine::{Condition, Version};

use super::error::ApiError;

/// The entity tags a conditional header (or a batch condition) lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tags {
    /// `*`: any current record.
    Any,
    /// One or more entity tags.
    List(Vec<Tag>),
}

/// One entity tag as a client sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// `W/"..."`.
    weak: bool,
    /// The version it names, if it names one this server could have issued.
    version: Option<Version>,
}

impl Tag {
    /// RFC 9110 §8.8.3.2: strong comparison (both strong, same text).
    fn strong_match(&self, current: Version) -> bool {
        !self.weak && self.version == Some(current)
    }

    /// Weak comparison: the same text, whether weak or not.
    fn weak_match(&self, current: Version) -> bool {
        self.version == Some(current)
    }
}

/// The precondition of a `PUT`: none (upsert), `If-None-Match: *` (insert only), or
/// `If-Match: *` / `If-Match: "<tag>"` (update only, compare-and-set). Both at once can never
/// hold (RFC 9110 §13.2.2: `If-Match` needs the record, `If-None-Match: *` its absence): a
/// condition that matches nothing, so 412 with the current tag, as for a tag never issued.
pub fn for_put(headers: &HeaderMap) -> Result<Condition, ApiError> {
    let if_match = header_tags(headers, &IF_MATCH)?;
    let if_none_match = header_tags(headers, &IF_NONE_MATCH)?;
    if let Some(Tags::List(_)) = if_none_match {
        return Err(ApiError::bad_header("on PUT, If-None-Match supports only `*` (insert only)"));
    }
    let if_match = if_match.map(write_condition).transpose().map_err(ApiError::bad_header)?;
    Ok(match (if_match, if_none_match) {
        (None, None) => Condition::None,
        (None, Some(_)) => Condition::Absent,
        (Some(condition), None) => condition,
        (Some(_), Some(_)) => Condition::UnknownVersion,
    })
}

/// The precondition of a `DELETE`: none, or `If-Match`.
pub fn for_delete(headers: &HeaderMap) -> Result<Condition, ApiError> {
    if headers.contains_key(IF_NONE_MATCH) {
        return Err(ApiError::bad_header("DELETE takes If-Match, not If-None-Match"));
    }
    match header_tags(headers, &IF_MATCH)? {
        None => Ok(Condition::None),
        Some(tags) => write_condition(tags).map_err(ApiError::bad_header),
    }
}

/// The engine condition of a write's `If-Match` (header or batch field): `*` is "present";
/// one tag is compare-and-set on the version it names, or, naming none of ours (or weak),
/// a condition that cannot hold.
pub fn write_condition(tags: Tags) -> Result<Condition, String> {
    match tags {
        Tags::Any => Ok(Condition::Present),
        Tags::List(list) => match &list[..] {
            [Tag { weak: false, version: Some(version) }] => Ok(Condition::Version(*version)),
            [_] => Ok(Condition::UnknownVersion),
            _ => Err("If-Match on a write takes one entity tag (or `*`)".to_owned()),
        },
    }
}

/// What the conditional headers of a GET or HEAD say once the record's version is known:
/// `Ok(None)` to answer normally, `Ok(Some(status))` to answer 304 or 412 instead.
pub fn for_read(headers: &HeaderMap, current: Option<Version>) -> Result<Option<StatusCode>, ApiError> {
    // Both are parsed before either is evaluated: a malformed header is 400 whatever the other says.
    let (if_match, if_none_match) = (header_tags(headers, &IF_MATCH)?, header_tags(headers, &IF_NONE_MATCH)?);
    if let Some(tags) = if_match {
        let holds = match (&tags, current) {
            (Tags::Any, Some(_)) => true,
            (Tags::List(list), Some(current)) => list.iter().any(|t| t.strong_match(current)),
            (_, None) => false,
        };
        if !holds {
            return Ok(Some(StatusCode::PRECONDITION_FAILED));
        }
    }
    if let Some(tags) = if_none_match {
        let matched = match (&tags, current) {
            (Tags::Any, Some(_)) => true,
            (Tags::List(list), Some(current)) => list.iter().any(|t| t.weak_match(current)),
            (_, None) => false,
        };
        if matched {
            return Ok(Some(StatusCode::NOT_MODIFIED));
        }
    }
    Ok(None)
}

/// Parses every `name` header into one list (`None`: no such header).
fn header_tags(headers: &HeaderMap, name: &HeaderName) -> Result<Option<Tags>, ApiError> {
    let mut values = headers.get_all(name).iter().peekable();
    if values.peek().is_none() {
        return Ok(None);
    }
    let mut all = Vec::new();
    for value in values {
        match parse_tags(value.as_bytes()).map_err(|why| ApiError::bad_header(format!("{name}: {why}")))? {
            Tags::Any => return Ok(Some(Tags::Any)),
            Tags::List(list) => all.extend(list),
        }
    }
    Ok(Some(Tags::List(all)))
}

/// Parses `*` or a comma-separated list of entity tags (RFC 9110 §8.8.3, §13.1.1):
/// `[W/]"<etagc>*"`, where etagc is any byte but controls, space, `"` and DEL. A list may hold
/// empty elements and whitespace around them. The error says what is wrong, for people.
pub fn parse_tags(value: &[u8]) -> Result<Tags, String> {
    let trimmed = value.trim_ascii();
    if trimmed == b"*" {
        return Ok(Tags::Any);
    }
    let mut list = Vec::new();
    let mut rest = trimmed;
    loop {
        rest = rest.trim_ascii_start();
        while let Some(after) = rest.strip_prefix(b",") {
            rest = after.trim_ascii_start();
        }
        if rest.is_empty() {
            break;
        }
        let (weak, quoted) = match rest.strip_prefix(b"W/") {
            Some(after) => (true, after),
            None => (false, rest),
        };
        let Some(open) = quoted.strip_prefix(b"\"") else { return Err(not_a_tag(rest)) };
        let Some(close) = open.iter().position(|&b| b == b'"') else { return Err(not_a_tag(rest)) };
        let (opaque, after) = (&open[..close], &open[close + 1..]);
        if !opaque.iter().all(|&b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80) {
            return Err(not_a_tag(rest));
        }
        let version = std::str::from_utf8(opaque).ok().and_then(|text| text.parse::<Version>().ok());
        list.push(Tag { weak, version });
        rest = after.trim_ascii_start();
        match rest.first() {
            None | Some(b',') => {}
            Some(_) => return Err(not_a_tag(rest)),
        }
    }
    if list.is_empty() {
        return Err("no entity tag given".to_owned());
    }
    Ok(Tags::List(list))
}

fn not_a_tag(at: &[u8]) -> String {
    format!(
        "`{}` is not `*` or a list of entity tags (a tag is quoted, as the ETag header gives it: \"...\")",
        String::from_utf8_lossy(at)
    )
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    const V: Version = Version { epoch: 17, id: 5, counter: 2 };

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
        assert_eq!(for_put(&headers(&[(IF_MATCH, "\"17.5.2\"")])), Ok(Condition::Version(V)));
        // Well-formed, but not a version of ours (or weak): matches nothing, not a bad request.
        for foreign in ["\"42\"", "\"x\"", "\"\"", "W/\"17.5.2\"", "\"017.5.2\"", "\"99999999999999999999.1.1\""] {
            assert_eq!(for_put(&headers(&[(IF_MATCH, foreign)])), Ok(Condition::UnknownVersion), "{foreign}");
        }
        for bad in ["42", "17.5.2", "\"1", "\"a\"b", "\"1\", \"2\"", "w/\"1\"", "\"a b\""] {
            let err = for_put(&headers(&[(IF_MATCH, bad)])).unwrap_err();
            assert_eq!((err.status, err.code), (StatusCode::BAD_REQUEST, "bad_header"), "{bad}");
        }
        // Both can never hold together: a condition that matches nothing (412), not a bad request.
        for if_match in ["*", "\"17.5.2\""] {
            let both = headers(&[(IF_MATCH, if_match), (IF_NONE_MATCH, "*")]);
            assert_eq!(for_put(&both), Ok(Condition::UnknownVersion), "{if_match}");
        }
        assert!(for_put(&headers(&[(IF_MATCH, "x"), (IF_NONE_MATCH, "*")])).is_err());
        assert!(for_put(&headers(&[(IF_MATCH, "*"), (IF_NONE_MATCH, "\"1\"")])).is_err());
        assert!(for_put(&headers(&[(IF_NONE_MATCH, "\"1\"")])).is_err());
    }

    #[test]
    fn delete_takes_only_if_match() {
        assert_eq!(for_delete(&headers(&[(IF_MATCH, "\"17.5.2\"")])), Ok(Condition::Version(V)));
        assert!(for_delete(&headers(&[(IF_NONE_MATCH, "*")])).is_err());
    }

    #[test]
    fn reads_answer_304_and_412() {
        let h = headers(&[(IF_NONE_MATCH, "\"1\", W/\"17.5.2\"")]);
        assert_eq!(for_read(&h, Some(V)), Ok(Some(StatusCode::NOT_MODIFIED)), "weak comparison");
        assert_eq!(for_read(&h, Some(Version { counter: 3, ..V })), Ok(None));
        assert_eq!(for_read(&h, None), Ok(None));
        let h = headers(&[(IF_MATCH, "\"17.5.2\"")]);
        assert_eq!(for_read(&h, Some(V)), Ok(None));
        assert_eq!(for_read(&h, Some(Version { epoch: 18, ..V })), Ok(Some(StatusCode::PRECONDITION_FAILED)));
        assert_eq!(for_read(&h, None), Ok(Some(StatusCode::PRECONDITION_FAILED)));
        let h = headers(&[(IF_MATCH, "W/\"17.5.2\"")]);
        assert_eq!(for_read(&h, Some(V)), Ok(Some(StatusCode::PRECONDITION_FAILED)), "strong comparison");
        let h = headers(&[(IF_MATCH, "\"0.0.1\", \"17.5.2\""), (IF_MATCH, "\"x\"")]);
        assert_eq!(for_read(&h, Some(V)), Ok(None), "any tag of the list, over several headers");
    }

    #[test]
    fn tag_lists_parse_like_the_grammar_says() {
        let tags = parse_tags(b" , \"a,b\" ,W/\"17.5.2\",, \"\" ").unwrap();
        let Tags::List(list) = tags else { panic!("a list") };
        assert_eq!(list.len(), 3, "a comma inside quotes is part of the tag");
        assert_eq!(list[1], Tag { weak: true, version: Some(V) });
        assert_eq!(parse_tags(b"\"\xff\""), Ok(Tags::List(vec![Tag { weak: false, version: None }])));
        assert!(parse_tags(b"").is_err() && parse_tags(b" , ").is_err());
        assert!(parse_tags(b"\"a\" \"b\"").is_err(), "tags are separated by commas");
    }
}
