"""What both clients are configured with, declared once: the server's URL, the bearer token,
the timeout, retries, compare-and-set attempts and the connection pool; and the httpx
arguments they make."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

import httpx

from ._core import Retry


@dataclass(frozen=True)
class Settings:
    """A client's settings (the keyword arguments of ``Client`` and ``AsyncClient``)."""

    #: ``http://host:port`` or ``https://...``, with an optional path prefix.
    url: str
    #: Sent as ``Authorization: Bearer <token>`` with every request.
    token: Optional[str] = None
    #: Seconds one attempt may take (connect, send, each read); then ``shardlite.Timeout``.
    timeout: float = 30.0
    #: How 503s are retried.
    retry: Retry = Retry()
    #: Conditional writes compare_and_set tries before ``ContentionError``.
    cas_attempts: int = 16
    #: Connections open at once (requests beyond wait for one).
    max_connections: int = 100
    #: Seconds an unused connection stays open: below the server's keep-alive limit
    #: (``--header-timeout-ms``, 10 s by default), so none is reused as the server closes it.
    idle_timeout: float = 5.0
    #: TLS verification for https: True (the system's CAs), False, a CA file path or an
    #: ``ssl.SSLContext`` (as httpx takes it).
    verify: Union[bool, str, Any] = True

    def transport_args(self) -> Dict[str, Any]:
        """The arguments of ``httpx.HTTPTransport`` / ``httpx.AsyncHTTPTransport``."""
        limits = httpx.Limits(
            max_connections=self.max_connections,
            max_keepalive_connections=self.max_connections,
            keepalive_expiry=self.idle_timeout,
        )
        # A PUT's headers and body leave in two writes: without TCP_NODELAY the body would wait
        # for the server's delayed acknowledgement of the headers (40 ms on Linux).
        nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        return {"limits": limits, "verify": self.verify, "socket_options": nodelay}

    def client_args(self) -> Dict[str, Any]:
        """The arguments of ``httpx.Client`` / ``httpx.AsyncClient``, but the transport."""
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"`{self.url}` is not an http:// or https:// URL")
        headers = {"authorization": f"Bearer {self.token}"} if self.token is not None else {}
        # The server is named explicitly: no proxy from the environment.
        return {"base_url": self.url.rstrip("/"), "headers": headers, "timeout": self.timeout, "trust_env": False}
