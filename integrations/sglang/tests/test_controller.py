# SPDX-License-Identifier: Apache-2.0
"""The backend inside SGLang's own HiCacheController, on CPU.

The controller is what a serving SGLang runs: attach_storage_backend builds the storage
config (model name, MLA or not, ranks), loads the backend through the dynamic factory,
registers the host pool, and picks the plain or zero-copy page functions from
interface_v1. Its backup thread writes pages (write_storage), its prefetch threads count
hits (batch_exists) and load them (batch_get / batch_get_v1). Page hashes are SGLang's own
(get_storage_hash_str, a C++ extension torch builds on first use).

What the tests do by hand is the scheduler's part: allocate host slots for a hit and queue
the operation, as HiRadixCache does.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch
from conftest import (
    LAYERS,
    PAGE_SIZE,
    dynamic_extra,
    fill_mamba,
    fill_random,
    mamba_bytes,
    mamba_host_pool,
    page_bytes,
)
from memkv.testing import MemkvServer
from sglang.srt.managers.cache_controller import HiCacheController
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle
from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
from sglang.srt.mem_cache.pool_host import HostPoolGroup, PoolEntry
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
from sglang.srt.mem_cache.utils import get_storage_hash_str
from sglang.srt.runtime_context import get_parallel

from memkv_sglang.backend import MemKVHiCacheStorage

WAIT_S = 30
DEVICE_TOKENS = 256


def mha_pools(dtype):
    """An MHA device KV pool on CPU and its page-first host pool, as SGLang pairs them."""
    device = MHATokenToKVPool(
        DEVICE_TOKENS, PAGE_SIZE, dtype, 2, 8, LAYERS, "cpu", False,
        v_head_dim=8, start_layer=0, end_layer=LAYERS - 1,
    )
    host = MHATokenToKVPoolHost(
        device.get_device_pool_infos()[0].buffer_info, 2.0, 0, PAGE_SIZE, "page_first",
        pin_memory=False, device_capacity_tokens=device.size,
        start_layer=device.start_layer, end_layer=device.end_layer,
        write_back_staging=device.hicache_write_back_staging,
    )
    return device, host


def engine(kind: str, extra: dict, model_name: str):
    """One single-rank SGLang engine's cache controller with memkv attached."""
    dtype = torch.bfloat16
    if kind == "mla":
        device = MLATokenToKVPool(
            DEVICE_TOKENS, PAGE_SIZE, dtype, 16, 8, LAYERS, "cpu", False,
            start_layer=0, end_layer=LAYERS - 1,
        )
        host = MLATokenToKVPoolHost(
            device.get_device_pool_infos()[0].buffer_info, 2.0, 0, PAGE_SIZE, "page_first",
            pin_memory=False, device_capacity_tokens=device.size,
            start_layer=device.start_layer, end_layer=device.end_layer,
            target_layer_num=LAYERS,
        )
    else:
        device, host = mha_pools(dtype)
    allocator = PagedTokenToKVPoolAllocator(DEVICE_TOKENS, PAGE_SIZE, dtype, "cpu", device, False)
    # The scheduler publishes its ranks before building the controller; one rank here.
    with get_parallel().override(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_dcp_size=1, attn_dcp_rank=0
    ):
        cc = HiCacheController(
            allocator, host, PAGE_SIZE, None, threading.Event(),
            io_backend="direct", storage_backend="dynamic", model_name=model_name,
            storage_backend_extra_config=dict(extra),
        )
    return cc, host


@pytest.fixture
def engines():
    made = []

    def make(kind, extra, model_name):
        cc, host = engine(kind, extra, model_name)
        made.append(cc)
        return cc, host

    yield make
    for cc in made:
        cc.detach_storage_backend()


def backup(cc, host_indices, tokens) -> int:
    hashes = get_storage_hash_str(tokens, None, page_size=PAGE_SIZE)
    op_id = cc.write_storage(host_indices, tokens, hash_value=hashes)
    op = cc.ack_backup_queue.get(timeout=WAIT_S)
    assert op.id == op_id
    return op.completed_tokens


def prefetch(cc, host, tokens, rid="req"):
    """Hit query, then the load into freshly allocated host slots; returns
    (hit tokens, loaded tokens, host indices)."""
    cc.prefetch(rid, tokens)
    op = cc.prefetch_hit_queue.get(timeout=WAIT_S)
    hit = op.storage_hit_count
    if hit == 0:
        return 0, 0, None
    op.host_indices = host.alloc(hit)
    cc.prefetch_buffer.put(op)
    loaded = 0
    deadline = time.monotonic() + WAIT_S
    while True:
        ack = cc.ack_prefetch_queue.get(timeout=max(deadline - time.monotonic(), 0.1))
        if ack.completed_req:
            return hit, loaded, op.host_indices
        loaded = ack.completed_tokens


@pytest.mark.parametrize(
    "kind,v1", [("mha", True), ("mha", False), ("mla", True)], ids=["mha-v1", "mha-plain", "mla-v1"]
)
def test_one_engine_stores_another_loads(server, engines, model_name, kind, v1):
    extra = dynamic_extra([server.address], server.auth_key, v1=v1)
    writer, host_a = engines(kind, extra, model_name)
    assert isinstance(writer.storage_backend, MemKVHiCacheStorage)
    assert writer.storage_config.is_mla_model == (kind == "mla")
    expected_func = "_page_set_zero_copy" if v1 else "_generic_page_set"
    assert writer.page_set_func.__name__ == expected_func

    pages = 5
    tokens = list(range(7000, 7000 + pages * PAGE_SIZE))
    src = host_a.alloc(len(tokens))
    fill_random(host_a, src, seed=42)
    assert backup(writer, src, tokens) == len(tokens)

    # The objects are under SGLang's real page hashes, in the documented key layout.
    hashes = get_storage_hash_str(tokens, None, page_size=PAGE_SIZE)
    ns = writer.storage_backend.keys.namespace
    raw = server.client()
    if not v1:
        names = [f"{ns}_{h}_0_page" for h in hashes]
    elif kind == "mla":
        names = [f"{ns}_{h}_k" for h in hashes]
    else:
        names = [f"{ns}_{h}_0_{x}" for h in hashes for x in ("k", "v")]
    assert raw.exists_many(names) == [True] * len(names)
    raw.close()

    # Another engine, the same prompt plus two pages nobody stored.
    reader, host_b = engines(kind, extra, model_name)
    more = list(range(9000, 9000 + 2 * PAGE_SIZE))
    hit, loaded, dst = prefetch(reader, host_b, tokens + more)
    assert hit == len(tokens) and loaded == len(tokens)
    assert page_bytes(host_b, dst) == page_bytes(host_a, src)

    # A different model shares nothing.
    other, host_c = engines(kind, extra, model_name + "-other")
    assert prefetch(other, host_c, tokens)[0] == 0


def test_stopped_server_is_a_miss_for_the_controller(engines, model_name):
    with MemkvServer(max_size="64 MiB") as srv:
        extra = dynamic_extra([srv.address], srv.auth_key, v1=True)
        writer, host = engines("mha", extra, model_name)
        tokens = list(range(100, 100 + 3 * PAGE_SIZE))
        src = host.alloc(len(tokens))
        fill_random(host, src, seed=1)
        assert backup(writer, src, tokens) == len(tokens)
        assert prefetch(writer, host, tokens, rid="before")[0] == len(tokens)

        srv.stop()
        start = time.monotonic()
        assert prefetch(writer, host, tokens, rid="after")[0] == 0
        assert time.monotonic() - start < 15
        # A backup to the stopped server is reported as not done, not raised.
        assert backup(writer, src, list(range(500, 500 + 3 * PAGE_SIZE))) == 0


# ---- a hybrid (KV + Mamba state) engine: SGLang's HybridCacheController ----------------


def hybrid_engine(extra: dict, model_name: str):
    """One single-rank hybrid engine (Qwen3-Next style: full-attention KV plus Mamba state)
    with memkv attached by SGLang's HybridCacheController."""
    dtype = torch.bfloat16
    device, kv = mha_pools(dtype)
    mamba = mamba_host_pool()
    group = HostPoolGroup([
        PoolEntry(PoolName.KV, kv, device, lambda i: i, is_primary_index_anchor=True),
        PoolEntry(PoolName.MAMBA, mamba, None, lambda i: i),
    ])
    allocator = PagedTokenToKVPoolAllocator(DEVICE_TOKENS, PAGE_SIZE, dtype, "cpu", device, False)
    with get_parallel().override(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_dcp_size=1, attn_dcp_rank=0
    ):
        cc = HybridCacheController(
            allocator, group, PAGE_SIZE, None, threading.Event(),
            io_backend="direct", storage_backend="dynamic", model_name=model_name,
            storage_backend_extra_config=dict(extra),
        )
    return cc, kv, mamba


def hybrid_backup(cc, kv_indices, tokens, page_hashes, mamba_slot):
    """Back up a node: its KV pages and the Mamba state at its last page, as the cache's
    Mamba component hands them over (one trailing key)."""
    state = PoolTransfer(
        PoolName.MAMBA, host_indices=mamba_slot, keys=page_hashes[-1:],
        hit_policy=PoolHitPolicy.TRAILING_PAGES,
    )
    op_id = cc.write_storage(kv_indices, tokens, hash_value=page_hashes, extra_pools=[state])
    op = cc.ack_backup_queue.get(timeout=WAIT_S)
    assert op.id == op_id
    return op.completed_tokens, op.pool_storage_result.extra_pool_hit_pages


def hybrid_prefetch(cc, kv, mamba, tokens, rid):
    """The hit query and the load of KV pages plus the trailing Mamba state; returns
    (hit tokens, loaded tokens, Mamba pages loaded, KV host indices, Mamba slot)."""
    state = PoolTransfer(
        PoolName.MAMBA, keys=["__placeholder__"], hit_policy=PoolHitPolicy.TRAILING_PAGES
    )
    cc.prefetch(CacheRequestHandle(rid, 0), tokens, extra_pools=[state])
    op = cc.prefetch_hit_queue.get(timeout=WAIT_S)
    hit = op.storage_hit_count
    if hit == 0:
        return 0, 0, 0, None, None
    # The scheduler's part: host slots for the hit and for the state.
    op.host_indices = kv.alloc(hit)
    state.host_indices = mamba.alloc(1)
    cc.prefetch_buffer.put(op)
    loaded, states = 0, 0
    deadline = time.monotonic() + WAIT_S
    while True:
        ack = cc.ack_prefetch_queue.get(timeout=max(deadline - time.monotonic(), 0.1))
        if ack.pool_hits is not None:
            states = ack.pool_hits[PoolName.MAMBA.value]
        if ack.completed_req:
            return hit, loaded, states, op.host_indices, state.host_indices
        if ack.completed_tokens is not None:
            loaded = ack.completed_tokens


@pytest.mark.parametrize("v1", [True, False], ids=["kv-v1", "kv-plain"])
def test_hybrid_engine_restores_kv_and_mamba_state(server, model_name, v1):
    """The KV pool moves by the interface interface_v1 picks, the Mamba state by v2."""
    extra = dynamic_extra([server.address], server.auth_key, v1=v1)
    made = []
    try:
        writer, kv_a, mamba_a = hybrid_engine(extra, model_name)
        made.append(writer)
        assert isinstance(writer.storage_backend, MemKVHiCacheStorage)
        assert set(writer.storage_backend._side_pools) == {"mamba"}

        # Two nodes of one prompt: pages 0-2 with a state at page 3, pages 3-4 with one at 5.
        tokens = list(range(3000, 3000 + 5 * PAGE_SIZE))
        page_hashes = get_storage_hash_str(tokens, None, page_size=PAGE_SIZE)
        src = kv_a.alloc(len(tokens))
        fill_random(kv_a, src, seed=21)
        states = mamba_a.alloc(2)
        fill_mamba(mamba_a, states, seed=22)
        cut = 3 * PAGE_SIZE
        assert hybrid_backup(
            writer, src[:cut], tokens[:cut], page_hashes[:3], states[:1]
        ) == (cut, {PoolName.MAMBA: 1})
        assert hybrid_backup(
            writer, src[cut:], tokens[cut:], page_hashes[3:], states[1:]
        ) == (len(tokens) - cut, {PoolName.MAMBA: 1})

        # Another engine, the same prompt plus a page nobody stored: the whole stored span
        # loads, KV pages and the state at its end, bit-exact.
        reader, kv_b, mamba_b = hybrid_engine(extra, model_name)
        made.append(reader)
        more = list(range(9000, 9000 + PAGE_SIZE))
        hit, loaded, n_states, dst, slot = hybrid_prefetch(
            reader, kv_b, mamba_b, tokens + more, "full"
        )
        assert (hit, loaded, n_states) == (len(tokens), len(tokens), 1)
        assert page_bytes(kv_b, dst) == page_bytes(kv_a, src)
        assert mamba_bytes(mamba_b, slot) == mamba_bytes(mamba_a, states[1:])

        # Without the state at page 5 the usable prefix is the first node: 3 pages, and
        # the state at page 3.
        raw = server.client()
        backend = writer.storage_backend
        gone = backend._side_names(backend._side(PoolName.MAMBA), page_hashes[4:])
        assert raw.delete_many(gone) == [True] * len(gone)
        raw.close()
        hit, loaded, n_states, dst, slot = hybrid_prefetch(
            reader, kv_b, mamba_b, tokens, "first-node"
        )
        assert (hit, loaded, n_states) == (cut, cut, 1)
        assert page_bytes(kv_b, dst) == page_bytes(kv_a, src[:cut])
        assert mamba_bytes(mamba_b, slot) == mamba_bytes(mamba_a, states[:1])
    finally:
        for cc in made:
            cc.detach_storage_backend()
