"""``AsyncClient``: the operations over asynchronous httpx (asyncio or trio, through anyio)."""

from __future__ import annotations

import anyio
from typing import Callable, List, Optional

import httpx

from . import _core
from ._core import BatchResult, Bytes, Call, KeyPage, Op, Operation, Record, Retry, Written
from ._errors import Timeout, TransportError
from ._settings import Settings


class AsyncClient:
    """A client of one shardlite server; pools keep-alive connections. Use it as a context
    manager, or await ``close()``.

    Keys and values are ``bytes``, ``bytearray``, ``memoryview`` or ``str`` (sent as UTF-8); any
    other type raises ``TypeError`` naming the argument, before anything is sent.

    >>> async with AsyncClient("http://127.0.0.1:8080", token="T") as db:  # doctest: +SKIP
    ...     await db.put(b"user:1", b"Ada")
    ...     (await db.get(b"user:1")).value
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
        transport = httpx.AsyncHTTPTransport(**self.settings.transport_args())
        self._http = httpx.AsyncClient(transport=transport, **self.settings.client_args())

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the pooled connections."""
        await self._http.aclose()

    async def get(self, key: Bytes) -> Optional[Record]:
        """The record of ``key``, or None if there is none."""
        return await self._run(_core.get(key))

    async def put(self, key: Bytes, value: Bytes, *, if_match: Optional[str] = None, if_none_match: Optional[str] = None) -> Written:
        """Writes ``value`` under ``key``: an upsert; with ``if_match`` (a tag, or ``"*"``: the
        key exists) or ``if_none_match="*"`` (the key is absent), only if that holds, else
        ``PreconditionFailed`` carrying the current tag."""
        return await self._run(_core.put(key, value, if_match, if_none_match))

    async def put_if(self, key: Bytes, value: Bytes, etag: str) -> Written:
        """Writes ``value`` under ``key`` if the record is still in the state ``etag`` names."""
        return await self._run(_core.put(key, value, if_match=etag))

    async def create(self, key: Bytes, value: Bytes) -> str:
        """Writes ``value`` under ``key`` only if the key is absent; its new tag."""
        return (await self._run(_core.put(key, value, if_none_match="*"))).etag

    async def delete(self, key: Bytes) -> bool:
        """Deletes the record of ``key``: True if there was one, False if the key was absent."""
        return await self._run(_core.delete(key))

    async def delete_if(self, key: Bytes, etag: str) -> None:
        """Deletes the record of ``key`` if it is still in the state ``etag`` names (or ``"*"``:
        exists); ``PreconditionFailed`` otherwise, also if the key is absent."""
        await self._run(_core.delete(key, if_match=etag))

    async def batch(self, ops: List[Op]) -> List[BatchResult]:
        """Runs ``ops`` in one request: one result per operation, in order. The operations of
        one partition commit in one transaction; a batch is not atomic across partitions.
        Operations' own failures are their results' ``error``, not raised, not retried. An
        element that is not an ``Op`` raises ``TypeError`` before anything is sent."""
        return await self._run(_core.batch(ops))

    async def keys(self, partition: int, after: Optional[str] = None, limit: int = 1000) -> KeyPage:
        """One page of the keys of ``partition``, after the cursor ``after``."""
        return await self._run(_core.keys(partition, after, limit))

    async def compare_and_set(self, key: Bytes, update: Callable[[Optional[bytes]], Bytes]) -> Written:
        """Replaces the value of ``key`` with ``update(current)`` (``current`` None if absent),
        atomically with respect to every other write of the key: on a conflicting write, reads
        again and recomputes, up to ``cas_attempts`` writes, then ``ContentionError``.
        ``update`` may run several times: it should only compute. It must return bytes,
        bytearray, memoryview or str (UTF-8), else ``TypeError`` and nothing is written."""
        return await self._run(_core.compare_and_set(key, update, self.settings.cas_attempts))

    async def _run(self, operation: Operation):
        try:
            call = next(operation)
            while True:
                call = operation.send(await self._send(call))
        except StopIteration as done:
            return done.value

    async def _send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = await self._http.request(call.method, call.path, headers=call.headers, content=call.content)
            except httpx.TimeoutException as e:
                raise Timeout(f"no answer within {self.settings.timeout} s: {e}") from e
            except httpx.TransportError as e:
                raise TransportError(str(e)) from e
            wait = self.settings.retry.wait(response, attempt, call.safe)
            if wait is None:
                return response
            await anyio.sleep(wait)
            attempt += 1
