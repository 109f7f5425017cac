# SPDX-License-Identifier: Apache-2.0
"""In-process mode: LMCache's StorageManager loads MemKVStorageBackend through
`storage_plugins` / storage_plugin_launcher from a YAML config, and its calls reach a
real memkv server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import memkv
import pytest
import torch
from conftest import TIMEOUT_MS, frozen, pattern
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.event_manager import EventManager
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend import CreateStorageBackends
from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface
from lmcache.v1.storage_backend.storage_manager import StorageManager

from memkv_lmcache.backend import MemKVStorageBackend

MODEL = "memkv-test/tiny"
CHUNK = 16  # tokens per chunk; 2 layers x 2 (K,V) x 16 tokens x 128 x bf16 = 16 KiB
DEADLINE_S = 10.0

CONFIG_YAML = """\
chunk_size: {chunk}
local_cpu: true
max_local_cpu_size: 0.02
storage_plugins: [memkv]
extra_config:
  storage_plugin.memkv.module_path: memkv_lmcache.backend
  storage_plugin.memkv.class_name: MemKVStorageBackend
  storage_plugin.memkv.servers: "{servers}"
  storage_plugin.memkv.auth_key: "{auth_key}"
  storage_plugin.memkv.transport: tcp
  storage_plugin.memkv.timeout_ms: {timeout_ms}
"""


def write_config(tmp_path: Path, srv) -> Path:
    path = tmp_path / "lmcache.yaml"
    path.write_text(
        CONFIG_YAML.format(chunk=CHUNK, servers=srv.address, auth_key=srv.auth_key, timeout_ms=TIMEOUT_MS)
    )
    return path


def metadata(role: str | None = None) -> LMCacheMetadata:
    return LMCacheMetadata(
        role=role,
        model_name=MODEL,
        world_size=1,
        local_world_size=1,
        worker_id=0,
        local_worker_id=0,
        kv_dtype=torch.bfloat16,
        kv_shape=(2, 2, CHUNK, 4, 32),
        chunk_size=CHUNK,
    )


def key(i: int) -> CacheEngineKey:
    return CacheEngineKey(model_name=MODEL, world_size=1, worker_id=0, chunk_hash=i, dtype=torch.bfloat16)


@pytest.fixture
def manager(server, tmp_path):
    sm = StorageManager(
        LMCacheEngineConfig.from_file(str(write_config(tmp_path, server))), metadata(), EventManager()
    )
    yield sm
    sm.close()


def backend_of(sm: StorageManager) -> MemKVStorageBackend:
    backend = sm.storage_backends.get("memkv")
    assert backend is not None, f"storage_plugin_launcher did not load memkv: {list(sm.storage_backends)}"
    return backend


def chunk(sm: StorageManager, seed: str, tokens: int = CHUNK):
    """A MemoryObj from LMCache's own allocator, filled with known bytes."""
    shape = sm.metadata.get_shapes(tokens)[0]
    obj = sm.allocate(shape, torch.bfloat16)
    assert obj is not None
    view = obj.byte_array.cast("B")  # LMCache's view has ctypes format "<B"
    view[:] = pattern(seed, len(view))
    return obj


def put_and_wait(sm: StorageManager, ids: list[int], tokens: int = CHUNK) -> None:
    """StorageManager.batched_put (LocalCPUBackend + memkv), then wait for memkv's puts."""
    sm.batched_put([key(i) for i in ids], [chunk(sm, f"c{i}", tokens) for i in ids])
    backend = backend_of(sm)
    end = time.monotonic() + DEADLINE_S
    while any(backend.exists_in_put_tasks(key(i)) for i in ids):
        assert time.monotonic() < end, "memkv puts did not finish"
        time.sleep(0.02)
    assert backend.stats["put_failures"] == 0, dict(backend.stats)


def assert_chunk(obj, seed: str, tokens: int = CHUNK) -> None:
    """Check a MemoryObj a get returned, then give it back (the caller owns it)."""
    assert obj is not None
    assert obj.get_shape()[2] == tokens
    assert bytes(obj.byte_array) == pattern(seed, len(obj.byte_array))
    assert obj.tensor.dtype == torch.bfloat16
    obj.ref_count_down()


def test_launcher_builds_backend_and_registers_cpu_arena(manager):
    backend = backend_of(manager)
    assert isinstance(backend, MemKVStorageBackend)
    assert isinstance(backend, StoragePluginInterface)
    assert backend.get_allocator_backend() is manager.storage_backends["LocalCPUBackend"]
    arena = manager.storage_backends["LocalCPUBackend"].memory_allocator.buffer
    assert backend.registered_bytes == arena.numel() > 0


def test_put_contains_prefix_contains_and_miss(manager):
    put_and_wait(manager, [1, 2, 3])
    assert manager.contains(key(2), search_range=["memkv"]) == "memkv"
    assert manager.contains(key(99), search_range=["memkv"]) is None
    hits, mapping = manager.batched_contains([key(1), key(2), key(99), key(3)], search_range=["memkv"])
    assert hits == 2 and mapping == {"memkv": [key(1), key(2)]}
    backend = backend_of(manager)
    count = asyncio.run_coroutine_threadsafe(
        backend.batched_async_contains("req-1", [key(1), key(2), key(3), key(98)]), manager.loop
    ).result(DEADLINE_S)
    assert count == 3


def test_blocking_gets_restore_bytes(manager):
    put_and_wait(manager, [4, 5])
    assert_chunk(manager.get(key(4), location="memkv"), "c4")
    objs = manager.batched_get([key(4), key(5)], location="memkv")
    assert_chunk(objs[0], "c4")
    assert_chunk(objs[1], "c5")
    assert manager.get(key(97), location="memkv") is None
    assert backend_of(manager).get_blocking(key(97)) is None


def test_partial_last_chunk_comes_back_with_its_token_count(manager):
    put_and_wait(manager, [6], tokens=5)
    assert_chunk(manager.get(key(6), location="memkv"), "c6", tokens=5)


def test_non_blocking_gets(manager):
    put_and_wait(manager, [7, 8, 9])
    future = manager.get_non_blocking(key(7), location="memkv")
    assert future is not None
    assert_chunk(future.result(DEADLINE_S), "c7")
    assert backend_of(manager).get_non_blocking(key(96)).result(DEADLINE_S) is None
    # Prefetch path: the loaded prefix up to the first gap.
    objs = asyncio.run_coroutine_threadsafe(
        backend_of(manager).batched_get_non_blocking("req-2", [key(8), key(9), key(95), key(7)]), manager.loop
    ).result(DEADLINE_S)
    assert len(objs) == 2
    assert_chunk(objs[0], "c8")
    assert_chunk(objs[1], "c9")


def test_one_failed_key_does_not_lose_the_rest_of_a_batched_get(manager, server):
    put_and_wait(manager, [40, 41, 42])
    backend = backend_of(manager)
    # A value larger than a chunk fails its own read (TooLargeError) and nothing else.
    with memkv.Client(servers=[server.address], auth_key=server.auth_key) as client:
        client.put(key(41).to_string(), bytes(2 * backend._full_chunk_bytes))
    objs = manager.batched_get([key(40), key(41), key(42)], location="memkv")
    assert objs[1] is None
    assert_chunk(objs[0], "c40")
    assert_chunk(objs[2], "c42")
    assert backend.stats["get_failures"] == 1, dict(backend.stats)
    # Prefetch counts the prefix up to the first gap.
    objs = asyncio.run_coroutine_threadsafe(
        backend.batched_get_non_blocking("req-3", [key(40), key(41), key(42)]), manager.loop
    ).result(DEADLINE_S)
    assert len(objs) == 1
    assert_chunk(objs[0], "c40")


def test_pin_unpin_remove(manager, server):
    put_and_wait(manager, [10, 11])
    backend = backend_of(manager)
    assert backend.contains(key(10), pin=True)
    assert backend.is_pinned(key(10))
    assert not backend.remove(key(10), force=False)  # pinned
    assert backend.unpin(key(10))
    assert not backend.unpin(key(10))
    assert backend.remove(key(10), force=False)
    assert manager.remove(key(11), locations=["memkv"]) == 1
    assert manager.contains(key(10), search_range=["memkv"]) is None
    with server.client() as c:
        assert c.exists_many([key(10).to_string(), key(11).to_string()]) == [False, False]
    assert not backend.pin(key(10))


def test_second_process_loads_what_first_stored(manager, server, tmp_path):
    put_and_wait(manager, [12, 13])
    script = Path(__file__).with_name("second_instance.py")
    args = {"config": str(write_config(tmp_path, server)), "ids": [12, 13, 94], "seeds": ["c12", "c13", None]}
    out = subprocess.run(
        [sys.executable, str(script), "storage_plugin", "-", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "hit hit miss", out.stdout


def test_server_stopped_mid_run_turns_into_misses_and_failed_puts(manager, server):
    put_and_wait(manager, [14])
    backend = backend_of(manager)
    server.stop()
    t0 = time.monotonic()
    assert manager.contains(key(14), search_range=["memkv"]) is None
    assert manager.get(key(14), location="memkv") is None
    assert manager.get_non_blocking(key(14), location="memkv").result(DEADLINE_S) is None
    obj = chunk(manager, "c15")
    futures = backend.batched_submit_put_task([key(15)], [obj])
    obj.ref_count_down()  # the backend holds its own reference until the put ends
    assert futures is not None
    with pytest.raises(memkv.Error):
        futures[0].result(DEADLINE_S)
    assert not backend.exists_in_put_tasks(key(15))
    elapsed = time.monotonic() - t0
    assert elapsed < 4 * (TIMEOUT_MS / 1000) + 5, f"failures took {elapsed:.1f} s"
    for what in ("contains_failures", "get_failures", "put_failures"):
        assert backend.stats[what] > 0, dict(backend.stats)


def test_frozen_server_costs_one_deadline_per_call_not_a_hang(manager, server):
    put_and_wait(manager, [16])
    backend = backend_of(manager)
    limit = TIMEOUT_MS / 1000 + 3
    with frozen(server):
        for name, call in [
            ("contains", lambda: manager.contains(key(16), search_range=["memkv"])),
            ("get", lambda: manager.get(key(16), location="memkv")),
            ("batched_contains", lambda: manager.batched_contains([key(16)], search_range=["memkv"])[0]),
        ]:
            t0 = time.monotonic()
            assert call() in (None, 0), name
            assert time.monotonic() - t0 < limit, f"{name} took {time.monotonic() - t0:.1f} s"
        obj = chunk(manager, "c17")
        futures = backend.batched_submit_put_task([key(17)], [obj])
        obj.ref_count_down()  # the backend holds its own reference until the put ends
        with pytest.raises(memkv.Error):
            futures[0].result(limit)
    # Once the server answers again, so does the backend.
    assert_chunk(manager.get(key(16), location="memkv"), "c16")


def test_puts_hold_their_objects_until_done_and_release_them(manager):
    backend = backend_of(manager)
    objs = [chunk(manager, f"r{i}") for i in range(3)]
    futures = backend.batched_submit_put_task([key(30 + i) for i in range(3)], objs)
    for f in futures:
        f.result(DEADLINE_S)
    assert [o.meta.ref_count for o in objs] == [1, 1, 1]  # only the test's own reference is left
    assert backend.batched_contains([key(30), key(31), key(32)]) == 3
    for o in objs:
        o.ref_count_down()


def test_concurrent_puts_and_gets_from_many_threads(manager):
    backend = backend_of(manager)
    errors: list[str] = []

    def worker(t: int) -> None:
        ids = [1000 + t * 100 + i for i in range(8)]
        objs = [chunk(manager, f"t{i}") for i in ids]
        for f in backend.batched_submit_put_task([key(i) for i in ids], objs) or []:
            f.result(DEADLINE_S)
        for o in objs:
            o.ref_count_down()
        for i, obj in zip(ids, backend.batched_get_blocking([key(i) for i in ids]), strict=True):
            if obj is None or bytes(obj.byte_array) != pattern(f"t{i}", len(obj.byte_array)):
                errors.append(f"thread {t} key {i}")
            if obj is not None:
                obj.ref_count_down()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not any(th.is_alive() for th in threads)
    assert errors == []


def hold(backend, method: str, monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Makes ``backend.<method>`` wait until released (a slow save or load, as a test double
    of a slow server): returns (started, release)."""
    release = threading.Event()
    started = threading.Event()
    real = getattr(backend, method)

    def held(*args, **kwargs):
        started.set()
        release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(backend, method, held)
    return started, release


def test_lookups_and_gets_are_answered_while_every_put_thread_is_busy(manager, monkeypatch):
    put_and_wait(manager, [50])
    backend = backend_of(manager)
    # A slow save, held until released: more batches than io_threads (4), so whatever
    # the split, every put thread is busy and more puts are queued behind them.
    started, release = hold(backend, "_put_many", monkeypatch)
    held_ids = list(range(60, 68))
    futures = []
    try:
        for i in held_ids:
            obj = chunk(manager, f"c{i}")
            futures += backend.batched_submit_put_task([key(i)], [obj]) or []
            obj.ref_count_down()  # the backend holds its own reference until the put ends
        assert len(futures) == len(held_ids)
        assert started.wait(DEADLINE_S)
        limit = 5.0
        t0 = time.monotonic()
        hits = asyncio.run_coroutine_threadsafe(
            backend.batched_async_contains("req-4", [key(50), key(60)]), manager.loop
        ).result(limit)
        assert hits == 1  # key 60's put is still held
        objs = asyncio.run_coroutine_threadsafe(
            backend.batched_get_non_blocking("req-4", [key(50)]), manager.loop
        ).result(limit)
        assert len(objs) == 1
        assert_chunk(objs[0], "c50")
        assert_chunk(backend.get_non_blocking(key(50)).result(limit), "c50")
        assert time.monotonic() - t0 < limit
        assert not any(f.done() for f in futures)
    finally:
        release.set()
    for f in futures:
        f.result(DEADLINE_S)
    assert not any(backend.exists_in_put_tasks(key(i)) for i in held_ids)
    assert backend.batched_contains([key(i) for i in held_ids]) == len(held_ids)
    assert backend.stats["put_failures"] == 0, dict(backend.stats)


def test_lookups_are_answered_while_every_get_thread_is_busy(manager, monkeypatch):
    """Lookups shared the get lane: a burst of loads (prefetches of long prompts) made the next
    request's lookup wait behind them."""
    put_and_wait(manager, [54])
    backend = backend_of(manager)
    started, release = hold(backend, "_get_many", monkeypatch)
    gets = []
    try:
        for _ in range(6):  # more than io_threads (4): every get thread is busy
            gets.append(backend.get_non_blocking(key(54)))
        assert started.wait(DEADLINE_S)
        limit = 5.0
        hits = asyncio.run_coroutine_threadsafe(
            backend.batched_async_contains("req-6", [key(54), key(55)]), manager.loop
        ).result(limit)
        assert hits == 1
        assert not any(g.done() for g in gets)
    finally:
        release.set()
    for g in gets:
        obj = g.result(DEADLINE_S)
        assert_chunk(obj, "c54")
        obj.ref_count_down()


def test_calls_racing_close_are_misses_not_exceptions(manager):
    put_and_wait(manager, [52])
    backend = backend_of(manager)

    def calls():
        hits = asyncio.run_coroutine_threadsafe(
            backend.batched_async_contains("req-5", [key(52)]), manager.loop
        ).result(DEADLINE_S)
        objs = asyncio.run_coroutine_threadsafe(
            backend.batched_get_non_blocking("req-5", [key(52)]), manager.loop
        ).result(DEADLINE_S)
        obj = chunk(manager, "c53")
        put = backend.batched_submit_put_task([key(53)], [obj])
        assert obj.meta.ref_count == 1  # not held by a put that will never run
        obj.ref_count_down()
        return hits, objs, backend.get_non_blocking(key(52)), put

    # A close() that has shut the lanes down after a call checked it was still open: a
    # lookup must still answer LMCache (which then answers its scheduler), not raise.
    for executor in (backend._put_executor, backend._read_executor, backend._lookup_executor):
        executor.shutdown(wait=True)
    assert calls() == (0, [], None, None)
    assert not backend.exists_in_put_tasks(key(53))
    backend.close()
    assert calls() == (0, [], None, None)


def test_scheduler_role_has_no_cpu_memory_but_answers_lookups(manager, server, tmp_path):
    # vLLM's scheduler process builds the backends with role "scheduler": no
    # LocalCPUBackend, so lookups work and gets are misses rather than errors.
    put_and_wait(manager, [18])
    config = LMCacheEngineConfig.from_file(str(write_config(tmp_path, server)))
    loop = asyncio.new_event_loop()
    backends = CreateStorageBackends(config, metadata(role="scheduler"), loop, dst_device="cpu")
    try:
        backend = backends["memkv"]
        assert "LocalCPUBackend" not in backends
        assert backend.batched_contains([key(18), key(93)]) == 1
        assert backend.get_blocking(key(18)) is None
        assert backend.registered_bytes == 0
    finally:
        for b in backends.values():
            b.close()
        loop.close()


def test_settings_left_out_come_from_memkv_environment(server, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMKV_SERVERS", server.address)
    monkeypatch.setenv("MEMKV_AUTH_KEY", server.auth_key)
    monkeypatch.setenv("MEMKV_TRANSPORT", "tcp")
    config = LMCacheEngineConfig.from_file(str(write_config(tmp_path, server)))
    for name in ("servers", "auth_key", "transport"):
        del config.extra_config[f"storage_plugin.memkv.{name}"]
    sm = StorageManager(config, metadata(), EventManager())
    try:
        put_and_wait(sm, [19])
        assert_chunk(sm.get(key(19), location="memkv"), "c19")
    finally:
        sm.close()


def test_unknown_setting_is_refused_by_name(server, tmp_path):
    config = LMCacheEngineConfig.from_file(str(write_config(tmp_path, server)))
    config.extra_config["storage_plugin.memkv.server"] = server.address
    with pytest.raises(TypeError, match=r"storage_plugin\.memkv\.server\b.*servers"):
        MemKVStorageBackend(
            config=config, metadata=metadata(), local_cpu_backend=None, loop=None, dst_device="cpu"
        )
