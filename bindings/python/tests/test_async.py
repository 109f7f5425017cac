"""memkv.AsyncClient: the same operations as coroutines."""

import asyncio

import numpy as np
import pytest

import memkv
from memkv.testing import MemkvServer


def make(server: MemkvServer) -> memkv.AsyncClient:
    return memkv.AsyncClient(servers=[server.address], auth_key=server.auth_key, timeout_ms=5000)


async def test_single_key_operations(server: MemkvServer) -> None:
    async with make(server) as c:
        await c.put("a/1", b"one")
        assert await c.get("a/1") == b"one"
        assert await c.exists("a/1")
        buf = bytearray(8)
        assert await c.get_into("a/1", buf) == 3 and buf[:3] == b"one"
        assert await c.delete("a/1")
        assert await c.get("a/1") is None
        assert await c.get_into("a/1", buf) is None


async def test_batches_run_concurrently(server: MemkvServer) -> None:
    c = make(server)
    arrays = [np.full(65536, i, dtype=np.uint8) for i in range(16)]
    await asyncio.gather(*(c.put(f"a/c/{i}", a) for i, a in enumerate(arrays)))
    keys = [f"a/c/{i}" for i in range(16)]
    assert await c.exists_many(keys + ["a/c/none"]) == [True] * 16 + [False]
    outs = [np.empty(65536, dtype=np.uint8) for _ in keys]
    assert await c.get_many_into(keys, outs) == [65536] * 16
    assert all(np.array_equal(a, o) for a, o in zip(arrays, outs))
    assert (await c.get_many(keys[:2])) == [arrays[0].tobytes(), arrays[1].tobytes()]
    await c.put_many([("a/p/1", b"x"), ("a/p/2", b"y")])
    assert await c.delete_many(["a/p/1", "a/p/2", "a/p/3"]) == [True, True, False]
    c.close()


async def test_errors_are_raised_in_the_coroutine(server: MemkvServer) -> None:
    c = make(server)
    await c.put("a/ten", b"0123456789")
    with pytest.raises(memkv.TooLargeError, match="buffer of 2 bytes"):
        await c.get_into("a/ten", bytearray(2))
    bad = memkv.AsyncClient(servers=[server.address], auth_key="ee" * 32, timeout_ms=3000)
    with pytest.raises(memkv.AuthenticationError):
        await bad.get("a/ten")


async def test_get_many_into_refuses_overlapping_buffers(server: MemkvServer) -> None:
    async with make(server) as c:
        await c.put_many([("a/ov0", b"0" * 4), ("a/ov1", b"1" * 4)])
        pool = bytearray(16)
        view = memoryview(pool)
        with pytest.raises(ValueError, match=r"buffers\[0\] and buffers\[1\] overlap"):
            await c.get_many_into(["a/ov0", "a/ov1"], [pool, view[12:16]])
        assert pool == bytearray(16)
        assert await c.get_many_into(["a/ov0", "a/ov1"], [view[:4], view[4:8]]) == [4, 4]
        assert pool[:8] == b"00001111"


async def test_methods_are_coroutines_that_tasks_can_run(server: MemkvServer) -> None:
    """asyncio.create_task and TaskGroup take coroutines only: each method is one."""
    async with make(server) as c:
        await asyncio.create_task(c.put("task/k", b"v"))
        assert await asyncio.create_task(c.get("task/k")) == b"v"
        async with asyncio.TaskGroup() as tg:
            exists = tg.create_task(c.exists_many(["task/k"]))
            tg.create_task(c.put("task/k2", b"w"))
            tg.create_task(c.put_many([("task/k3", b"x")]))
        assert exists.result() == [True]
        assert await asyncio.create_task(c.get_many(["task/k3"])) == [b"x"]
        assert await asyncio.create_task(c.exists("task/k2"))
        assert await asyncio.create_task(c.delete("task/k3"))
        deleted = await asyncio.create_task(c.delete_many(["task/k", "task/k2"]))
        assert deleted == [True, True]


async def test_argument_errors_are_raised_when_awaited(server: MemkvServer) -> None:
    async with make(server) as c:
        put = c.put(7, b"v")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="key must be str or bytes"):
            await put
        with pytest.raises(TypeError, match=r"keys\[1\]"):
            await c.get_many(["a", None])  # type: ignore[list-item]
