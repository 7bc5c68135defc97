"""A client of shardlite's HTTP key-value API (docs/http-api.md, docs/clients.md).

``Client`` (blocking) and ``AsyncClient`` (asyncio or trio) offer the same operations: get,
put (an upsert, or conditional with ``if_match`` / ``if_none_match``), put_if, create,
delete, delete_if, batch, keys, and compare_and_set. Refusals raise the ``ServerError``
subclass of their code (``NotFound``, ``PreconditionFailed``, ``Overloaded``, ...); 503s that
are safe to send again are retried with backoff, honoring Retry-After (``Retry``).
Keys and values are bytes (text is sent as UTF-8). Entity tags are opaque strings: send them
back as they came.
"""

from ._async import AsyncClient
from ._core import BatchResult, KeyPage, Op, Record, Retry, Written
from ._errors import *  # noqa: F403  (the exceptions: one class per error code)
from ._errors import __all__ as _errors_all
from ._sync import Client

__all__ = ["AsyncClient", "BatchResult", "Client", "KeyPage", "Op", "Record", "Retry", "Written", *_errors_all]
