"""The operations of docs/http-api.md written once, without I/O, for both clients.

Each operation is a generator: it yields the ``Call``s it needs (a request, and whether
sending it twice is safe) and receives each one's ``httpx.Response``; its return value is the
operation's result. ``Client`` and ``AsyncClient`` drive the same generators, one with
blocking and one with awaited I/O, and retry each call as ``Retry`` says.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Callable, Dict, Generator, List, Optional, Union
from urllib.parse import quote

import httpx

from ._errors import ContentionError, PreconditionFailed, ProtocolError, ServerError, server_error

Bytes = Union[bytes, bytearray, memoryview, str]
"""Keys and values: ``bytes``, ``bytearray``, ``memoryview`` (their bytes), or ``str`` (sent as
UTF-8). Nothing else is converted: ``bytes(5)`` is five zero bytes and ``bytes([1, 2])`` two
bytes, so an int, a float, None, a list, ... raises ``TypeError`` before anything is sent."""

_ACCEPTED = "bytes, bytearray, memoryview or str"


def _bytes(data: Bytes, what: str) -> bytes:
    """``data`` as bytes (``str`` as UTF-8); ``TypeError`` naming ``what`` for any other type."""
    if type(data) is bytes:
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        return data.encode("utf-8")
    raise TypeError(f"{what} must be {_ACCEPTED}, not {_type_name(data)}")


def _type_name(data: object) -> str:
    return "None" if data is None else type(data).__name__


@dataclass(frozen=True)
class Record:
    """A record as read: its value and the tag of this state (opaque: send it back as it came)."""

    value: bytes
    etag: str


@dataclass(frozen=True)
class Written:
    """What a successful write answered."""

    #: The tag of the record's new state.
    etag: str
    #: Whether the key was absent before (201 Created) rather than updated (200).
    created: bool


@dataclass(frozen=True)
class KeyPage:
    """One page of a partition's keys (``GET /keys``)."""

    partition: int
    #: How many partitions the server has: list ``range(partitions)`` to see every key.
    partitions: int
    #: ``(key, etag)`` pairs in the partition's record-id order.
    keys: List[tuple]
    #: The cursor of the next page (the ``after`` to ask with); None at the partition's end.
    next: Optional[str]


@dataclass(frozen=True)
class Op:
    """One operation of a batch: build it with ``Op.get``, ``Op.put`` or ``Op.delete``."""

    op: str
    key: bytes
    value: Optional[bytes] = None
    if_match: Optional[str] = None
    if_none_match: Optional[str] = None

    def __post_init__(self) -> None:
        # Checked (and made bytes) however the Op is built, so a bad key or value is a
        # TypeError here, before any batch holding it is sent.
        if self.op not in ("get", "put", "delete"):
            raise ValueError(f"op must be 'get', 'put' or 'delete', not {self.op!r}")
        object.__setattr__(self, "key", _bytes(self.key, "key"))
        if self.op == "put":
            object.__setattr__(self, "value", _bytes(self.value, "value"))
        elif self.value is not None:
            raise TypeError(f"a {self.op} takes no value, not {_type_name(self.value)}")

    @classmethod
    def get(cls, key: Bytes) -> "Op":
        """Read ``key``."""
        return cls("get", key)

    @classmethod
    def put(cls, key: Bytes, value: Bytes, *, if_match: Optional[str] = None, if_none_match: Optional[str] = None) -> "Op":
        """Write ``value`` under ``key``; ``if_match`` a tag or ``"*"``, ``if_none_match="*"``:
        the conditions of a single PUT."""
        return cls("put", key, value, if_match, if_none_match)

    @classmethod
    def delete(cls, key: Bytes, *, if_match: Optional[str] = None) -> "Op":
        """Delete ``key``; ``if_match`` a tag or ``"*"``."""
        return cls("delete", key, None, if_match)

    def wire(self) -> Dict[str, str]:
        """The operation as the server reads it: keys and values in lowercase hex."""
        out = {"op": self.op, "key": self.key.hex()}
        if self.value is not None:
            out["value"] = self.value.hex()
        if self.if_match is not None:
            out["if_match"] = self.if_match
        if self.if_none_match is not None:
            out["if_none_match"] = self.if_none_match
        return out


@dataclass(frozen=True)
class BatchResult:
    """One operation's result: its status as the single-key request would have answered it
    (get 200, put 201 or 200, delete 204), or the operation's own refusal in ``error`` (404,
    412 with the current tag in ``error.etag``, 503 if its partition's queue was full, ...)."""

    status: int
    etag: Optional[str] = None
    #: The record's update counter (1 on insert, +1 on every update), for information.
    counter: Optional[int] = None
    #: A get's value.
    value: Optional[bytes] = None
    #: The operation's refusal (not raised), or None.
    error: Optional[ServerError] = None

    @property
    def ok(self) -> bool:
        """Whether the operation succeeded."""
        return self.error is None


@dataclass(frozen=True)
class Retry:
    """How 503 refusals are retried.

    Only a 503 is retried, and only when sending the request again cannot do anything twice:
    ``overloaded`` (a full queue) and ``closed`` (shutting down) are refused before the request
    enters a queue, so every request is retried; ``unavailable`` (the storage still opening; on
    PostgreSQL also a connection that broke while its statement ran, which may have committed)
    and any other 503 only for reads and unconditional puts. Timeouts and broken connections
    are not retried. The wait before retry n is the server's Retry-After if it sent one, else
    ``backoff * 2**n`` with jitter (a random half to whole of it); at most ``max_backoff``.
    """

    #: Attempts after the first (0: never retry).
    retries: int = 3
    #: Seconds before the first retry when the server did not say; doubled for each later one.
    backoff: float = 0.05
    #: The longest wait in seconds, whatever Retry-After says.
    max_backoff: float = 2.0

    def wait(self, response: httpx.Response, attempt: int, safe: bool) -> Optional[float]:
        """Seconds to wait before retrying after ``response`` to attempt ``attempt`` (0 for the
        first), or None if it is not retried."""
        if response.status_code != 503 or attempt >= self.retries:
            return None
        refusal = refusal_of(response)
        if not (safe or refusal.code in ("overloaded", "closed")):
            return None
        if refusal.retry_after is not None:
            wait = refusal.retry_after
        else:
            wait = self.backoff * 2 ** min(attempt, 20) * random.uniform(0.5, 1.0)
        return min(wait, self.max_backoff)


@dataclass(frozen=True)
class Call:
    """One request of an operation."""

    method: str
    path: str
    #: Sending it twice leaves what sending it once leaves (reads, unconditional puts).
    safe: bool
    headers: Dict[str, str] = field(default_factory=dict)
    content: bytes = b""


Operation = Generator[Call, httpx.Response, object]


def refusal_of(response: httpx.Response) -> ServerError:
    """The response as the server's refusal: the exception of its code."""
    code, message = "", response.text
    if response.headers.get("content-type", "").startswith("application/json"):
        try:
            body = response.json()
            code, message = body["error"], body["message"]
        except (ValueError, KeyError, TypeError):
            pass
    retry_after = response.headers.get("retry-after")
    seconds = float(retry_after) if retry_after and retry_after.strip().isdigit() else None
    return server_error(response.status_code, code, message, response.headers.get("etag"), seconds)


def _etag(response: httpx.Response) -> str:
    tag = response.headers.get("etag")
    if tag is None:
        raise ProtocolError(f"a {response.status_code} answer without an ETag")
    return tag


def _kv(key: Bytes) -> str:
    return "/kv/" + _bytes(key, "key").hex()


def _condition(if_match: Optional[str], if_none_match: Optional[str]) -> Dict[str, str]:
    headers = {}
    if if_match is not None:
        headers["if-match"] = if_match
    if if_none_match is not None:
        headers["if-none-match"] = if_none_match
    return headers


def get(key: Bytes) -> Operation:
    """The record of ``key``, or None."""
    response = yield Call("GET", _kv(key), safe=True)
    if response.status_code == 200:
        return Record(response.content, _etag(response))
    refusal = refusal_of(response)
    if refusal.code == "not_found":
        return None
    raise refusal


def put(key: Bytes, value: Bytes, if_match: Optional[str] = None, if_none_match: Optional[str] = None) -> Operation:
    """Writes ``value`` under ``key`` if the conditions hold (none: an upsert)."""
    path, content = _kv(key), _bytes(value, "value")  # both checked before anything is sent
    headers = _condition(if_match, if_none_match)
    response = yield Call("PUT", path, safe=not headers, headers=headers, content=content)
    if response.status_code in (200, 201):
        return Written(_etag(response), response.status_code == 201)
    raise refusal_of(response)


def delete(key: Bytes, if_match: Optional[str] = None, missing_ok: bool = True) -> Operation:
    """Deletes ``key``: True if it was there; False if it was absent and ``missing_ok``."""
    response = yield Call("DELETE", _kv(key), safe=False, headers=_condition(if_match, None))
    if response.status_code == 204:
        return True
    refusal = refusal_of(response)
    if missing_ok and if_match is None and refusal.code == "not_found":
        return False
    raise refusal


def batch(ops: List[Op]) -> Operation:
    """Runs ``ops`` in one POST /batch: one ``BatchResult`` per operation, in order."""
    ops = list(ops)
    for i, op in enumerate(ops):
        if not isinstance(op, Op):
            raise TypeError(f"ops[{i}] must be an Op (Op.get, Op.put, Op.delete), not {_type_name(op)}")
    content = json.dumps({"ops": [op.wire() for op in ops]}).encode()
    response = yield Call("POST", "/batch", safe=False, headers={"content-type": "application/json"}, content=content)
    if response.status_code != 200:
        raise refusal_of(response)
    try:
        results = response.json()["results"]
    except (ValueError, KeyError, TypeError) as e:
        raise ProtocolError(f"a batch answer that is not its JSON: {e}") from None
    if len(results) != len(ops):
        raise ProtocolError(f"{len(results)} batch results for {len(ops)} operations")
    return [_batch_result(r) for r in results]


def _batch_result(wire: dict) -> BatchResult:
    status, etag = wire["status"], wire.get("etag")
    if "error" in wire:
        return BatchResult(status, etag, wire.get("counter"), None, server_error(status, wire["error"], wire.get("message", ""), etag))
    value = wire.get("value")
    return BatchResult(status, etag, wire.get("counter"), bytes.fromhex(value) if value is not None else None)


def keys(partition: int, after: Optional[str] = None, limit: int = 1000) -> Operation:
    """One page of the keys of ``partition`` after the cursor ``after``."""
    path = f"/keys?partition={partition}&limit={limit}"
    if after is not None:
        path += "&after=" + quote(after, safe="")
    response = yield Call("GET", path, safe=True)
    if response.status_code != 200:
        raise refusal_of(response)
    page = response.json()
    pairs = [(bytes.fromhex(k["key"]), k["etag"]) for k in page["keys"]]
    return KeyPage(page["partition"], page["partitions"], pairs, page["next"])


def compare_and_set(key: Bytes, update: Callable[[Optional[bytes]], Bytes], attempts: int) -> Operation:
    """Replaces the value of ``key`` with ``update(current)`` (None: absent) if no other write
    came in between (If-Match the tag read; If-None-Match: * if absent); on 412 reads again and
    recomputes, at most ``attempts`` writes. What ``update`` returns is checked as a put's value
    is: anything but bytes, bytearray, memoryview or str raises ``TypeError`` and writes nothing."""
    if not callable(update):
        raise TypeError(f"update must be a function of the current value, not {_type_name(update)}")
    current = yield from get(key)
    for _ in range(attempts):
        # Checked before the write: a bad result raises TypeError, and the record stays as it is.
        value = _bytes(update(current.value if current is not None else None), "the value update returned")
        try:
            if current is None:
                return (yield from put(key, value, if_none_match="*"))
            return (yield from put(key, value, if_match=current.etag))
        except PreconditionFailed:
            current = yield from get(key)
    raise ContentionError(attempts)
