"""The AsyncClient against a real server: the same operations as the blocking client (one
generator per operation drives both: see _core.py), compare-and-set under contention from
tasks, retries of 503s."""

from __future__ import annotations

import anyio
import pytest

import shardlite
from shardlite import AsyncClient, Op, Retry

pytestmark = pytest.mark.anyio


async def test_put_get_delete(server, key):
    async with AsyncClient(server.url) as db:
        assert await db.get(key) is None
        written = await db.put(key, b"one")
        assert written.created
        record = await db.get(key)
        assert (record.value, record.etag) == (b"one", written.etag)
        assert await db.delete(key) is True
        assert await db.delete(key) is False


async def test_conditional_writes_and_batch(server, key):
    async with AsyncClient(server.url) as db:
        etag = await db.create(key, b"v1")
        with pytest.raises(shardlite.PreconditionFailed) as failed:
            await db.create(key, b"again")
        assert failed.value.etag == etag
        written = await db.put_if(key, b"v2", etag)
        with pytest.raises(shardlite.PreconditionFailed):
            await db.delete_if(key, etag)
        results = await db.batch([Op.get(key), Op.delete(key, if_match=written.etag)])
        assert [r.status for r in results] == [200, 204]
        assert results[0].value == b"v2"
        page = await db.keys(0, limit=1)
        assert page.partitions == 4


async def test_values_and_keys_of_another_type_are_refused_before_anything_is_sent(server, key):
    async with AsyncClient(server.url) as db:
        for value, kind in [(5, "int"), (1.5, "float"), (None, "None"), ([1, 2], "list"), ({"a": 1}, "dict")]:
            message = f"^value must be bytes, bytearray, memoryview or str, not {kind}$"
            with pytest.raises(TypeError, match=message):
                await db.put(key, value)
            assert await db.get(key) is None, "nothing was stored"
            with pytest.raises(TypeError, match=message):
                await db.create(key, value)
            with pytest.raises(TypeError, match=message):
                await db.batch([Op.put(key + b"/first", b"v"), Op.put(key, value)])
            with pytest.raises(TypeError, match=f"^key must be bytes, bytearray, memoryview or str, not {kind}$"):
                await db.get(value)
            with pytest.raises(TypeError, match=f"^key must be .*, not {kind}$"):
                await db.delete(value)
        with pytest.raises(TypeError, match=r"^ops\[1\] must be an Op"):
            await db.batch([Op.put(key + b"/first", b"v"), (key, b"v")])
        assert await db.get(key + b"/first") is None, "no operation of a refused batch ran"

        etag = (await db.put(key, b"3")).etag
        with pytest.raises(TypeError, match="^the value update returned must be bytes, bytearray, memoryview or str, not int$"):
            await db.compare_and_set(key, lambda v: int(v or b"0") + 1)
        with pytest.raises(TypeError, match="not None$"):
            await db.compare_and_set(key, lambda v: None)
        assert await db.get(key) == shardlite.Record(b"3", etag), "the stored value is unchanged"


async def test_text_is_sent_as_utf8(server, key):
    async with AsyncClient(server.url) as db:
        await db.put(key, "żółw ✓")
        assert (await db.get(key)).value == "żółw ✓".encode("utf-8")
        await db.compare_and_set(key, lambda v: v.decode("utf-8") + "!")
        assert (await db.get(key)).value == "żółw ✓!".encode("utf-8")
        await db.put(key.decode() + "/ключ", memoryview(b"view"))
        assert (await db.get((key.decode() + "/ключ").encode("utf-8"))).value == b"view"


async def test_compare_and_set_under_contention(server, key):
    tasks, increments = 8, 5
    async with AsyncClient(server.url, cas_attempts=1000) as db:

        async def increment():
            for _ in range(increments):
                await db.compare_and_set(key, lambda current: str(int(current or b"0") + 1))

        async with anyio.create_task_group() as group:
            for _ in range(tasks):
                group.start_soon(increment)
        assert (await db.get(key)).value == str(tasks * increments).encode()


async def test_overload_is_retried_until_written(overloadable):
    server = overloadable
    retry = Retry(retries=1000, backoff=0.005, max_backoff=0.05)
    async with AsyncClient(server.url, retry=retry, max_connections=64) as db:
        for round in range(5):
            keys = [f"{round}/{i}".encode() for i in range(64)]
            async with anyio.create_task_group() as group:
                for k in keys:
                    group.start_soon(db.put, k, k)
            for k in keys:
                assert (await db.get(k)).value == k
            if server.refused_writes() > 0:
                return
    pytest.fail("the server never refused a write: the retries were not tested")


async def test_a_server_that_does_not_answer_times_out():
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")  # never accepts
    async with listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with AsyncClient(f"http://127.0.0.1:{port}", timeout=0.2) as db:
            with pytest.raises(shardlite.Timeout):
                await db.get(b"k")
