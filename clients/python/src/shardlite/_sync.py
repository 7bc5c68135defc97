"""``Client``: the operations over blocking httpx (thread-safe: share one across threads)."""

from __future__ import annotations

import time
from typing import Callable, List, Optional

import httpx

from . import _core
from ._core import BatchResult, Bytes, Call, KeyPage, Op, Operation, Record, Retry, Written
from ._errors import Timeout, TransportError
from ._settings import Settings


class Client:
    """A client of one shardlite server; pools keep-alive connections. Use it as a context
    manager, or call ``close()``.

    Keys and values are ``bytes``, ``bytearray``, ``memoryview`` or ``str`` (sent as UTF-8); any
    other type raises ``TypeError`` naming the argument, before anything is sent.

    >>> with Client("http://127.0.0.1:8080", token="T") as db:  # doctest: +SKIP
    ...     db.put(b"user:1", b"Ada")
    ...     db.get(b"user:1").value
    """

    def __init__(
        self,
        url: str,
        *,
        token: Optional[str] = None,
        timeout: float = 30.0,
        retry: Retry = Retry(),
        cas_attempts: int = 16,
        max_connections: int = 100,
        idle_timeout: float = 5.0,
        verify=True,
    ) -> None:
        self.settings = Settings(url, token, timeout, retry, cas_attempts, max_connections, idle_timeout, verify)
        transport = httpx.HTTPTransport(**self.settings.transport_args())
        self._http = httpx.Client(transport=transport, **self.settings.client_args())

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Closes the pooled connections."""
        self._http.close()

    def get(self, key: Bytes) -> Optional[Record]:
        """The record of ``key``, or None if there is none."""
        return self._run(_core.get(key))

    def put(self, key: Bytes, value: Bytes, *, if_match: Optional[str] = None, if_none_match: Optional[str] = None) -> Written:
        """Writes ``value`` under ``key``: an upsert; with ``if_match`` (a tag, or ``"*"``: the
        key exists) or ``if_none_match="*"`` (the key is absent), only if that holds, else
        ``PreconditionFailed`` carrying the current tag."""
        return self._run(_core.put(key, value, if_match, if_none_match))

    def put_if(self, key: Bytes, value: Bytes, etag: str) -> Written:
        """Writes ``value`` under ``key`` if the record is still in the state ``etag`` names."""
        return self._run(_core.put(key, value, if_match=etag))

    def create(self, key: Bytes, value: Bytes) -> str:
        """Writes ``value`` under ``key`` only if the key is absent; its new tag."""
        return self._run(_core.put(key, value, if_none_match="*")).etag

    def delete(self, key: Bytes) -> bool:
        """Deletes the record of ``key``: True if there was one, False if the key was absent."""
        return self._run(_core.delete(key))

    def delete_if(self, key: Bytes, etag: str) -> None:
        """Deletes the record of ``key`` if it is still in the state ``etag`` names (or ``"*"``:
        exists); ``PreconditionFailed`` otherwise, also if the key is absent."""
        self._run(_core.delete(key, if_match=etag))

    def batch(self, ops: List[Op]) -> List[BatchResult]:
        """Runs ``ops`` in one request: one result per operation, in order. The operations of
        one partition commit in one transaction; a batch is not atomic across partitions.
        Operations' own failures are their results' ``error``, not raised, not retried. An
        element that is not an ``Op`` raises ``TypeError`` before anything is sent."""
        return self._run(_core.batch(ops))

    def keys(self, partition: int, after: Optional[str] = None, limit: int = 1000) -> KeyPage:
        """One page of the keys of ``partition``, after the cursor ``after``."""
        return self._run(_core.keys(partition, after, limit))

    def compare_and_set(self, key: Bytes, update: Callable[[Optional[bytes]], Bytes]) -> Written:
        """Replaces the value of ``key`` with ``update(current)`` (``current`` None if absent),
        atomically with respect to every other write of the key: on a conflicting write, reads
        again and recomputes, up to ``cas_attempts`` writes, then ``ContentionError``.
        ``update`` may run several times: it should only compute. It must return bytes,
        bytearray, memoryview or str (UTF-8), else ``TypeError`` and nothing is written."""
        return self._run(_core.compare_and_set(key, update, self.settings.cas_attempts))

    def _run(self, operation: Operation):
        try:
            call = next(operation)
            while True:
                call = operation.send(self._send(call))
        except StopIteration as done:
            return done.value

    def _send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = self._http.request(call.method, call.path, headers=call.headers, content=call.content)
            except httpx.TimeoutException as e:
                raise Timeout(f"no answer within {self.settings.timeout} s: {e}") from e
            except httpx.TransportError as e:
                raise TransportError(str(e)) from e
            wait = self.settings.retry.wait(response, attempt, call.safe)
            if wait is None:
                return response
            time.sleep(wait)
            attempt += 1
