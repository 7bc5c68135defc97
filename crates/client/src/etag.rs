//! What reads and writes answer: [`ETag`] (a record state's opaque entity tag), [`Record`] (a
//! value with its tag), [`Written`] (a write's new tag), and [`Condition`] (what a write
//! requires of the record: `If-Match` / `If-None-Match`).

use bytes::Bytes;
use hyper::header::HeaderValue;

/// The entity tag of one state of a record, as the server's `ETag` header gives it (quotes
/// included: `"1795417623.4.7"`). Opaque: send it back as it came, never parse it; two tags
/// are the same state exactly when they are equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ETag(HeaderValue);

impl ETag {
    /// A tag from its text (as an `ETag` header or a batch result's `etag` gives it): visible
    /// ASCII (the server's tags are), else [`InvalidETag`].
    pub fn new(tag: &str) -> Result<Self, InvalidETag> {
        // `HeaderValue::from_str` also takes bytes 0x80..=0xFF (obs-text), which `to_str` then
        // refuses: such a tag would read as "" in `as_str`, `Display` and a batch's `if_match`.
        HeaderValue::from_str(tag)
            .ok()
            .filter(|value| value.to_str().is_ok())
            .map(Self)
            .ok_or_else(|| InvalidETag(tag.to_owned()))
    }

    /// The tag as the server wrote it.
    pub fn as_str(&self) -> &str {
        // Built only from text that `to_str` takes: `new` and `from_header` both check it.
        self.0.to_str().unwrap_or_default()
    }

    /// The tag of a response's `ETag` header, if it is text.
    pub(crate) fn from_header(value: &HeaderValue) -> Option<Self> {
        value.to_str().ok().map(|_| Self(value.clone()))
    }

    /// The tag as a header value.
    pub(crate) fn header(&self) -> &HeaderValue {
        &self.0
    }
}

impl std::fmt::Display for ETag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A text that cannot be an entity tag (it is not a header value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an entity tag")]
pub struct InvalidETag(pub String);

/// A record as read: its value and the tag of this state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The value's bytes.
    pub value: Bytes,
    /// The tag of this state, for a conditional write.
    pub etag: ETag,
}

/// What a successful write answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The tag of the record's new state.
    pub etag: ETag,
    /// Whether the key was absent before (201 Created) rather than updated (200).
    pub created: bool,
}

/// What a write requires of the record's current state, checked by the server inside the
/// write's transaction (so a conditional write is atomic).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Condition {
    /// None: an upsert (PUT) or a plain delete.
    #[default]
    Always,
    /// `If-Match: "<tag>"`: the record is in exactly this state (compare-and-set).
    Matches(ETag),
    /// `If-Match: *`: the record exists.
    Exists,
    /// `If-None-Match: *`: the record does not exist (puts only: insert, never overwrite).
    Absent,
}

impl Condition {
    /// The request header the condition travels in, if any.
    pub(crate) fn header(&self) -> Option<(hyper::header::HeaderName, HeaderValue)> {
        use hyper::header::{IF_MATCH, IF_NONE_MATCH};
        let any = || HeaderValue::from_static("*");
        match self {
            Self::Always => None,
            Self::Matches(tag) => Some((IF_MATCH, tag.header().clone())),
            Self::Exists => Some((IF_MATCH, any())),
            Self::Absent => Some((IF_NONE_MATCH, any())),
        }
    }

    /// Whether a write under this condition, sent twice, leaves what sending it once leaves
    /// (only an unconditional put or delete: a repeated conditional write finds its own
    /// effect and fails).
    pub(crate) fn is_always(&self) -> bool {
        *self == Self::Always
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_kept_as_they_came() {
        let tag = ETag::new("\"1795417623.4.7\"").unwrap();
        assert_eq!(tag.as_str(), "\"1795417623.4.7\"");
        assert_eq!(tag.to_string(), "\"1795417623.4.7\"");
        assert!(ETag::new("bad\ntag").is_err());
        // Text a header value may hold but `to_str` refuses is refused here, never kept as a
        // tag whose text reads as "" (and so would go out as an empty `if_match` in a batch).
        assert_eq!(ETag::new("\"caf\u{e9}\""), Err(InvalidETag("\"caf\u{e9}\"".to_owned())));
        let (name, value) = Condition::Matches(tag).header().unwrap();
        assert_eq!((name.as_str(), value.to_str().unwrap()), ("if-match", "\"1795417623.4.7\""));
        assert_eq!(Condition::Absent.header().unwrap().0.as_str(), "if-none-match");
        assert!(Condition::Always.header().is_none());
    }
}
