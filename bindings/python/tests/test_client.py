"""memkv.Client against a real server: values, keys, buffers, batches, misses."""

import threading
import time

import numpy as np
import pytest

import memkv
from memkv.testing import MemkvServer


def test_put_get_delete_exists(client: memkv.Client) -> None:
    client.put("greeting", b"hello")
    assert client.get("greeting") == b"hello"
    assert client.exists("greeting")
    assert client.delete("greeting") is True
    assert client.delete("greeting") is False
    assert not client.exists("greeting")
    assert client.get("greeting") is None


def test_str_and_bytes_keys_are_the_same_key(client: memkv.Client) -> None:
    client.put("naïve/key", b"v1")
    assert client.get("naïve/key".encode()) == b"v1"
    client.put(b"\xff\x00raw", b"v2")
    assert client.get(b"\xff\x00raw") == b"v2"


def test_values_from_any_buffer(client: memkv.Client) -> None:
    arr = np.arange(1000, dtype=np.float32)
    client.put("np", arr)
    assert client.get("np") == arr.tobytes()
    client.put("ba", bytearray(b"abc"))
    client.put("mv", memoryview(b"0123456789")[2:5])
    assert client.get("ba") == b"abc"
    assert client.get("mv") == b"234"
    client.put("empty", b"")
    assert client.get("empty") == b""


def test_get_into_writes_in_place(client: memkv.Client) -> None:
    value = np.random.default_rng(1).integers(0, 255, 3 << 20, dtype=np.uint8)
    client.put("big", value)
    out = np.zeros(4 << 20, dtype=np.uint8)
    assert client.get_into("big", out) == value.nbytes
    assert np.array_equal(out[: value.nbytes], value)
    assert not out[value.nbytes :].any()
    ba = bytearray(16)
    client.put("small", b"xyz")
    assert client.get_into("small", ba) == 3
    assert ba[:3] == b"xyz"
    assert client.get_into("absent", ba) is None


def test_get_into_a_small_buffer_names_both_sizes(client: memkv.Client) -> None:
    client.put("ten", b"0123456789")
    with pytest.raises(memkv.TooLargeError, match=r"10 bytes.*buffer of 4 bytes"):
        client.get_into("ten", bytearray(4))


def test_read_only_and_strided_buffers_are_refused_by_name(client: memkv.Client) -> None:
    with pytest.raises(BufferError, match="buffer: expected a writable"):
        client.get_into("k", b"immutable")
    strided = np.zeros((4, 4), dtype=np.uint8)[:, 1]
    with pytest.raises(BufferError, match="value: expected a C-contiguous"):
        client.put("k", strided)


def test_bad_keys(client: memkv.Client) -> None:
    with pytest.raises(TypeError, match="key must be str or bytes, not int"):
        client.put(7, b"v")  # type: ignore[arg-type]
    with pytest.raises(memkv.TooLargeError, match="1024"):
        client.put("k" * 5000, b"v")


def test_a_bad_key_in_a_batch_is_named_by_position(client: memkv.Client) -> None:
    """A batch may hold thousands of keys: the error says which one."""
    with pytest.raises(TypeError, match=r"keys\[1\]: a key must be str or bytes, not NoneType"):
        client.get_many(["a", None, "c"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"keys\[2\]"):
        client.get_many_into(["a", "b", 3], [bytearray(1)] * 3)  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"items\[1\] key: a key must be str or bytes, not int"):
        client.put_many([("a", b"1"), (7, b"2")])  # type: ignore[list-item]
    # A lone surrogate has no UTF-8 form: the error names the key's place too.
    with pytest.raises(ValueError, match=r"keys\[1\]: a str key must be valid Unicode"):
        client.exists_many(["a", "\ud800"])
    with pytest.raises(ValueError, match="a str key must be valid Unicode"):
        client.put("\udfff", b"v")


def test_an_empty_key_is_refused_before_anything_is_sent(server: MemkvServer) -> None:
    """Keys are 1 to 1024 bytes: an empty key is refused as a too long one is, not reported
    as whatever the server or the network says about it."""
    down = memkv.Client(servers=["127.0.0.1:1"], auth_key="ab" * 32, transport="tcp")
    for call in (
        lambda: down.put("", b"v"),
        lambda: down.get(b""),
        lambda: down.exists(""),
        lambda: down.delete(""),
    ):
        with pytest.raises(memkv.TooLargeError, match="empty key") as info:
            call()
        assert info.value.keys is None
    with server.client(transport="tcp") as up:
        with pytest.raises(memkv.TooLargeError, match='"": an empty key') as batch:
            up.get_many(["", "a"])
        assert batch.value.keys == [b""]
        with pytest.raises(memkv.TooLargeError, match="1 of 2 keys failed"):
            up.put_many([("empty/ok", b"1"), ("", b"2")])
        assert up.get("empty/ok") == b"1"


def test_batches(client: memkv.Client) -> None:
    items = [(f"batch/{i}", bytes([i]) * (i * 1000 + 1)) for i in range(40)]
    client.put_many(items)
    keys = [k for k, _ in items] + ["batch/missing"]
    values = client.get_many(keys)
    assert values[:-1] == [v for _, v in items]
    assert values[-1] is None
    bufs = [bytearray(40_000) for _ in keys]
    lens = client.get_many_into(keys, bufs)
    assert lens[-1] is None
    for (_, v), n, b in zip(items, lens, bufs):
        assert n == len(v) and b[:n] == v
    assert client.exists_many(keys) == [True] * 40 + [False]
    assert client.delete_many(keys[:2] + ["batch/missing"]) == [True, True, False]
    assert client.exists_many(keys[:3]) == [False, False, True]


def test_put_many_names_every_failed_key(client: memkv.Client) -> None:
    long_a, long_b = "a" * 2000, "b" * 2000
    with pytest.raises(memkv.TooLargeError) as info:
        client.put_many([("ok1", b"1"), (long_a, b"x"), ("ok2", b"2"), (long_b, b"y")])
    message = str(info.value)
    assert "2 of 4 keys failed" in message
    assert long_a in message and long_b in message
    assert info.value.keys == [long_a.encode(), long_b.encode()]
    assert info.value.results is not None
    assert info.value.results[0] is None and info.value.results[2] is None
    assert isinstance(info.value.results[1], memkv.TooLargeError)
    assert client.get_many(["ok1", "ok2"]) == [b"1", b"2"]


def test_a_failed_batch_read_keeps_what_succeeded(client: memkv.Client) -> None:
    client.put_many([("kept/a", b"abc"), ("kept/b", b"abcdefgh")])
    bufs = [bytearray(4), bytearray(4), bytearray(4)]
    with pytest.raises(memkv.TooLargeError) as info:
        client.get_many_into(["kept/a", "kept/b", "kept/none"], bufs)
    assert info.value.keys == [b"kept/b"]
    assert info.value.results is not None
    assert info.value.results[0] == 3 and info.value.results[2] is None
    assert isinstance(info.value.results[1], memkv.TooLargeError)
    assert bufs[0][:3] == b"abc"


def test_batch_arguments_are_checked(client: memkv.Client) -> None:
    with pytest.raises(TypeError, match="not a single str"):
        client.get_many("abc")
    with pytest.raises(TypeError, match=r"items\[1\]: expected a \(key, value\) pair"):
        client.put_many([("a", b"1"), ("b",)])  # type: ignore[list-item]
    client.put_many([["as-list", b"1"]])  # type: ignore[list-item]
    assert client.get("as-list") == b"1"


def test_get_many_into_needs_one_buffer_per_key(client: memkv.Client) -> None:
    with pytest.raises(ValueError, match="2 keys but 1 buffers"):
        client.get_many_into(["a", "b"], [bytearray(1)])


def test_get_many_into_too_small_buffer(client: memkv.Client) -> None:
    client.put_many([("fits", b"ab"), ("spills", b"abcdef")])
    with pytest.raises(memkv.TooLargeError, match="spills.*6 bytes.*buffer of 4 bytes"):
        client.get_many_into(["fits", "spills"], [bytearray(4), bytearray(4)])


def test_get_many_into_refuses_overlapping_buffers(client: memkv.Client) -> None:
    """Each buffer is written by its own reader at once: shared bytes would be a data race."""
    client.put_many([(f"ov/{i}", bytes([i]) * 8) for i in range(5)])
    keys = [f"ov/{i}" for i in range(5)]
    one = bytearray(8)
    bufs = [bytearray(8) for _ in range(5)]
    bufs[1] = bufs[4] = one
    with pytest.raises(ValueError, match=r"buffers\[1\] and buffers\[4\] overlap"):
        client.get_many_into(keys, bufs)
    pool = bytearray(64)
    view = memoryview(pool)
    with pytest.raises(ValueError, match=r"buffers\[0\] and buffers\[2\] overlap"):
        client.get_many_into(keys[:3], [view[0:8], view[32:40], view[7:15]])
    arr = np.zeros(64, dtype=np.uint8)
    with pytest.raises(ValueError, match=r"buffers\[0\] and buffers\[1\] overlap"):
        client.get_many_into(keys[:2], [arr[8:16], arr[0:9]])
    # Bytes are what count, whatever the views' item types.
    with pytest.raises(ValueError, match=r"buffers\[0\] and buffers\[2\] overlap"):
        client.get_many_into(keys[:3], [arr.view(np.uint32)[0:2], arr[8:16], arr[7:8]])
    assert one == bytearray(8) and not arr.any() and pool == bytearray(64), "nothing written"
    # Adjacent views and empty ones share no byte.
    assert client.get_many_into(keys[:2], [view[0:8], view[8:16]]) == [8, 8]
    assert pool[:16] == bytes([0]) * 8 + bytes([1]) * 8
    with pytest.raises(memkv.TooLargeError):
        client.get_many_into(keys[:2], [view[0:0], view[0:0]])
    # Values to store are only read: one buffer may serve several keys.
    client.put_many([("ov/same/a", one), ("ov/same/b", one), ("ov/same/c", view[4:12])])
    assert client.get_many(["ov/same/a", "ov/same/b"]) == [bytes(one)] * 2


def test_transport_shm_says_shared_memory_before_and_after_use(server: MemkvServer) -> None:
    """The test server is on this host and shares its arena: `shm` really moves values
    through it. Servers attach on first use, and under `shm` nothing else moves values."""
    with server.client(transport="shm") as c:
        assert c.transport == f"shm, not attached: {server.address}"
        c.put("shm/probe", b"x")
        assert c.transport == f"shm with {server.address}"


def test_transport_and_servers(client: memkv.Client, server: MemkvServer) -> None:
    assert client.servers == [server.address]
    # The server is on this host: once a value large enough to gain from it moves, values
    # move through its shared arena (smaller ones go over TCP and do not attach it).
    client.put("transport-probe", b"x")
    assert not client.transport.startswith("shm with")
    # That value starts the attach in the background and goes over TCP itself.
    client.put("transport-probe", bytes(256 << 10))
    deadline = time.monotonic() + 10
    while not client.transport.startswith("shm with") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.transport.startswith(f"shm with {server.address}; others tcp")


def test_shared_memory_moves_values_in_place(server: MemkvServer) -> None:
    with server.client(transport="shm") as c:
        value = bytes(range(256)) * 4096
        c.put("shm/big", value)
        out = bytearray(len(value) + 10)
        assert c.get_into("shm/big", out) == len(value)
        assert out[: len(value)] == value
        assert c.get_many(["shm/big", "shm/absent"]) == [value, None]
    with server.client(transport="tcp") as tcp:
        assert tcp.get("shm/big") == value


def test_closed_client(server: MemkvServer) -> None:
    c = server.client()
    c.close()
    with pytest.raises(memkv.Error, match="closed"):
        c.get("k")
    assert "closed" in repr(c)


def test_many_threads_share_one_client(client: memkv.Client) -> None:
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(50):
                key = f"thread/{t}/{i}"
                client.put(key, key.encode() * 100)
                assert client.get(key) == key.encode() * 100
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_register_keeps_the_buffer_and_moves_through_it(client: memkv.Client) -> None:
    """Over TCP registering is bookkeeping only; the data path must stay correct."""
    pool = np.zeros(1 << 20, dtype=np.uint8)
    client.register(pool)
    pool[:4096] = 7
    client.put_many([("pool/a", pool[:4096]), ("pool/b", pool[4096:8192])])
    assert client.get_many_into(["pool/a"], [pool[8192:16384]]) == [4096]
    assert (pool[8192:12288] == 7).all()
    with pytest.raises(BufferError, match="writable"):
        client.register(b"read-only")
