# SPDX-License-Identifier: Apache-2.0
"""What LMCache's multiprocess mode does with an L2 adapter, shared by the native_plugin and
plugin tests: build one from `--l2-adapter` JSON, store, lookup, load and evict through it."""

from __future__ import annotations

import argparse
import json
import os
import select
import time

import pytest
import torch
from conftest import TIMEOUT_MS, pattern
from lmcache.v1.distributed.api import ObjectKey
from lmcache.v1.distributed.l2_adapters.config import (
    add_l2_adapters_args,
    parse_args_to_l2_adapters_config,
)
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
from lmcache.v1.distributed.storage_controllers.eviction_controller import (
    L2AdapterEvictionState,
    L2EvictionController,
)
from lmcache.v1.memory_management import MemoryFormat, MemoryObj, MemoryObjMetadata, TensorMemoryObj

MODEL = "memkv-test/tiny"
DEADLINE_S = 10.0


def build_adapter(spec: dict, l1_memory_desc=None):
    """Exactly what `lmcache server --l2-adapter JSON` does with the JSON (the server passes
    its L1 arena's descriptor to every adapter it creates)."""
    parser = add_l2_adapters_args(argparse.ArgumentParser())
    config = parse_args_to_l2_adapters_config(parser.parse_args(["--l2-adapter", json.dumps(spec)]))
    (adapter_config,) = config.adapters
    return adapter_config, create_l2_adapter_from_registry(adapter_config, l1_memory_desc)


def key(i: int) -> ObjectKey:
    return ObjectKey(chunk_hash=ObjectKey.IntHash2Bytes(i), model_name=MODEL, kv_rank=0)


def key_string(i: int) -> str:
    # LMCache 0.5.6's wire format for native connectors: model@kv_rank(8 hex)@group@hash.
    return f"{MODEL}@00000000@0@{ObjectKey.IntHash2Bytes(i).hex()}"


def memory_obj(data: bytes) -> TensorMemoryObj:
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    meta = MemoryObjMetadata(
        shape=torch.Size([len(data)]),
        dtype=torch.uint8,
        address=0,
        phy_size=len(data),
        fmt=MemoryFormat.KV_2LTD,
        ref_count=1,
    )
    return TensorMemoryObj(raw, meta, parent_allocator=None)


def empty_obj(n: int) -> TensorMemoryObj:
    return memory_obj(bytes(n))


def wait_result(fd: int, fetch, deadline_s: float = DEADLINE_S):
    """Poll one of the adapter's eventfds until fetch() has the result; fail on timeout."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    end = time.monotonic() + deadline_s
    while True:
        result = fetch()
        if result is not None:
            return result
        left = end - time.monotonic()
        if left <= 0:
            pytest.fail(f"no completion within {deadline_s} s")
        if poller.poll(min(left, 0.2) * 1000):
            try:
                os.read(fd, 8)
            except BlockingIOError:
                pass


def store_objects(adp, ids: list[int], objs: list[MemoryObj], deadline_s: float = DEADLINE_S):
    task = adp.submit_store_task([key(i) for i in ids], objs)
    return wait_result(
        adp.get_store_event_fd(), lambda: adp.pop_completed_store_tasks().get(task), deadline_s
    )


def store(adp, ids: list[int], datas: list[bytes], deadline_s: float = DEADLINE_S):
    # LMCache hands connectors ctypes views that do not keep the MemoryObj alive; like
    # LMCache's L1, the caller holds the objects until the store completes.
    objs = [memory_obj(d) for d in datas]
    result = store_objects(adp, ids, objs, deadline_s)
    del objs
    return result


def lookup(adp, ids: list[int], deadline_s: float = DEADLINE_S) -> list[bool]:
    task = adp.submit_lookup_and_lock_task([key(i) for i in ids], {})
    bitmap = wait_result(
        adp.get_lookup_and_lock_event_fd(), lambda: adp.query_lookup_and_lock_result(task), deadline_s
    )
    return [bitmap.test(j) for j in range(len(ids))]


def load_into(adp, ids: list[int], objs: list[MemoryObj], deadline_s: float = DEADLINE_S) -> list[bool]:
    task = adp.submit_load_task([key(i) for i in ids], objs)
    bitmap = wait_result(adp.get_load_event_fd(), lambda: adp.query_load_result(task), deadline_s)
    return [bitmap.test(j) for j in range(len(ids))]


def load(adp, ids: list[int], sizes: list[int], deadline_s: float = DEADLINE_S):
    objs = [empty_obj(n) for n in sizes]
    hits = load_into(adp, ids, objs, deadline_s)
    return hits, [bytes(o.byte_array) for o in objs]


def check_eviction_deletes_oldest(server, adapter_config, adp, obj_size: int) -> None:
    """Store six objects into an adapter whose capacity is eight of them and whose LMCache
    eviction starts at 50%: LMCache's L2EvictionController must delete the oldest from memkv."""
    controller = L2EvictionController([L2AdapterEvictionState(0, adp, adapter_config.eviction_config)])
    controller.start()
    try:
        ids = list(range(100, 106))  # 6 objects = 75% of capacity
        for i in ids:  # one by one, so LRU order is the id order
            assert store(adp, [i], [pattern(f"e{i}", obj_size)]).is_successful()
        end = time.monotonic() + DEADLINE_S
        with server.client() as c:
            while time.monotonic() < end and all(c.exists_many([key_string(i) for i in ids])):
                time.sleep(0.1)
            present = c.exists_many([key_string(i) for i in ids])
    finally:
        controller.stop()
        adp.close()
    assert not all(present), "LMCache's L2 eviction never deleted anything from memkv"
    # LRU: what went is the oldest, what stayed is the newest.
    assert present == sorted(present), present
    assert present[-1]


def check_stopped_server_fails_fast(adp, server) -> None:
    assert store(adp, [30], [pattern("s30", 8192)]).is_successful()
    server.stop()
    t0 = time.monotonic()
    result = store(adp, [31], [pattern("s31", 8192)])
    assert not result.is_successful()
    assert lookup(adp, [30, 31]) == [False, False]
    hits, _ = load(adp, [30], [8192])
    # A load that could not complete is a miss, never a hit over stale buffer bytes.
    assert hits == [False]
    elapsed = time.monotonic() - t0
    assert elapsed < 3 * (TIMEOUT_MS / 1000) + 5, f"failures took {elapsed:.1f} s"
    t1 = time.monotonic()
    adp.close()
    assert time.monotonic() - t1 < 10
