//! The operations a history holds: what a client asked of one key ([`Input`]), what the server
//! answered ([`Output`]) and when ([`Operation`]), printed with keys, values and tags as (lossy)
//! UTF-8 text.

use std::fmt;

/// What a client asked of a key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Input {
    /// Write this value.
    Put(Vec<u8>),
    /// Read the value and its tag.
    Get,
    /// Remove the key.
    Delete,
}

/// What the server answered; each [`Input`] has its own kind of output.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Output {
    /// The answer to [`Input::Put`]: the key's new tag (its ETag), different from the one it
    /// replaced.
    Put {
        /// The tag the write gave the key.
        tag: String,
    },
    /// The answer to [`Input::Get`]: the value and its tag, or `None` when the key was absent.
    Got(Option<(Vec<u8>, String)>),
    /// The answer to [`Input::Delete`].
    Deleted {
        /// Whether the key was present before the delete.
        existed: bool,
    },
}

/// One client's operation on one key, with the times it was called and answered.
///
/// Times are nanoseconds from any origin shared by the whole history.
#[derive(Clone, PartialEq, Eq)]
pub struct Operation {
    /// Who called it; the checker does not need it, reports show it.
    pub client: u64,
    /// The key it was on.
    pub key: Vec<u8>,
    /// What was asked.
    pub input: Input,
    /// When it was called.
    pub call: u64,
    /// When it returned and what it answered; `None` when the outcome is unknown (an error or a
    /// timeout), so that it may or may not have taken effect.
    pub ret: Option<(u64, Output)>,
}

/// Bytes shown as text, invalid UTF-8 replaced.
pub(crate) struct Text<'a>(pub(crate) &'a [u8]);

impl fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.0))
    }
}

/// A time of a history in milliseconds, to the nanosecond.
struct Millis(u64);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}ms", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

impl fmt::Debug for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Input::Put(value) => f.debug_tuple("Put").field(&Text(value)).finish(),
            Input::Get => f.write_str("Get"),
            Input::Delete => f.write_str("Delete"),
        }
    }
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Input::Put(value) => write!(f, "put {:?}", Text(value)),
            Input::Get => f.write_str("get"),
            Input::Delete => f.write_str("delete"),
        }
    }
}

impl fmt::Debug for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::Put { tag } => f.debug_struct("Put").field("tag", tag).finish(),
            Output::Got(None) => f.write_str("Got(None)"),
            Output::Got(Some((value, tag))) => write!(f, "Got(Some(({:?}, {tag:?})))", Text(value)),
            Output::Deleted { existed } => f.debug_struct("Deleted").field("existed", existed).finish(),
        }
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::Put { tag } => write!(f, "tag {tag:?}"),
            Output::Got(None) => f.write_str("absent"),
            Output::Got(Some((value, tag))) => write!(f, "{:?} tag {tag:?}", Text(value)),
            Output::Deleted { existed: true } => f.write_str("existed"),
            Output::Deleted { existed: false } => f.write_str("did not exist"),
        }
    }
}

impl fmt::Debug for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Operation")
            .field("client", &self.client)
            .field("key", &Text(&self.key))
            .field("input", &self.input)
            .field("call", &self.call)
            .field("ret", &self.ret)
            .finish()
    }
}

/// One line: `client 3 key "k" [1.000000ms, 2.500000ms] put "v" -> tag "t1"`, with `?` for the
/// return time and `unknown` for the output of an operation whose outcome is unknown.
impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client {} key {:?} [{}, ", self.client, Text(&self.key), Millis(self.call))?;
        match &self.ret {
            Some((time, output)) => write!(f, "{}] {} -> {output}", Millis(*time), self.input),
            None => write!(f, "?] {} -> unknown", self.input),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shows_values_as_text_and_unknown_returns() {
        let put = Operation {
            client: 3,
            key: b"k".to_vec(),
            input: Input::Put(b"v\xff".to_vec()),
            call: 1_000_000,
            ret: Some((2_500_000, Output::Put { tag: "t1".into() })),
        };
        assert_eq!(put.to_string(), "client 3 key \"k\" [1.000000ms, 2.500000ms] put \"v\u{fffd}\" -> tag \"t1\"");
        let get = Operation { client: 4, key: b"k".to_vec(), input: Input::Get, call: 7, ret: None };
        assert_eq!(get.to_string(), "client 4 key \"k\" [0.000007ms, ?] get -> unknown");
    }

    #[test]
    fn debug_shows_values_as_text() {
        let got = Output::Got(Some((b"v".to_vec(), "t".into())));
        assert_eq!(format!("{got:?}"), "Got(Some((\"v\", \"t\")))");
        assert_eq!(format!("{:?}", Input::Put(b"x".to_vec())), "Put(\"x\")");
    }
}
