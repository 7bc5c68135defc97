"""Every way a request can fail: the server's refusals, one exception class per error code of
its JSON body ``{"error": "<code>", "message": "..."}`` (docs/http-api.md, "Errors"), and the
client's own failures (timeouts, connections, answers outside the contract, contention)."""

from __future__ import annotations

from typing import Dict, Optional, Type


__all__ = [
    "ShardliteError",
    "TransportError",
    "Timeout",
    "ProtocolError",
    "ContentionError",
    "ServerError",
    "Unavailable",
    "BadKey",
    "BadHeader",
    "BadBody",
    "BadBatch",
    "BadValue",
    "BadCondition",
    "BadQuery",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "UnknownRoute",
    "MethodNotAllowed",
    "Unsupported",
    "BodyTimeout",
    "Conflict",
    "LengthRequired",
    "PreconditionFailed",
    "KeyTooLarge",
    "ValueTooLarge",
    "BatchTooLarge",
    "TooManyOps",
    "BodyTooLarge",
    "Poisoned",
    "Corrupt",
    "IoError",
    "SqliteError",
    "Internal",
    "DatabaseError",
    "NotImplementedByServer",
    "Misdirected",
    "Overloaded",
    "Closed",
    "NotReady",
    "DiskFull",
    "PartitionFull",
    "MoveFailed",
    "MoveRefused",
    "Fenced",
    "FailoverFailed",
    "FailoverRefused",
    "Unreplicated",
    "CopyBehind",
    "FrameTooLarge",
    "CopyFailed",
    "CODES",
    "server_error",
]


class ShardliteError(Exception):
    """Base of every exception this package raises."""


class TransportError(ShardliteError):
    """The connection could not be made, or broke before the answer was read."""


class Timeout(TransportError):
    """No whole answer within the client's timeout. A write may or may not have been applied."""


class ProtocolError(ShardliteError):
    """The server's answer does not follow the API (a missing ETag, a body that is not the
    documented JSON, ...)."""


class ContentionError(ShardliteError):
    """compare_and_set found the record changed by others on each of its attempts."""

    def __init__(self, attempts: int) -> None:
        super().__init__(f"compare-and-set gave up after {attempts} attempts: the record kept changing")
        self.attempts = attempts


class ServerError(ShardliteError):
    """A refusal from the server: the HTTP status and its JSON body's code and message.

    A subclass per known code; a code this version does not know is this class itself. Also
    one failed operation of a batch (``BatchResult.error``, not raised).
    """

    code: str = ""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        etag: Optional[str] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        #: On a 412: the record's current tag (None if the key is absent).
        self.etag = etag
        #: The Retry-After the server asked for, in seconds (on a 503).
        self.retry_after = retry_after


class Unavailable(ServerError):
    """503: the storage is not available (still opening; PostgreSQL: no connection).

    Base of the other 503 refusals."""

    code = "unavailable"


class BadKey(ServerError):
    """400: the key is empty, of odd length or not lowercase hex."""

    code = "bad_key"


class BadHeader(ServerError):
    """400: a malformed If-Match / If-None-Match."""

    code = "bad_header"


class BadBody(ServerError):
    """400: the connection failed while the body was read."""

    code = "bad_body"


class BadBatch(ServerError):
    """400: the batch is not JSON of the documented shape."""

    code = "bad_batch"


class BadValue(ServerError):
    """400 (batch operations): a value that is not lowercase hex."""

    code = "bad_value"


class BadCondition(ServerError):
    """400 (batch operations): a bad if_match / if_none_match."""

    code = "bad_condition"


class BadQuery(ServerError):
    """400: /keys or /export: a missing or malformed parameter."""

    code = "bad_query"


class BadRequest(ServerError):
    """400: an administration request that is not the documented JSON."""

    code = "bad_request"


class Unauthorized(ServerError):
    """401: a missing or wrong bearer token."""

    code = "unauthorized"


class Forbidden(ServerError):
    """403: a valid token that lacks the role the route needs."""

    code = "forbidden"


class NotFound(ServerError):
    """404: no record has the key."""

    code = "not_found"


class UnknownRoute(ServerError):
    """404: no route serves the path."""

    code = "unknown_route"


class MethodNotAllowed(ServerError):
    """405: the route does not serve the method."""

    code = "method_not_allowed"


class Unsupported(ServerError):
    """405: a data directory of index mode none serves only unconditional PUTs."""

    code = "unsupported"


class BodyTimeout(ServerError):
    """408: the body did not arrive in time."""

    code = "body_timeout"


class Conflict(ServerError):
    """409: a backup is running, or its directory is not empty."""

    code = "conflict"


class LengthRequired(ServerError):
    """411: a PUT without Content-Length."""

    code = "length_required"


class PreconditionFailed(ServerError):
    """412: a condition did not hold (also If-Match on an absent key).

    ``etag`` is the record's current tag (None if the key is absent)."""

    code = "precondition_failed"


class KeyTooLarge(ServerError):
    """413: a key over 1024 bytes."""

    code = "key_too_large"


class ValueTooLarge(ServerError):
    """413: a value over the server's max_value."""

    code = "value_too_large"


class BatchTooLarge(ServerError):
    """413: a batch body over --batch-max-bytes."""

    code = "batch_too_large"


class TooManyOps(ServerError):
    """413: more operations than --batch-max-ops."""

    code = "too_many_ops"


class BodyTooLarge(ServerError):
    """413: an administration request's body over its limit."""

    code = "body_too_large"


class Poisoned(ServerError):
    """500: a partition refuses writes after a failed commit or fsync."""

    code = "poisoned"


class Corrupt(ServerError):
    """500: storage corruption."""

    code = "corrupt"


class IoError(ServerError):
    """500: an I/O error of the storage."""

    code = "io_error"


class SqliteError(ServerError):
    """500: SQLite failed."""

    code = "sqlite_error"


class Internal(ServerError):
    """500: a bug or an unexpected state of the server."""

    code = "internal"


class DatabaseError(ServerError):
    """500: PostgreSQL refused or failed a statement (PostgreSQL backend)."""

    code = "database_error"


class NotImplementedByServer(ServerError):
    """501: the backend does not serve the route."""

    code = "not_implemented"


class Misdirected(ServerError):
    """421: a cluster node does not own the key's partition; the body names the owner."""

    code = "misdirected"


class Overloaded(Unavailable):
    """503: a write or lookup queue is full; nothing was done."""

    code = "overloaded"


class Closed(Unavailable):
    """503: the store is shutting down; nothing was done."""

    code = "closed"


class NotReady(Unavailable):
    """503 (/readyz): the server is not ready."""

    code = "not_ready"


class DiskFull(ServerError):
    """507: the disk is full; the write was rolled back."""

    code = "disk_full"


class PartitionFull(ServerError):
    """507: a partition used all of its record ids."""

    code = "partition_full"


class MoveFailed(ServerError):
    """409 or 502 (``POST /admin/move``): moving a partition failed; the map is unchanged."""

    code = "move_failed"


class MoveRefused(ServerError):
    """409 (``/admin/move``, ``/admin/adopt``): a partition move cannot start here."""

    code = "move_refused"


class Fenced(Unavailable):
    """503: the cluster node owning the partition does not hold its lease in etcd; retry."""

    code = "fenced"


class FailoverFailed(ServerError):
    """502 (``/admin/takeover``): restoring a dead node's partition from its replica failed."""

    code = "failover_failed"


class FailoverRefused(ServerError):
    """409 (``/admin/takeover``): the partition's owner is alive, or not the node named."""

    code = "failover_refused"


class Unreplicated(Unavailable):
    """503: with replicas, too few copies held the write in time; it was rolled back."""

    code = "unreplicated"


class CopyBehind(ServerError):
    """409 (``/admin/replicate``): a frame that does not follow what the copy holds."""

    code = "copy_behind"


class FrameTooLarge(ServerError):
    """413 (``/admin/replicate``): a replication frame over its limit."""

    code = "frame_too_large"


class CopyFailed(ServerError):
    """502 (``/admin/replicate``): the owner sent no snapshot for a copy to take in."""

    code = "copy_failed"


#: Every known code and its class.
CODES: Dict[str, Type[ServerError]] = {
    cls.code: cls
    for cls in (
        BadKey,
        BadHeader,
        BadBody,
        BadBatch,
        BadValue,
        BadCondition,
        BadQuery,
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        UnknownRoute,
        MethodNotAllowed,
        Unsupported,
        BodyTimeout,
        Conflict,
        LengthRequired,
        PreconditionFailed,
        KeyTooLarge,
        ValueTooLarge,
        BatchTooLarge,
        TooManyOps,
        BodyTooLarge,
        Poisoned,
        Corrupt,
        IoError,
        SqliteError,
        Internal,
        DatabaseError,
        NotImplementedByServer,
        Misdirected,
        Unavailable,
        Overloaded,
        Closed,
        NotReady,
        DiskFull,
        PartitionFull,
        MoveFailed,
        MoveRefused,
        Fenced,
        FailoverFailed,
        FailoverRefused,
        Unreplicated,
        CopyBehind,
        FrameTooLarge,
        CopyFailed,
    )
}


def server_error(
    status: int, code: str, message: str, etag: Optional[str] = None, retry_after: Optional[float] = None
) -> ServerError:
    """The exception of this refusal: the class of its code."""
    return CODES.get(code, ServerError)(status, code, message, etag, retry_after)
