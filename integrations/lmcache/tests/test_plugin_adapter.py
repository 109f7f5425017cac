# SPDX-License-Identifier: Apache-2.0
"""Multiprocess mode, `plugin` adapter type: LMCache's own parser and `plugin` factory load
memkv_lmcache.l2.MemkvL2Adapter (config class found by LMCache's naming convention), hand it
an L1 arena to register, and run it against a real server."""

from __future__ import annotations

import ctypes
import json
import logging

import memkv
import pytest
import torch
from conftest import TIMEOUT_MS, pattern
from l2_ops import (
    build_adapter,
    check_eviction_deletes_oldest,
    check_stopped_server_fails_fast,
    key,
    key_string,
    load,
    load_into,
    lookup,
    store,
    store_objects,
)
from lmcache.v1.distributed.api import MemoryLayoutDesc
from lmcache.v1.distributed.config import L1MemoryManagerConfig
from lmcache.v1.distributed.internal_api import L1MemoryDesc
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import NativeConnectorL2Adapter
from lmcache.v1.distributed.l2_adapters.plugin_l2_adapter import PluginL2AdapterConfig
from lmcache.v1.distributed.memory_manager.l1_memory_manager import L1MemoryManager

import memkv_lmcache
from memkv_lmcache.l2 import MemkvL2Adapter, MemkvL2AdapterConfig

L1_BYTES = 8 << 20


def plugin_spec(srv, adapter_params: dict | None = None, **outer) -> dict:
    params = {
        "servers": [srv.address],
        "auth_key": srv.auth_key,
        "transport": "tcp",
        "timeout_ms": TIMEOUT_MS,
    }
    params.update(adapter_params or {})
    return {
        "type": "plugin",
        "module_path": "memkv_lmcache.l2",
        "class_name": "MemkvL2Adapter",
        "adapter_params": params,
        **outer,
    }


@pytest.fixture
def l1():
    """A real LMCache L1 (the shared-memory arena `lmcache server` makes by default)."""
    manager = L1MemoryManager(L1MemoryManagerConfig(size_in_bytes=L1_BYTES, use_lazy=False))
    yield manager
    manager.close()


@pytest.fixture
def registrations(monkeypatch):
    """Every (address, length) registered through memkv.MemkvConnector, in order; the calls
    still go to the real connector."""
    seen: list[tuple[int, int]] = []
    real_cls = memkv.MemkvConnector

    class Recording:
        def __init__(self, **kwargs):
            self._real = real_cls(**kwargs)

        def register(self, buffer):
            view = memoryview(buffer)
            seen.append((ctypes.addressof(ctypes.c_char.from_buffer(view)), view.nbytes))
            self._real.register(buffer)

        def __getattr__(self, name):
            return getattr(self._real, name)

    monkeypatch.setattr(memkv, "MemkvConnector", Recording)
    return seen


@pytest.fixture
def adapter(server, l1):
    _, adp = build_adapter(plugin_spec(server), l1.get_l1_memory_desc())
    yield adp
    adp.close()


def l1_objects(l1: L1MemoryManager, sizes: list[int]):
    objs = []
    for n in sizes:
        _, (obj,) = l1.allocate(MemoryLayoutDesc([torch.Size([n])], [torch.uint8]), 1)
        objs.append(obj)
    return objs


def test_plugin_factory_finds_config_class_by_convention(server, l1):
    adapter_config, adp = build_adapter(plugin_spec(server), l1.get_l1_memory_desc())
    try:
        assert isinstance(adapter_config, PluginL2AdapterConfig)
        assert adapter_config.config_class_name is None
        assert isinstance(adp, MemkvL2Adapter)
        assert isinstance(adp, NativeConnectorL2Adapter)
        assert isinstance(adp._client, memkv_lmcache.MemkvConnector)
        assert adp._has_delete
        status = adp.report_status()
        assert status["is_healthy"] and status["type"] == "memkv" and status["transport"] == "tcp"
    finally:
        adp.close()


def test_roundtrip_through_l1_objects_with_a_miss(adapter, server, l1):
    sizes = [64 * 1024, 256 * 1024 + 3, 1]
    datas = [pattern(f"p{i}", n) for i, n in enumerate(sizes)]
    objs = l1_objects(l1, sizes)
    for obj, data in zip(objs, datas, strict=True):
        obj.tensor.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    assert store_objects(adapter, [1, 2, 3], objs).is_successful()
    with server.client() as c:
        assert c.get(key_string(2)) == datas[1]

    assert lookup(adapter, [1, 2, 3, 99]) == [True, True, True, False]
    adapter.submit_unlock([key(1), key(2), key(3)])

    targets = l1_objects(l1, sizes + [4096])
    assert load_into(adapter, [1, 2, 3, 98], targets) == [True, True, True, False]
    assert [bytes(o.byte_array) for o in targets[:3]] == datas


def test_registers_the_whole_l1_arena(server, l1, registrations):
    desc = l1.get_l1_memory_desc()
    assert desc.stable_registration_size is None  # LMCache gives none for a shared-memory L1
    _, adp = build_adapter(plugin_spec(server), desc)
    try:
        assert registrations == [(desc.ptr, desc.size)]
        assert adp.report_status()["l1_registered_bytes"] == desc.size == L1_BYTES
    finally:
        adp.close()


def test_registers_only_the_stable_prefix_of_a_lazily_grown_l1(server, registrations):
    # A lazy L1 (which needs pinned memory, so not on these CPU-only machines) reports its
    # final size and, as stable_registration_size, the prefix allocated so far.
    arena = torch.zeros(L1_BYTES, dtype=torch.uint8)
    desc = L1MemoryDesc(
        ptr=arena.data_ptr(), size=L1_BYTES, align_bytes=4096, stable_registration_size=L1_BYTES // 4
    )
    _, adp = build_adapter(plugin_spec(server), desc)
    try:
        assert registrations == [(desc.ptr, L1_BYTES // 4)]
        assert adp.report_status()["l1_registered_bytes"] == L1_BYTES // 4
        assert store(adp, [7], [pattern("lazy", 3000)]).is_successful()
    finally:
        adp.close()


def test_without_l1_descriptor_nothing_is_registered_and_it_works(server, registrations):
    _, adp = build_adapter(plugin_spec(server))
    try:
        assert registrations == []
        assert adp.report_status()["l1_registered_bytes"] == 0
        assert store(adp, [8], [pattern("nodesc", 5000)]).is_successful()
        assert load(adp, [8], [5000]) == ([True], [pattern("nodesc", 5000)])
    finally:
        adp.close()


def test_failed_registration_is_a_warning_and_the_adapter_works(server, l1, monkeypatch, caplog):
    real_cls = memkv.MemkvConnector

    class RefusesRegistration:
        def __init__(self, **kwargs):
            self._real = real_cls(**kwargs)

        def register(self, buffer):
            raise memkv.Error("no RDMA device")

        def __getattr__(self, name):
            return getattr(self._real, name)

    monkeypatch.setattr(memkv, "MemkvConnector", RefusesRegistration)
    # LMCache's init_logger stops propagation, which caplog relies on.
    monkeypatch.setattr(logging.getLogger("memkv_lmcache.l2"), "propagate", True)
    with caplog.at_level(logging.WARNING, logger="memkv_lmcache.l2"):
        _, adp = build_adapter(plugin_spec(server), l1.get_l1_memory_desc())
    try:
        assert "no RDMA device" in caplog.text
        assert adp.report_status()["l1_registered_bytes"] == 0
        assert store(adp, [9], [pattern("noreg", 2000)]).is_successful()
        assert load(adp, [9], [2000]) == ([True], [pattern("noreg", 2000)])
    finally:
        adp.close()


def test_unknown_or_bad_adapter_params_are_refused_by_name(server):
    with pytest.raises(TypeError, match=r"adapter_params\.timeout\b.*max_capacity_gb"):
        build_adapter(plugin_spec(server, {"timeout": 5}))
    with pytest.raises(ValueError, match=r"adapter_params\.max_capacity_gb"):
        build_adapter(plugin_spec(server, {"max_capacity_gb": -1}))
    with pytest.raises(ValueError, match="transport"):
        build_adapter(plugin_spec(server, {"transport": "udp"}))
    help_text = MemkvL2AdapterConfig.help()
    for name in ("servers", "auth_key_file", "transport", "timeout_ms", "config", "max_capacity_gb"):
        assert name in help_text


def test_l2_eviction_controller_deletes_from_memkv(server, l1):
    # max_capacity_gb goes in adapter_params (plugin's outer JSON has no such key); the
    # eviction policy stays on the outer JSON, where LMCache's parser reads it.
    obj_size = 64 * 1024
    spec = plugin_spec(
        server,
        {"max_capacity_gb": 8 * obj_size / 1024**3},
        eviction={"eviction_policy": "LRU", "trigger_watermark": 0.5, "eviction_ratio": 0.5},
    )
    adapter_config, adp = build_adapter(spec, l1.get_l1_memory_desc())
    assert adp.get_usage().total_capacity_bytes == 8 * obj_size
    check_eviction_deletes_oldest(server, adapter_config, adp, obj_size)


def value_bytes(server) -> int:
    return json.loads(server.status())["storage"]["value_bytes_total"]


def test_delete_frees_memkv_memory(adapter, server):
    assert store(adapter, [10, 11], [pattern("d10", 5000), pattern("d11", 6000)]).is_successful()
    assert value_bytes(server) == 11000
    used = adapter.get_usage().total_bytes_used
    adapter.delete([key(10)])
    assert lookup(adapter, [10, 11]) == [False, True]
    assert value_bytes(server) == 6000
    assert adapter.get_usage().total_bytes_used == used - 5000


def test_server_stopped_mid_run_fails_fast(adapter, server):
    check_stopped_server_fails_fast(adapter, server)
