# SPDX-License-Identifier: Apache-2.0
"""The zero-copy interface (interface_v1) over SGLang's real MHA and MLA host KV pools."""

from __future__ import annotations

import pytest
import torch
from conftest import fill_random, hashes, mha_host_pool, mla_host_pool, page_bytes


def object_size(pool, mla: bool) -> int:
    ptrs, sizes = pool.get_page_buffer_meta(torch.arange(pool.page_size))
    return sum(sizes) // (1 if mla else 2)


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct", "layer_first"])
def test_mha_roundtrip_between_two_engines(make_backend, server, layout):
    pool = mha_host_pool(layout)
    writer = make_backend(host_pool=pool, v1=True)
    n = 4
    src = pool.alloc(n * pool.page_size)
    fill_random(pool, src, seed=11)
    keys = hashes(n)
    assert writer.batch_exists(keys) == 0
    assert writer.batch_set_v1(keys, src) == [True] * n
    assert writer.batch_exists(keys) == n

    # MHA layout: one K and one V object per page for this TP rank.
    ns = writer.keys.namespace
    assert "tp1" in ns and layout in ns and "bfloat16" in ns
    raw = server.client()
    size = object_size(pool, mla=False)
    for k in keys:
        for half in ("k", "v"):
            value = raw.get(f"{ns}_{k}_0_{half}")
            assert value is not None and len(value) == size
    raw.close()

    # A second engine: its own pool, its own client, pages loaded into other slots.
    pool2 = mha_host_pool(layout)
    reader = make_backend(host_pool=pool2, v1=True)
    pool2.alloc(pool2.page_size)  # shift the destination slots
    dst = pool2.alloc(n * pool2.page_size)
    assert reader.batch_exists(keys) == n
    assert reader.batch_get_v1(keys, dst) == [True] * n
    assert page_bytes(pool2, dst) == page_bytes(pool, src)


def test_mha_prefix_with_hole_and_miss(make_backend):
    pool = mha_host_pool()
    backend = make_backend(host_pool=pool, v1=True)
    src = pool.alloc(4 * pool.page_size)
    fill_random(pool, src, seed=3)
    keys = hashes(4)
    ps = pool.page_size
    # Store pages 0, 1 and 3; page 2 is the hole.
    assert backend.batch_set_v1(keys[:2], src[: 2 * ps]) == [True, True]
    assert backend.batch_set_v1(keys[3:], src[3 * ps :]) == [True]
    assert backend.batch_exists(keys) == 2
    assert backend.batch_exists(keys[3:]) == 1

    dst = pool.alloc(4 * ps)
    before = page_bytes(pool, dst)
    assert backend.batch_get_v1(keys, dst) == [True, True, False, True]
    after = page_bytes(pool, dst)
    assert after[2] == before[2]  # the miss left its slot alone
    assert [after[i] for i in (0, 1, 3)] == [page_bytes(pool, src)[i] for i in (0, 1, 3)]


def test_mha_half_a_page_is_a_miss(make_backend, server):
    pool = mha_host_pool()
    backend = make_backend(host_pool=pool, v1=True)
    src = pool.alloc(2 * pool.page_size)
    fill_random(pool, src, seed=5)
    keys = hashes(2)
    assert backend.batch_set_v1(keys, src) == [True, True]
    raw = server.client()
    assert raw.delete(f"{backend.keys.namespace}_{keys[1]}_0_v")
    raw.close()
    assert backend.batch_exists(keys) == 1
    assert backend.batch_get_v1(keys, pool.alloc(2 * pool.page_size)) == [True, False]


def test_value_of_another_size_is_never_loaded(make_backend, server):
    pool = mha_host_pool()
    backend = make_backend(host_pool=pool, v1=True)
    [k] = hashes(1)
    raw = server.client()
    size = object_size(pool, mla=False)
    ns = backend.keys.namespace
    raw.put(f"{ns}_{k}_0_k", b"\x01" * (size // 2))
    raw.put(f"{ns}_{k}_0_v", b"\x01" * size)
    raw.close()
    dst = pool.alloc(pool.page_size)
    assert backend.batch_get_v1([k], dst) == [False]


def test_a_page_that_fails_does_not_lose_the_other_pages_of_its_batch(make_backend, server):
    pool = mha_host_pool()
    backend = make_backend(host_pool=pool, v1=True)
    keys = hashes(3)
    src = pool.alloc(3 * pool.page_size)
    fill_random(pool, src, seed=11)
    assert backend.batch_set_v1(keys, src) == [True] * 3
    # Larger than its buffer: page 1's K object fails on its own (TooLargeError).
    raw = server.client()
    raw.put(backend.keys.page_objects(keys[1])[0], b"\x01" * (2 * object_size(pool, mla=False)))
    raw.close()
    dst = pool.alloc(3 * pool.page_size)
    assert backend.batch_get_v1(keys, dst) == [True, False, True]
    got, want = page_bytes(pool, dst), page_bytes(pool, src)
    assert (got[0], got[2]) == (want[0], want[2])


def test_tp_ranks_store_separate_shards(make_backend, model_name, server):
    keys = hashes(2)
    ns = {}
    for rank in (0, 1):
        pool = mha_host_pool()
        b = make_backend(host_pool=pool, v1=True, tp_rank=rank, tp_size=2)
        src = pool.alloc(2 * pool.page_size)
        fill_random(pool, src, seed=20 + rank)
        assert b.batch_set_v1(keys, src) == [True, True]
        ns[rank] = b.keys.namespace
    assert ns[0] == ns[1] and "tp2" in ns[0]
    raw = server.client()
    names = [f"{ns[0]}_{k}_{r}_{h}" for k in keys for r in (0, 1) for h in ("k", "v")]
    assert raw.exists_many(names) == [True] * len(names)
    assert raw.get(names[0]) != raw.get(names[2])  # rank 0's K differs from rank 1's
    raw.close()
    # A TP=1 engine of the same model shares no pages with the TP=2 ranks.
    assert make_backend(host_pool=mha_host_pool(), v1=True).batch_exists(keys) == 0


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_mla_stores_one_object_shared_by_all_ranks(make_backend, server, layout):
    pool = mla_host_pool(layout)
    writer = make_backend(host_pool=pool, v1=True, mla=True, tp_rank=0, tp_size=2)
    n = 3
    src = pool.alloc(n * pool.page_size)
    fill_random(pool, src, seed=9)
    keys = hashes(n)
    assert writer.batch_set_v1(keys, src) == [True] * n
    ns = writer.keys.namespace
    assert "_tp" not in ns  # MLA keys carry no TP size or rank
    raw = server.client()
    size = object_size(pool, mla=True)
    for k in keys:
        value = raw.get(f"{ns}_{k}_k")
        assert value is not None and len(value) == size
        assert not raw.exists(f"{ns}_{k}_0_k") and not raw.exists(f"{ns}_{k}_v")
    raw.close()

    # Rank 1 (not the writer) reads rank 0's pages.
    pool2 = mla_host_pool(layout)
    reader = make_backend(host_pool=pool2, v1=True, mla=True, tp_rank=1, tp_size=2)
    dst = pool2.alloc(n * pool2.page_size)
    assert reader.batch_exists(keys) == n
    assert reader.batch_get_v1(keys, dst) == [True] * n
    assert page_bytes(pool2, dst) == page_bytes(pool, src)


def test_layouts_do_not_share_pages(make_backend):
    pool = mha_host_pool("page_first")
    a = make_backend(host_pool=pool, v1=True)
    src = pool.alloc(pool.page_size)
    fill_random(pool, src, seed=1)
    keys = hashes(1)
    assert a.batch_set_v1(keys, src) == [True]
    # Same model and rank, other byte order: must not be found.
    b = make_backend(host_pool=mha_host_pool("page_first_direct"), v1=True)
    assert b.batch_exists(keys) == 0


def test_pipeline_stages_holding_different_layers_get_different_keys(make_backend):
    # SGLANG_PP_LAYER_PARTITION "4,12,16" vs "8,12,12": stage 1 of 3 holds layers 4..15 on
    # one engine and 8..19 on the other, in pages of the same size.
    def stage(start: int):
        pool = mha_host_pool(start_layer=start, layers=12)
        return pool, make_backend(host_pool=pool, v1=True, pp_rank=1, pp_size=3)

    pool, writer = stage(4)
    src = pool.alloc(pool.page_size)
    fill_random(pool, src, seed=5)
    keys = hashes(1)
    assert writer.batch_set_v1(keys, src) == [True]
    _, other = stage(8)
    same_pool, same = stage(4)
    assert "_pp3_" in writer.keys.namespace and "_L4-16" in writer.keys.namespace
    assert writer.keys.page_objects(keys[0]) != other.keys.page_objects(keys[0])
    assert other.batch_exists(keys) == 0
    # An engine with the same partition still shares the page.
    dst = same_pool.alloc(same_pool.page_size)
    assert same.batch_get_v1(keys, dst) == [True]
    assert page_bytes(same_pool, dst) == page_bytes(pool, src)


def test_v1_needs_a_registered_pool(make_backend):
    backend = make_backend(v1=True)
    with pytest.raises(RuntimeError, match="register_mem_pool_host"):
        backend.batch_get_v1(hashes(1), torch.arange(4))


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_k_object_holds_only_the_k_half(make_backend, server, layout):
    """The `_k` object is the page's K cache (every layer), `_v` its V cache, in layer order."""
    pool = mha_host_pool(layout)
    backend = make_backend(host_pool=pool, v1=True)
    src = pool.alloc(pool.page_size)
    fill_random(pool, src, seed=4)
    [k] = hashes(1)
    assert backend.batch_set_v1([k], src) == [True]
    i, ps = int(src[0]), pool.page_size
    raw = server.client()
    for half, name in ((0, "k"), (1, "v")):
        buf = pool.kv_buffer[half]
        if layout == "layer_first":  # [layer, token, head, dim]
            want = torch.cat([buf[layer, i : i + ps].reshape(-1) for layer in range(buf.shape[0])])
        else:  # [token, layer, head, dim]
            want = buf[i : i + ps].reshape(-1)
        got = raw.get(f"{backend.keys.namespace}_{k}_0_{name}")
        assert got == want.contiguous().view(torch.uint8).numpy().tobytes()
    raw.close()
