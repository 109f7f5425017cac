# SPDX-License-Identifier: Apache-2.0
"""The plain HiCache interface (get/set/batch_*/exists) through SGLang's dynamic loader."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    create,
    dynamic_extra,
    fill_random,
    hashes,
    mha_host_pool,
    page_bytes,
    storage_config,
)
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

from memkv_sglang.backend import MemKVHiCacheStorage


def pages(n: int, numel: int = 96, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(numel, generator=g).to(torch.bfloat16) for _ in range(n)]


def test_dynamic_loader_builds_the_backend(make_backend):
    backend = make_backend()
    assert isinstance(backend, MemKVHiCacheStorage)
    assert isinstance(backend, HiCacheStorage)
    assert "tcp" in backend.client.transport


def test_loader_reports_a_wrong_class_name(server, model_name):
    extra = dynamic_extra([server.address], server.auth_key, class_name="NoSuchBackend")
    with pytest.raises(AttributeError, match="NoSuchBackend"):
        create(storage_config(model_name=model_name, extra=extra))


def test_servers_and_key_from_environment(server, model_name, monkeypatch):
    monkeypatch.setenv("MEMKV_SERVERS", server.address)
    monkeypatch.setenv("MEMKV_AUTH_KEY", server.auth_key)
    backend = create(storage_config(model_name=model_name, extra=dynamic_extra()))
    try:
        [p] = pages(1)
        assert backend.set("envpage", p)
        assert backend.exists("envpage")
    finally:
        backend.close()


def test_set_get_exists_and_miss(make_backend):
    backend = make_backend()
    [p] = pages(1)
    assert not backend.exists("h0")
    assert backend.get("h0", torch.zeros_like(p)) is None
    assert backend.set("h0", p)
    assert backend.exists("h0")
    out = torch.zeros_like(p)
    got = backend.get("h0", out)
    assert got is out
    assert torch.equal(out.view(torch.uint8), p.view(torch.uint8))


def test_batch_set_get_and_prefix_with_hole(make_backend):
    backend = make_backend()
    keys = hashes(5)
    values = pages(5, seed=1)
    # Page 2 is the hole: 0, 1, 3, 4 are stored.
    assert backend.batch_set([keys[i] for i in (0, 1, 3, 4)], [values[i] for i in (0, 1, 3, 4)])
    assert backend.batch_exists(keys) == 2
    assert backend.batch_exists(keys[3:]) == 2
    assert backend.batch_exists(keys[2:]) == 0
    assert backend.batch_exists([]) == 0

    targets = [torch.zeros_like(v) for v in values]
    got = backend.batch_get(keys, targets)
    assert [g is None for g in got] == [False, False, True, False, False]
    for i in (0, 1, 3, 4):
        assert torch.equal(targets[i].view(torch.uint8), values[i].view(torch.uint8))


def test_a_page_that_fails_does_not_lose_the_other_pages_of_its_batch(make_backend, server):
    backend = make_backend()
    keys = hashes(3)
    values = pages(3, seed=4)
    assert backend.batch_set(keys, values)
    # Larger than its target: page 1 fails on its own (TooLargeError).
    raw = server.client()
    raw.put(backend.keys.flat_page(keys[1]), b"\x01" * (4 * values[1].nbytes))
    raw.close()
    targets = [torch.zeros_like(v) for v in values]
    got = backend.batch_get(keys, targets)
    assert [g is None for g in got] == [False, True, False]
    for i in (0, 2):
        assert torch.equal(targets[i].view(torch.uint8), values[i].view(torch.uint8))


def test_batch_get_into_non_contiguous_target(make_backend):
    backend = make_backend()
    [p] = pages(1, numel=64)
    assert backend.set("nc", p)
    base = torch.zeros(64, 2, dtype=torch.bfloat16)
    target = base[:, 0]  # strided: the backend must stage and copy
    assert not target.is_contiguous()
    assert backend.get("nc", target) is target
    assert torch.equal(target.contiguous().view(torch.uint8), p.view(torch.uint8))


def test_value_of_another_size_is_a_miss(make_backend):
    backend = make_backend()
    [p] = pages(1, numel=96)
    assert backend.set("sized", p)
    # A different page geometry under the same key must not be served as a hit.
    assert backend.get("sized", torch.zeros(128, dtype=torch.bfloat16)) is None
    assert backend.get("sized", torch.zeros(64, dtype=torch.bfloat16)) is None


def test_controller_generic_path_over_a_host_pool(make_backend):
    """What HiCacheController._generic_page_set/_get do, on SGLang's own MHA host pool."""
    pool = mha_host_pool("page_first")
    writer = make_backend(host_pool=pool)
    src = pool.alloc(3 * pool.page_size)
    fill_random(pool, src, seed=7)
    keys = hashes(3)
    data = [pool.get_data_page(int(src[i * pool.page_size])) for i in range(3)]
    assert writer.batch_set(keys, data)

    # A second engine (new pool, new client) loads them.
    pool2 = mha_host_pool("page_first")
    reader = make_backend(host_pool=pool2)
    assert reader.batch_exists(keys) == 3
    dst = pool2.alloc(3 * pool2.page_size)
    dummies = [pool2.get_dummy_flat_data_page() for _ in keys]
    got = reader.batch_get(keys, dummies)
    assert all(g is not None for g in got)
    for i, g in enumerate(got):
        pool2.set_from_flat_data_page(int(dst[i * pool2.page_size]), g)
    assert page_bytes(pool2, dst) == page_bytes(pool, src)


def test_models_and_ranks_do_not_mix(make_backend, model_name):
    [p] = pages(1)
    a = make_backend(model_name=model_name)
    assert a.set("shared-hash", p)
    assert not make_backend(model_name=model_name + "-other").exists("shared-hash")
    # MHA: each TP rank holds its own head shard.
    assert not make_backend(model_name=model_name, tp_rank=1, tp_size=2).exists("shared-hash")
    assert not make_backend(model_name=model_name, tp_rank=0, tp_size=2).exists("shared-hash")
    assert make_backend(model_name=model_name).exists("shared-hash")


def test_metrics_are_reported_and_drained(make_backend):
    backend = make_backend(metrics=True)
    values = pages(2)
    keys = hashes(2)
    assert backend.batch_set(keys, values)
    backend.batch_get(keys, [torch.zeros_like(v) for v in values])
    stats = backend.get_stats()
    assert stats.backup_pgs == [2] and stats.prefetch_pgs == [2]
    assert all(bw > 0 for bw in stats.backup_bandwidth + stats.prefetch_bandwidth)
    assert backend.get_stats().backup_pgs == []


def test_key_prefix_separates_tenants_and_servers_may_be_a_string(server, model_name):
    def build(**more):
        extra = dynamic_extra(f" {server.address} ", server.auth_key, **more)
        return create(storage_config(model_name=model_name, extra=extra))

    tenant_a, tenant_b, default = build(key_prefix="tenant-a"), build(key_prefix="tenant-b"), build()
    try:
        [p] = pages(1)
        assert tenant_a.set("page", p)
        assert tenant_a.keys.namespace.startswith("tenant-a_")
        assert not tenant_b.exists("page") and not default.exists("page")
    finally:
        for b in (tenant_a, tenant_b, default):
            b.close()


def test_bad_servers_option_is_named(server, model_name):
    extra = dynamic_extra(server.address, server.auth_key)
    extra["servers"] = 9900
    with pytest.raises(ValueError, match="'servers'"):
        create(storage_config(model_name=model_name, extra=extra))


@pytest.mark.parametrize(
    "setting, value",
    [
        ("timeout_ms", "3s"),
        ("timeout_ms", 0),
        ("timeout_ms", 2.5),
        ("timeout_ms", True),
        ("interface_v1", "maybe"),
        ("interface_v1", 2),
        # SGLang's controller would take this text as true and call the zero-copy methods.
        ("interface_v1", "false"),
    ],
)
def test_bad_extra_config_value_names_the_setting(server, model_name, setting, value):
    extra = dynamic_extra(server.address, server.auth_key, **{setting: value})
    with pytest.raises(ValueError, match=f"'{setting}'") as e:
        create(storage_config(model_name=model_name, extra=extra))
    assert repr(value) in str(e.value)


@pytest.mark.parametrize(
    "value, expected",
    [(True, True), (1, True), ("true", True), ("1", True), ("Yes", True), (False, False), (0, False)],
)
def test_interface_v1_accepts_bools_numbers_and_words(server, model_name, value, expected):
    extra = dynamic_extra(server.address, server.auth_key, interface_v1=value)
    backend = create(storage_config(model_name=model_name, extra=extra))
    try:
        assert backend.interface_v1 is expected
    finally:
        backend.close()


def test_timeout_ms_may_be_text(server, model_name):
    extra = dynamic_extra(server.address, server.auth_key, timeout_ms="2500")
    create(storage_config(model_name=model_name, extra=extra)).close()
