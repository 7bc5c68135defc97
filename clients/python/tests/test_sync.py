"""The blocking Client against a real server: every operation, conditions, typed errors,
compare-and-set under contention from threads, retries of 503s, tokens, timeouts."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

import shardlite
from shardlite import Client, Op, Retry


@pytest.fixture
def db(server):
    with Client(server.url) as client:
        yield client


def test_put_get_delete(db, key):
    assert db.get(key) is None
    first = db.put(key, b"one")
    assert first.created
    again = db.put(key, "two")  # text is sent as UTF-8
    assert not again.created and again.etag != first.etag
    record = db.get(key)
    assert (record.value, record.etag) == (b"two", again.etag)
    assert db.delete(key) is True
    assert db.delete(key) is False
    assert db.get(key) is None


def test_values_are_bytes_of_any_kind(db, key):
    for value in [b"", bytes(range(256)), b"x" * 100_000]:
        db.put(key, value)
        assert db.get(key).value == value


#: Values no put may silently turn into bytes (``bytes(5)`` is five zero bytes, ``bytes([1, 2])``
#: two bytes): each is a TypeError naming the argument and the type.
NOT_BYTES = [(5, "int"), (1.5, "float"), (None, "None"), ([1, 2], "list"), ({"a": 1}, "dict"), (True, "bool")]


def test_text_is_sent_as_utf8_and_buffers_as_their_bytes(db, key):
    db.put(key, "żółw ✓")
    assert db.get(key).value == "żółw ✓".encode("utf-8")
    db.put(key, bytearray(b"from a bytearray"))
    assert db.get(key).value == b"from a bytearray"
    db.put(key, memoryview(b"xx a memoryview xx")[3:-3])
    assert db.get(key).value == b"a memoryview"
    text_key = key.decode() + "/ключ"
    db.put(text_key, b"v")
    assert db.get(text_key.encode("utf-8")).value == b"v", "a str key is its UTF-8 bytes"
    assert db.delete(bytearray(text_key.encode("utf-8"))) is True


@pytest.mark.parametrize("value,kind", NOT_BYTES)
def test_a_value_of_another_type_is_refused_and_writes_nothing(db, key, value, kind):
    with pytest.raises(TypeError, match=f"^value must be bytes, bytearray, memoryview or str, not {kind}$"):
        db.put(key, value)
    assert db.get(key) is None, "nothing was stored"
    etag = db.put(key, b"kept").etag
    with pytest.raises(TypeError, match=f"value must be .*, not {kind}$"):
        db.put(key, value)
    with pytest.raises(TypeError, match=f"value must be .*, not {kind}$"):
        db.put_if(key, value, etag)
    with pytest.raises(TypeError, match=f"value must be .*, not {kind}$"):
        db.create(key + b"/new", value)
    assert db.get(key) == shardlite.Record(b"kept", etag), "the stored value is unchanged"
    assert db.get(key + b"/new") is None


@pytest.mark.parametrize("bad,kind", NOT_BYTES)
def test_a_key_of_another_type_is_refused(db, bad, kind):
    message = f"^key must be bytes, bytearray, memoryview or str, not {kind}$"
    for call in [
        lambda: db.get(bad),
        lambda: db.put(bad, b"v"),
        lambda: db.delete(bad),
        lambda: db.delete_if(bad, "*"),
        lambda: db.compare_and_set(bad, lambda v: b"v"),
        lambda: Op.get(bad),
    ]:
        with pytest.raises(TypeError, match=message):
            call()
    assert db.get(bytes(5)) is None, "no key of five zero bytes was written"


def test_compare_and_set_refuses_a_result_of_another_type(db, key):
    etag = db.put(key, b"3").etag
    for value, kind in NOT_BYTES:
        with pytest.raises(TypeError, match=f"^the value update returned must be bytes, bytearray, memoryview or str, not {kind}$"):
            db.compare_and_set(key, lambda v: value)
    with pytest.raises(TypeError, match="not int$"):
        db.compare_and_set(key, lambda v: int(v or b"0") + 1)  # forgot str()
    assert db.get(key) == shardlite.Record(b"3", etag), "the stored value is unchanged"
    with pytest.raises(TypeError, match="not int$"):
        db.compare_and_set(key + b"/absent", lambda v: 1)
    assert db.get(key + b"/absent") is None
    with pytest.raises(TypeError, match="^update must be a function"):
        db.compare_and_set(key, b"4")
    db.compare_and_set(key, lambda v: str(int(v) + 1))
    assert db.get(key).value == b"4"


@pytest.mark.parametrize("value,kind", NOT_BYTES)
def test_a_batch_with_a_value_of_another_type_is_refused_before_it_is_sent(db, key, value, kind):
    with pytest.raises(TypeError, match=f"^value must be bytes, bytearray, memoryview or str, not {kind}$"):
        db.batch([Op.put(key + b"/first", b"v"), Op.put(key, value)])
    with pytest.raises(TypeError, match=f"value must be .*, not {kind}$"):
        Op("put", key, value)
    with pytest.raises(TypeError, match=f"key must be .*, not {kind}$"):
        Op.delete(value)
    with pytest.raises(TypeError, match=r"^ops\[1\] must be an Op"):
        db.batch([Op.put(key + b"/first", b"v"), (key, value)])
    assert db.get(key + b"/first") is None and db.get(key) is None, "no operation ran"
    results = db.batch([Op.put(key, "text"), Op.put(key + b"/b", bytearray(b"buf")), Op.get(key)])
    assert [r.status for r in results] == [201, 201, 200] and results[2].value == b"text"


def test_conditional_writes(db, key):
    etag = db.create(key, b"v1")
    with pytest.raises(shardlite.PreconditionFailed) as failed:
        db.create(key, b"again")
    assert failed.value.status == 412 and failed.value.etag == etag
    written = db.put_if(key, b"v2", etag)
    with pytest.raises(shardlite.PreconditionFailed) as stale:
        db.put_if(key, b"v3", etag)
    assert stale.value.etag == written.etag, "a 412 names the current tag"
    assert db.put(key, b"v3", if_match="*").etag != written.etag
    with pytest.raises(shardlite.PreconditionFailed):
        db.delete_if(key, written.etag)
    db.delete_if(key, db.get(key).etag)
    with pytest.raises(shardlite.PreconditionFailed) as absent:
        db.put_if(key, b"v4", etag)
    assert absent.value.etag is None, "no current tag when the key is absent"


def test_refusals_raise_the_class_of_their_code(db):
    with pytest.raises(shardlite.KeyTooLarge) as too_long:
        db.get(b"k" * 1025)
    assert (too_long.value.status, too_long.value.code) == (413, "key_too_large")
    with pytest.raises(shardlite.BadHeader):
        db.put(b"k", b"v", if_match="not a tag")
    with pytest.raises(shardlite.BadQuery):
        db.keys(partition=99)
    assert isinstance(too_long.value, shardlite.ServerError)


def test_batch(db, key):
    a, b = key + b"/a", key + b"/b"
    tag = db.put(a, b"old").etag
    results = db.batch(
        [
            Op.put(a, b"new", if_match=tag),
            Op.put(b, b"v", if_none_match="*"),
            Op.get(a),
            Op.put(b, b"w", if_none_match="*"),
            Op.delete(key + b"/absent"),
        ]
    )
    assert [r.status for r in results] == [200, 201, 200, 412, 404]
    assert results[2].value == b"new" and results[2].etag == results[0].etag
    assert isinstance(results[3].error, shardlite.PreconditionFailed) and results[3].error.etag == results[1].etag
    assert isinstance(results[4].error, shardlite.NotFound) and not results[4].ok
    with pytest.raises(shardlite.TooManyOps) as too_many:
        db.batch([Op.get(key)] * 1001)
    assert too_many.value.status == 413


def test_keys_list_every_key(db, key):
    mine = {key + bytes([i]) for i in range(20)}
    for k in mine:
        db.put(k, b"v")
    seen = set()
    first = db.keys(0, limit=5)
    for partition in range(first.partitions):
        after = None
        while True:
            page = db.keys(partition, after, limit=5)
            seen.update(k for k, _ in page.keys)
            if page.next is None:
                break
            after = page.next
    assert mine <= seen


def test_compare_and_set_under_contention(server, key):
    threads, increments = 8, 10
    with Client(server.url, cas_attempts=1000) as db:

        def increment(_):
            for _ in range(increments):
                db.compare_and_set(key, lambda current: str(int(current or b"0") + 1))

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(increment, range(threads)))
        assert db.get(key).value == str(threads * increments).encode()


def test_contention_is_bounded(server, key):
    with Client(server.url, cas_attempts=1) as db:
        db.put(key, b"0")

        def meddle(current):
            db.put(key, b"changed by another writer")  # between the read and the write
            return b"mine"

        with pytest.raises(shardlite.ContentionError) as gave_up:
            db.compare_and_set(key, meddle)
        assert gave_up.value.attempts == 1


def test_overload_is_retried_until_written(overloadable):
    server = overloadable
    retry = Retry(retries=1000, backoff=0.005, max_backoff=0.05)
    with Client(server.url, retry=retry, max_connections=64) as db:
        for round in range(5):
            keys = [f"{round}/{i}".encode() for i in range(200)]
            with ThreadPoolExecutor(64) as pool:
                list(pool.map(lambda k: db.put(k, k), keys))
            assert all(db.get(k).value == k for k in keys)
            if server.refused_writes() > 0:
                return
    pytest.fail("the server never refused a write: the retries were not tested")


def test_overload_without_retries_is_typed(overloadable):
    server = overloadable
    with Client(server.url, retry=Retry(retries=0), max_connections=64) as db:
        for round in range(5):
            with ThreadPoolExecutor(64) as pool:
                outcomes = list(pool.map(lambda i: _put_or_error(db, f"{round}/{i}"), range(200)))
            refused = [e for e in outcomes if isinstance(e, shardlite.ShardliteError)]
            if refused:
                assert all(isinstance(e, shardlite.Overloaded) for e in refused), refused[0]
                assert refused[0].status == 503 and refused[0].retry_after == 1.0
                return
    pytest.fail("the server never refused a write")


def _put_or_error(db, key):
    try:
        return db.put(key, key)
    except shardlite.ShardliteError as e:
        return e


def test_tokens_and_roles(start, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("read reader-token\nwrite writer-token\n")
    server = start("--auth-token-file", str(tokens))
    with Client(server.url) as anonymous, pytest.raises(shardlite.Unauthorized):
        anonymous.get(b"k")
    with Client(server.url, token="wrong") as wrong, pytest.raises(shardlite.Unauthorized):
        wrong.get(b"k")
    with Client(server.url, token="reader-token") as reader:
        assert reader.get(b"k") is None
        with pytest.raises(shardlite.Forbidden) as forbidden:
            reader.put(b"k", b"v")
        assert forbidden.value.status == 403
    with Client(server.url, token="writer-token") as writer:
        assert writer.put(b"k", b"v").created


def test_a_server_that_does_not_answer_times_out():
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        with Client(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.2) as db:
            with pytest.raises(shardlite.Timeout):
                db.get(b"k")


def test_no_server_is_a_transport_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nothing listens there
    with Client(f"http://127.0.0.1:{port}") as db, pytest.raises(shardlite.TransportError):
        db.get(b"k")


def test_bad_urls_are_refused():
    with pytest.raises(ValueError):
        Client("127.0.0.1:8080")
