//! [`Error`]: every way a request can fail — the server's refusals ([`ServerError`], with the
//! stable [`ErrorCode`] of its JSON body `{"error": "<code>", "message": "..."}`), timeouts,
//! connections that fail, answers outside the contract — and what the client makes of each
//! (`Retry-After`, the current `ETag` of a 412).

use std::time::Duration;

use crate::etag::{ETag, InvalidETag};

/// Defines [`ErrorCode`] from one list: each variant and the code the server sends for it.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident = $code:literal,)*) => {
        /// The `error` field of the server's JSON error body (docs/http-api.md, "Errors"): stable,
        /// machine-readable. A code this client does not know yet is [`ErrorCode::Other`].
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $variant,)*
            /// A code this version of the client does not know (or no JSON body at all: empty).
            Other(String),
        }

        impl ErrorCode {
            /// Every code this client knows.
            #[cfg(test)]
            const KNOWN: &[&str] = &[$($code,)*];

            /// The code the server sent.
            pub fn parse(code: &str) -> Self {
                match code {
                    $($code => Self::$variant,)*
                    other => Self::Other(other.to_owned()),
                }
            }

            /// The code as the server writes it (`not_found`, ...).
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $code,)*
                    Self::Other(code) => code,
                }
            }
        }
    };
}

error_codes! {
    /// 400: the key is empty, of odd length or not lowercase hex.
    BadKey = "bad_key",
    /// 400: a malformed `If-Match` / `If-None-Match`.
    BadHeader = "bad_header",
    /// 400: the connection failed while the body was read.
    BadBody = "bad_body",
    /// 400: the batch is not JSON of the documented shape.
    BadBatch = "bad_batch",
    /// 400 (batch items): a value that is not lowercase hex.
    BadValue = "bad_value",
    /// 400 (batch items): a bad `if_match` / `if_none_match`.
    BadCondition = "bad_condition",
    /// 400: `/keys` or `/export`: a missing or malformed parameter.
    BadQuery = "bad_query",
    /// 400: an administration request that is not the documented JSON.
    BadRequest = "bad_request",
    /// 409: a backup is running, or its directory is not empty.
    Conflict = "conflict",
    /// 401: a missing or wrong bearer token.
    Unauthorized = "unauthorized",
    /// 403: a valid token that lacks the role the route needs.
    Forbidden = "forbidden",
    /// 404: no record has the key.
    NotFound = "not_found",
    /// 404: no route serves the path.
    UnknownRoute = "unknown_route",
    /// 405: the route does not serve the method.
    MethodNotAllowed = "method_not_allowed",
    /// 405: a data directory of index mode `none` serves only unconditional PUTs.
    Unsupported = "unsupported",
    /// 408: the body did not arrive in time.
    BodyTimeout = "body_timeout",
    /// 411: a PUT without `Content-Length`.
    LengthRequired = "length_required",
    /// 412: a condition did not hold (also `If-Match` on an absent key).
    PreconditionFailed = "precondition_failed",
    /// 413: a key over 1024 bytes.
    KeyTooLarge = "key_too_large",
    /// 413: a value over the server's `max_value`.
    ValueTooLarge = "value_too_large",
    /// 413: a batch body over `--batch-max-bytes`.
    BatchTooLarge = "batch_too_large",
    /// 413: more operations than `--batch-max-ops`.
    TooManyOps = "too_many_ops",
    /// 413: an administration request's body over its limit.
    BodyTooLarge = "body_too_large",
    /// 500: a partition refuses writes after a failed commit or fsync.
    Poisoned = "poisoned",
    /// 500: storage corruption.
    Corrupt = "corrupt",
    /// 500: an I/O error of the storage.
    IoError = "io_error",
    /// 500: SQLite failed.
    SqliteError = "sqlite_error",
    /// 500: a bug or an unexpected state of the server.
    Internal = "internal",
    /// 500: PostgreSQL refused or failed a statement (PostgreSQL backend).
    DatabaseError = "database_error",
    /// 501: the backend does not serve the route.
    NotImplemented = "not_implemented",
    /// 421: a cluster node does not own the key's partition; the body names the owner.
    Misdirected = "misdirected",
    /// 503: a write or lookup queue is full; nothing was done.
    Overloaded = "overloaded",
    /// 503: the store is shutting down; nothing was done.
    Closed = "closed",
    /// 503 (`/readyz`): the server is not ready.
    NotReady = "not_ready",
    /// 503: the storage is not available (still opening; PostgreSQL: no connection).
    Unavailable = "unavailable",
    /// 507: the disk is full; the write was rolled back.
    DiskFull = "disk_full",
    /// 507: a partition used all of its record ids.
    PartitionFull = "partition_full",
    /// 409 or 502 (`POST /admin/move`): moving a partition failed; the map is unchanged.
    MoveFailed = "move_failed",
    /// 409 (`/admin/move`, `/admin/adopt`): a partition move cannot start here.
    MoveRefused = "move_refused",
    /// 503: the cluster node owning the partition does not hold its lease in etcd; retry.
    Fenced = "fenced",
    /// 502 (`/admin/takeover`): restoring a dead node's partition from its replica failed.
    FailoverFailed = "failover_failed",
    /// 409 (`/admin/takeover`): the partition's owner is alive, or not the node named.
    FailoverRefused = "failover_refused",
    /// 503: with replicas, too few copies held the write in time; it was rolled back.
    Unreplicated = "unreplicated",
    /// 409 (`/admin/replicate`): a frame that does not follow what the copy holds.
    CopyBehind = "copy_behind",
    /// 413 (`/admin/replicate`): a replication frame over its limit.
    FrameTooLarge = "frame_too_large",
    /// 502 (`/admin/replicate`): the owner sent no snapshot for a copy to take in.
    CopyFailed = "copy_failed",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal from the server: the HTTP status and what its JSON body says. Also one failed
/// operation of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// The HTTP status (or a batch item's `status`).
    pub status: u16,
    /// The `error` code.
    pub code: ErrorCode,
    /// The `message`, for people.
    pub message: String,
    /// On a 412: the record's current tag (`None` if the key is absent), so that a
    /// compare-and-set can be retried against it.
    pub etag: Option<ETag>,
    /// The `Retry-After` the server asked for (on a 503).
    pub retry_after: Option<Duration>,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for ServerError {}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server answered with an error (any status the operation does not expect).
    #[error("the server refused: {0}")]
    Server(ServerError),
    /// No whole answer within the client's timeout. A write may or may not have been applied.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection could not be made, or broke before the answer was read.
    #[error("connection failed: {0}")]
    Transport(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The server's answer does not follow the API (a missing `ETag`, a body that is not the
    /// documented JSON, ...).
    #[error("the answer does not follow the API: {0}")]
    Protocol(String),
    /// [`Client::compare_and_set`](crate::Client::compare_and_set) found the record changed
    /// by others on each of its attempts.
    #[error("compare-and-set gave up after {attempts} attempts: the record kept changing")]
    Contention {
        /// Conditional writes tried.
        attempts: u32,
    },
    /// The client was configured wrong (a bad URL, a token that is not a header value, an
    /// unreadable CA certificate).
    #[error("bad client configuration: {0}")]
    Config(String),
}

impl Error {
    /// The server's error code, if the server refused.
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            Self::Server(e) => Some(&e.code),
            _ => None,
        }
    }

    /// Whether a condition did not hold (412 `precondition_failed`).
    pub fn is_precondition_failed(&self) -> bool {
        self.code() == Some(&ErrorCode::PreconditionFailed)
    }
}

impl From<InvalidETag> for Error {
    fn from(e: InvalidETag) -> Self {
        Self::Protocol(e.to_string())
    }
}

impl From<ServerError> for Error {
    fn from(err: ServerError) -> Self {
        Self::Server(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_ones_are_kept() {
        for code in ["not_found", "precondition_failed", "overloaded", "bad_key", "disk_full", "unauthorized"] {
            let parsed = ErrorCode::parse(code);
            assert!(!matches!(parsed, ErrorCode::Other(_)), "{code}");
            assert_eq!(parsed.as_str(), code);
        }
        assert_eq!(ErrorCode::parse("new_code"), ErrorCode::Other("new_code".to_owned()));
        assert_eq!(ErrorCode::parse("new_code").as_str(), "new_code");
    }

    /// The codes `docs/openapi.yaml` lists (its `ErrorCode` enum), read without a YAML parser.
    fn described_codes() -> Vec<&'static str> {
        let yaml = include_str!("../../../docs/openapi.yaml");
        let enum_start = yaml.find("    ErrorCode:").expect("docs/openapi.yaml has ErrorCode");
        let after = &yaml[enum_start..];
        let block = &after[..after.find("\n    Error:").expect("Error follows ErrorCode")];
        block.lines().filter_map(|l| l.trim().strip_prefix("- ")).collect()
    }

    #[test]
    fn the_client_knows_every_code_the_api_describes_and_no_other() {
        let mut described = described_codes();
        let mut known = ErrorCode::KNOWN.to_vec();
        described.sort_unstable();
        known.sort_unstable();
        assert_eq!(known, described);
    }

    #[test]
    fn errors_say_what_failed() {
        let err = Error::Server(ServerError {
            status: 404,
            code: ErrorCode::NotFound,
            message: "key not found".into(),
            etag: None,
            retry_after: None,
        });
        assert_eq!(err.to_string(), "the server refused: 404 not_found: key not found");
        assert_eq!(err.code(), Some(&ErrorCode::NotFound));
        assert!(!err.is_precondition_failed());
    }
}
