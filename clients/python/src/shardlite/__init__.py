"""A client of shardlite's HTTP key-value API (docs/http-api.md, docs/clients.md).

``Client`` (blocking) and ``AsyncClient`` (asyncio or trio) offer the same operations: get,
put (an upsert, or conditional with ``if_match`` / ``if_none_match``), put_if, create,
delete, delete_if, batch, keys, and compare_and_set. Refusals raise the ``ServerError``
subclass of their code (``NotFound``, ``PreconditionFailed``, ``Overloaded``, ...); 503s that
are safe to send again are retried with backoff, honoring Retry-After (``Retry``).
Keys and values (also batch operations' and what compare_and_set's function returns) are
``bytes``, ``bytearray``, ``memoryview`` or ``str`` (sent as UTF-8); any other type (an int, a
float, None, a list, a dict, ...) raises ``TypeError`` before anything is sent, rather than
being converted (``bytes(5)`` would be five zero bytes). Entity tags are opaque strings: send
them back as they came.
"""

from ._async import AsyncClient
from ._core import BatchResult, KeyPage, Op, Record, Retry, Written
from ._errors import *  # noqa: F403  (the exceptions: one class per error code)
from ._errors import __all__ as _errors_all
from ._sync import Client

__all__ = ["AsyncClient", "BatchResult", "Client", "KeyPage", "Op", "Record", "Retry", "Written", *_errors_all]
