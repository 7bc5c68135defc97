"""Real `shardlite serve` processes for the tests: the binary SHARDLITE_BIN (test.sh sets it),
on a free loopback port, over a temporary directory, ready (`/readyz` 200) before a test uses
it, stopped after."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator, List, Optional

import httpx
import pytest

#: How long a server may take to be ready.
START_TIMEOUT = 30.0


class Server:
    """A running `shardlite serve`; ``url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, data: Path, args: List[str], env: Optional[dict] = None) -> None:
        binary = os.environ.get("SHARDLITE_BIN") or str(Path(__file__).parents[3] / "target" / "debug" / "shardlite")
        for _attempt in range(5):
            port = _free_port()
            self.url = f"http://127.0.0.1:{port}"
            command = [binary, "serve", "--data", str(data), "--listen", f"127.0.0.1:{port}", *args]
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "warn", **(env or {})}
            )
            if self._wait_ready():
                return
        raise RuntimeError("the server exited at start five times")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while self.process.poll() is None:
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0, trust_env=False).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server was not ready within {START_TIMEOUT} s")
            time.sleep(0.02)
        return False  # it exited: the port was taken meanwhile?

    def refused_writes(self) -> int:
        """PUTs the server answered 503, from its /metrics."""
        text = httpx.get(self.url + "/metrics", trust_env=False).text
        prefix = 'shardlite_http_request_duration_seconds_count{route="/kv/{key}",method="PUT",status="503"}'
        return sum(int(float(line.split()[-1])) for line in text.splitlines() if line.startswith(prefix))

    def stop(self) -> None:
        """SIGTERM, then wait for the exit."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: A small, fast server: 4 partitions, no fsync (durability is the engine's tests' concern).
FAST = ["--partitions", "4", "--synchronous", "off", "--writer-threads", "2", "--lookup-threads", "2"]


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator[Server]:
    """One server for the tests that need nothing special (they use keys of their own)."""
    server = Server(tmp_path_factory.mktemp("data"), FAST)
    yield server
    server.stop()


@pytest.fixture
def start(tmp_path) -> Iterator:
    """Starts servers with flags of the test's own (stopped after the test)."""
    started: List[Server] = []

    def start(*args: str, env: Optional[dict] = None) -> Server:
        server = Server(tmp_path / f"data{len(started)}", list(args), env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def overloadable(start) -> Server:
    """A server easy to overload: one writer thread with room for one queued write, an fsync
    per commit."""
    return start("--partitions", "1", "--writer-threads", "1", "--queue-capacity", "1", "--max-batch", "1", "--synchronous", "full")


@pytest.fixture
def key(request) -> bytes:
    """A key no other test uses."""
    return request.node.nodeid.encode()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
