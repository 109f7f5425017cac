# SPDX-License-Identifier: Apache-2.0
"""The multi-pool interface (batch_*_v2) over SGLang's real host pools: a KV pool plus the
side pools of a hybrid model (Mamba state, an SWA window, an ALL_PAGES pool)."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    PAGE_SIZE,
    fill_mamba,
    fill_random,
    hashes,
    mamba_bytes,
    mamba_host_pool,
    mha_host_pool,
    mla_host_pool,
    page_bytes,
)
from memkv.testing import MemkvServer
from sglang.srt.mem_cache.hicache_storage import (
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
)
from test_failures import servers_sharing_a_key, timed

ALL = PoolHitPolicy.ALL_PAGES
TRAILING = PoolHitPolicy.TRAILING_PAGES


def hybrid(make_backend, *, swa=True, indexer=True, mamba=None, **kw):
    """A backend attached as HybridCacheController attaches it: the KV anchor through
    register_mem_pool_host, then every pool of the group through register_mem_host_pool_v2."""
    kv = mha_host_pool()
    pools = {PoolName.KV: kv, PoolName.MAMBA: mamba or mamba_host_pool()}
    if swa:
        pools[PoolName.SWA] = mha_host_pool()
    if indexer:
        pools[PoolName.INDEXER] = mla_host_pool()
    backend = make_backend(host_pool=kv, v1=True, **kw)
    for name, pool in pools.items():
        backend.register_mem_host_pool_v2(pool, name)
    backend.on_host_pools_registered()
    return backend, pools


def query(name, window=1, policy=TRAILING):
    """A hit-query transfer as SGLang's cache components build it: only the key count
    (the trailing window) matters."""
    return PoolTransfer(name=name, keys=["__placeholder__"] * window, hit_policy=policy)


def side_names(backend, name, keys):
    return backend._side_names(backend._side(name), keys)


def store_kv(backend, pools, keys, seed=1):
    kv = pools[PoolName.KV]
    src = kv.alloc(len(keys) * PAGE_SIZE)
    fill_random(kv, src, seed=seed)
    assert backend.batch_set_v1(keys, src) == [True] * len(keys)
    return src


def store_mamba(backend, pools, page_hash, seed):
    m = pools[PoolName.MAMBA]
    slot = m.alloc(1)
    fill_mamba(m, slot, seed=seed)
    t = PoolTransfer(PoolName.MAMBA, host_indices=slot, keys=[page_hash], hit_policy=TRAILING)
    assert backend.batch_set_v2([t]) == {PoolName.MAMBA: [True]}
    return slot


def test_every_pool_round_trips_bit_exact(make_backend):
    writer, pools = hybrid(make_backend)
    n = 4
    keys = hashes(n)
    kv_src = store_kv(writer, pools, keys)
    m_src = pools[PoolName.MAMBA].alloc(1)
    fill_mamba(pools[PoolName.MAMBA], m_src, seed=2)
    swa_src = pools[PoolName.SWA].alloc(2 * PAGE_SIZE)
    fill_random(pools[PoolName.SWA], swa_src, seed=3)
    idx_src = pools[PoolName.INDEXER].alloc(n * PAGE_SIZE)
    fill_random(pools[PoolName.INDEXER], idx_src, seed=4)
    writes = [
        # One state, at the node's last page; the SWA window's last two pages; every page.
        PoolTransfer(PoolName.MAMBA, host_indices=m_src, keys=keys[-1:], hit_policy=TRAILING),
        PoolTransfer(PoolName.SWA, host_indices=swa_src, keys=keys[-2:], hit_policy=TRAILING),
        PoolTransfer(PoolName.INDEXER, host_indices=idx_src, keys=keys, hit_policy=ALL),
    ]
    assert writer.batch_set_v2(writes) == {
        PoolName.MAMBA: [True],
        PoolName.SWA: [True, True],
        PoolName.INDEXER: [True] * n,
    }
    # Stored again: nothing to write, still all True.
    assert all(all(v) for v in writer.batch_set_v2(writes).values())

    # Another engine: its own pools and client.
    reader, pools2 = hybrid(make_backend)
    got = reader.batch_exists_v2(
        keys + hashes(2),  # two more pages nobody stored
        [query(PoolName.MAMBA), query(PoolName.SWA, 2), query(PoolName.INDEXER, policy=ALL)],
    )
    assert isinstance(got, PoolTransferResult)
    assert got.kv_hit_pages == n and got.restorable_prefix_pages == [n]
    assert got.extra_pool_hit_pages == {
        PoolName.KV: n, PoolName.MAMBA: n, PoolName.SWA: n, PoolName.INDEXER: n
    }

    kv_dst = pools2[PoolName.KV].alloc(n * PAGE_SIZE)
    assert reader.batch_get_v1(keys, kv_dst) == [True] * n
    pools2[PoolName.MAMBA].alloc(3)  # other slots than the writer's
    m_dst = pools2[PoolName.MAMBA].alloc(1)
    swa_dst = pools2[PoolName.SWA].alloc(2 * PAGE_SIZE)
    idx_dst = pools2[PoolName.INDEXER].alloc(n * PAGE_SIZE)
    reads = [
        PoolTransfer(PoolName.MAMBA, host_indices=m_dst, keys=keys[-1:], hit_policy=TRAILING),
        PoolTransfer(PoolName.SWA, host_indices=swa_dst, keys=keys[-2:], hit_policy=TRAILING),
        PoolTransfer(PoolName.INDEXER, host_indices=idx_dst, keys=keys, hit_policy=ALL),
    ]
    assert reader.batch_get_v2(reads) == {
        PoolName.MAMBA: [True],
        PoolName.SWA: [True, True],
        PoolName.INDEXER: [True] * n,
    }
    assert page_bytes(pools2[PoolName.KV], kv_dst) == page_bytes(pools[PoolName.KV], kv_src)
    assert mamba_bytes(pools2[PoolName.MAMBA], m_dst) == mamba_bytes(
        pools[PoolName.MAMBA], m_src
    )
    assert page_bytes(pools2[PoolName.SWA], swa_dst) == page_bytes(pools[PoolName.SWA], swa_src)
    assert page_bytes(pools2[PoolName.INDEXER], idx_dst) == page_bytes(
        pools[PoolName.INDEXER], idx_src
    )


def test_mamba_objects_are_the_slots_state_in_place(make_backend, server):
    """Zero-copy: one object per state tensor of the slot, exactly its bytes."""
    backend, pools = hybrid(make_backend, swa=False, indexer=False)
    [k] = hashes(1)
    slot = store_mamba(backend, pools, k, seed=5)
    m = pools[PoolName.MAMBA]
    names = side_names(backend, PoolName.MAMBA, [k])
    assert [n.rsplit("_", 1)[1] for n in names] == ["temporal", "conv0"]
    raw = server.client()
    for name, buf in zip(names, (m.temporal_buffer, m.conv_buffer[0])):
        assert raw.get(name) == buf[int(slot)].contiguous().view(torch.uint8).numpy().tobytes()
    raw.close()


def test_mamba_checkpoints_with_a_hole(make_backend, server):
    """Mamba states only at pages 2 and 4: both prefixes are restorable, page 3 is not; once
    page 4's state is gone the hit falls back to 2 pages."""
    backend, pools = hybrid(make_backend, swa=False, indexer=False)
    keys = hashes(4)
    store_kv(backend, pools, keys)
    store_mamba(backend, pools, keys[1], seed=1)
    store_mamba(backend, pools, keys[3], seed=2)
    got = backend.batch_exists_v2(keys, [query(PoolName.MAMBA)])
    assert (got.kv_hit_pages, got.restorable_prefix_pages) == (4, [2, 4])
    assert got.extra_pool_hit_pages == {PoolName.KV: 4, PoolName.MAMBA: 4}

    raw = server.client()
    assert raw.delete(side_names(backend, PoolName.MAMBA, keys[3:])[1])  # half a state
    raw.close()
    got = backend.batch_exists_v2(keys, [query(PoolName.MAMBA)])
    assert (got.kv_hit_pages, got.restorable_prefix_pages) == (2, [2])
    assert got.extra_pool_hit_pages == {PoolName.KV: 4, PoolName.MAMBA: 2}

    # The KV prefix bounds every pool: a state past the stored KV pages is no use.
    got = backend.batch_exists_v2(keys[:1] + hashes(1) + keys[2:], [query(PoolName.MAMBA)])
    assert (got.kv_hit_pages, got.restorable_prefix_pages) == (0, [])
    # No state anywhere: nothing is restorable even though every KV page is stored.
    got = backend.batch_exists_v2(keys[:1], [query(PoolName.MAMBA)])
    assert (got.kv_hit_pages, got.restorable_prefix_pages) == (0, [])
    assert got.extra_pool_hit_pages == {PoolName.KV: 1}


def test_trailing_pages_need_only_the_window(make_backend, server):
    """SWA pages 1..4 stored but page 1: a 2-page window is complete for prefixes 3 and 4;
    the same pool under ALL_PAGES serves no prefix at all."""
    backend, pools = hybrid(make_backend, indexer=False)
    keys = hashes(4)
    store_kv(backend, pools, keys)
    swa = pools[PoolName.SWA]
    src = swa.alloc(3 * PAGE_SIZE)
    fill_random(swa, src, seed=6)
    t = PoolTransfer(PoolName.SWA, host_indices=src, keys=keys[1:], hit_policy=TRAILING)
    assert backend.batch_set_v2([t]) == {PoolName.SWA: [True] * 3}

    got = backend.batch_exists_v2(keys, [query(PoolName.SWA, 2)])
    assert (got.kv_hit_pages, got.restorable_prefix_pages) == (4, [3, 4])
    got = backend.batch_exists_v2(keys, [query(PoolName.SWA, 3)])
    assert (got.kv_hit_pages, got.restorable_prefix_pages) == (4, [4])
    got = backend.batch_exists_v2(keys, [query(PoolName.SWA, 2, ALL)])
    assert (got.kv_hit_pages, got.restorable_prefix_pages) == (0, [])

    # ALL_PAGES with a hole at page 3: the prefix stops before it.
    raw = server.client()
    for name in side_names(backend, PoolName.SWA, keys[2:3]):
        assert raw.delete(name)
    raw.close()
    t = PoolTransfer(PoolName.SWA, host_indices=src[:PAGE_SIZE], keys=keys[:1])
    assert backend.batch_set_v2([t]) == {PoolName.SWA: [True]}
    got = backend.batch_exists_v2(keys, [query(PoolName.SWA, 1, ALL)])
    assert (got.kv_hit_pages, got.restorable_prefix_pages) == (2, [1, 2])
    # Every pool's verdict counts: Mamba (no state) leaves nothing.
    got = backend.batch_exists_v2(keys, [query(PoolName.SWA, 1, ALL), query(PoolName.MAMBA)])
    assert (got.kv_hit_pages, got.restorable_prefix_pages) == (0, [])


def test_pools_do_not_share_keys(make_backend, server):
    backend, pools = hybrid(make_backend)
    [k] = hashes(1)
    names = backend._object_names([k]) + [backend.keys.flat_page(k)]
    for name in (PoolName.MAMBA, PoolName.SWA, PoolName.INDEXER):
        names += side_names(backend, name, [k])
    assert len(set(names)) == len(names) == 3 + 2 + 2 + 1

    # A Mamba state alone is no KV page, and no other pool's page.
    store_mamba(backend, pools, k, seed=7)
    assert backend.batch_exists([k]) == 0
    raw = server.client()
    assert raw.exists_many(side_names(backend, PoolName.SWA, [k])) == [False, False]
    raw.close()
    # KV alone is no Mamba state.
    keys = hashes(1)
    store_kv(backend, pools, keys)
    got = backend.batch_exists_v2(keys, [query(PoolName.MAMBA)])
    assert got.restorable_prefix_pages == []


def test_mla_model_shares_replicated_pools_and_splits_mamba(make_backend):
    """With MLA KV only TP rank 0 writes the KV and the pools replicated with it; Mamba
    state is split across ranks (SGLang backs it up on every rank), so its keys carry
    the rank and the TP size."""
    keys = hashes(1)
    backends = []
    for rank in (0, 1):
        kv = mla_host_pool()
        b = make_backend(host_pool=kv, v1=True, mla=True, tp_rank=rank, tp_size=2)
        pools = {PoolName.KV: kv, PoolName.MAMBA: mamba_host_pool(),
                 PoolName.INDEXER: mla_host_pool()}
        for name, pool in pools.items():
            b.register_mem_host_pool_v2(pool, name)
        backends.append((b, pools))
    (b0, p0), (b1, p1) = backends
    m0, m1 = (side_names(b, PoolName.MAMBA, keys) for b in (b0, b1))
    assert "_0of2_mamba-" in m0[0] and "_1of2_mamba-" in m1[0] and m0 != m1
    assert side_names(b0, PoolName.INDEXER, keys) == side_names(b1, PoolName.INDEXER, keys)

    src = p0[PoolName.INDEXER].alloc(PAGE_SIZE)
    fill_random(p0[PoolName.INDEXER], src, seed=8)
    t = PoolTransfer(PoolName.INDEXER, host_indices=src, keys=keys)
    assert b0.batch_set_v2([t]) == {PoolName.INDEXER: [True]}
    store_mamba(b0, p0, keys[0], seed=9)
    dst = p1[PoolName.INDEXER].alloc(PAGE_SIZE)
    m_dst = p1[PoolName.MAMBA].alloc(1)
    got = b1.batch_get_v2([
        PoolTransfer(PoolName.INDEXER, host_indices=dst, keys=keys),
        PoolTransfer(PoolName.MAMBA, host_indices=m_dst, keys=keys, hit_policy=TRAILING),
    ])
    # Rank 1 reads rank 0's replicated page, but not rank 0's share of the Mamba state.
    assert got == {PoolName.INDEXER: [True], PoolName.MAMBA: [False]}
    assert page_bytes(p1[PoolName.INDEXER], dst) == page_bytes(p0[PoolName.INDEXER], src)


def test_an_mha_shaped_side_pool_of_an_mla_model_is_refused_under_tp(make_backend):
    """SGLang backs up an MLA model's side pools from TP rank 0 only (Mamba excepted), so an
    MHA-shaped one (an MHA draft's KV) would be missing on every other rank: the engine's
    hit, the minimum over ranks, would always be 0 (found by a review against
    HybridCacheController.should_backup)."""
    kv = mla_host_pool()
    b = make_backend(host_pool=kv, v1=True, mla=True, tp_rank=1, tp_size=2)
    b.register_mem_host_pool_v2(kv, PoolName.KV)
    b.register_mem_host_pool_v2(mamba_host_pool(), PoolName.MAMBA)  # every rank backs it up
    with pytest.raises(ValueError, match="pool 'draft' .* of an MLA model under tensor parallelism"):
        b.register_mem_host_pool_v2(mha_host_pool(), PoolName.DRAFT)
    one = make_backend(host_pool=mla_host_pool(), v1=True, mla=True, tp_rank=0, tp_size=1)
    one.register_mem_host_pool_v2(mha_host_pool(), PoolName.DRAFT)  # one rank: it writes them


def test_a_pool_without_page_ranges_moves_as_flat_pages(make_backend, server):
    """A Mamba pool with per-slot side state has no zero-copy ranges (SGLang refuses them):
    its slots are stored as SGLang's flat page, side state included."""
    backend, pools = hybrid(
        make_backend, swa=False, indexer=False, mamba=mamba_host_pool(side_state=True)
    )
    m = pools[PoolName.MAMBA]
    keys = hashes(2)
    src = m.alloc(2)
    fill_mamba(m, src, seed=10)
    t = PoolTransfer(PoolName.MAMBA, host_indices=src, keys=keys, hit_policy=TRAILING)
    assert backend.batch_set_v2([t]) == {PoolName.MAMBA: [True, True]}
    names = side_names(backend, PoolName.MAMBA, keys)
    assert all(n.endswith("-MambaPoolHost_page") for n in names)
    raw = server.client()
    assert raw.get(names[0]) == mamba_bytes(m, src)[0]
    raw.close()

    reader, pools2 = hybrid(
        make_backend, swa=False, indexer=False, mamba=mamba_host_pool(side_state=True)
    )
    m2 = pools2[PoolName.MAMBA]
    dst = m2.alloc(2)
    t = PoolTransfer(PoolName.MAMBA, host_indices=dst, keys=keys, hit_policy=TRAILING)
    assert reader.batch_get_v2([t]) == {PoolName.MAMBA: [True, True]}
    assert mamba_bytes(m2, dst) == mamba_bytes(m, src)
    assert m2.slot_state_buffers[0][int(dst[1])].equal(m.slot_state_buffers[0][int(src[1])])


def test_misfits_are_misses(make_backend, server):
    backend, pools = hybrid(make_backend, swa=False, indexer=False)
    keys = hashes(3)
    store_mamba(backend, pools, keys[0], seed=11)
    # A stored value of another size (another model's state) is reported as a miss.
    raw = server.client()
    for name in side_names(backend, PoolName.MAMBA, keys[1:2]):
        raw.put(name, b"\x01" * 8)
    raw.close()
    m = pools[PoolName.MAMBA]
    dst = m.alloc(3)
    before = mamba_bytes(m, dst)
    t = PoolTransfer(PoolName.MAMBA, host_indices=dst, keys=keys, hit_policy=TRAILING)
    assert backend.batch_get_v2([t]) == {PoolName.MAMBA: [True, False, False]}
    assert mamba_bytes(m, dst)[2] == before[2]  # nothing stored: the slot is left alone
    # Host slots that do not match the keys: nothing moves, every page fails.
    t = PoolTransfer(PoolName.MAMBA, host_indices=m.alloc(2), keys=keys, hit_policy=TRAILING)
    assert backend.batch_get_v2([t]) == {PoolName.MAMBA: [False] * 3}
    assert backend.batch_set_v2([t]) == {PoolName.MAMBA: [False] * 3}
    assert backend.batch_get_v2([]) == {}


def test_unsupported_policy_and_pool_are_refused(make_backend):
    backend, _ = hybrid(make_backend, swa=False, indexer=False)
    keys = hashes(2)
    groups = PoolTransfer(
        PoolName.MAMBA, keys=keys, hit_policy=PoolHitPolicy.BLOCK_GROUPS,
        block_pages=2, group_pages=1,
    )
    with pytest.raises(NotImplementedError, match="block_groups"):
        backend.batch_exists_v2(keys, [groups])
    with pytest.raises(ValueError, match="not registered"):
        backend.batch_exists_v2(keys, [query(PoolName.SWA)])


def test_stopped_server_gives_misses(make_backend, monkeypatch):
    with servers_sharing_a_key(1, monkeypatch) as [srv]:
        assert isinstance(srv, MemkvServer)
        backend, pools = hybrid(
            make_backend, indexer=False, servers=[srv.address], auth_key=srv.auth_key
        )
        keys = hashes(2)
        store_kv(backend, pools, keys)
        store_mamba(backend, pools, keys[1], seed=12)
        assert backend.batch_exists_v2(keys, [query(PoolName.MAMBA)]).kv_hit_pages == 2

        srv.stop()

        got = timed(backend.batch_exists_v2, keys, [query(PoolName.MAMBA)])
        assert (got.kv_hit_pages, got.restorable_prefix_pages) == (0, [])
        m, swa = pools[PoolName.MAMBA], pools[PoolName.SWA]
        m_dst, swa_dst = m.alloc(1), swa.alloc(2 * PAGE_SIZE)
        before = (mamba_bytes(m, m_dst), page_bytes(swa, swa_dst))
        transfers = [
            PoolTransfer(PoolName.MAMBA, host_indices=m_dst, keys=keys[1:], hit_policy=TRAILING),
            PoolTransfer(PoolName.SWA, host_indices=swa_dst, keys=keys, hit_policy=TRAILING),
        ]
        assert timed(backend.batch_get_v2, transfers) == {
            PoolName.MAMBA: [False], PoolName.SWA: [False, False]
        }
        assert (mamba_bytes(m, m_dst), page_bytes(swa, swa_dst)) == before
        assert timed(backend.batch_set_v2, transfers) == {
            PoolName.MAMBA: [False], PoolName.SWA: [False, False]
        }
