# SPDX-License-Identifier: Apache-2.0
"""Multiprocess mode: LMCache's own `native_plugin` config parser and factory build
NativeConnectorL2Adapter around memkv_lmcache.MemkvConnector, against a real server."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from pathlib import Path

import memkv
import pytest
from conftest import TIMEOUT_MS, frozen, pattern
from l2_ops import (
    build_adapter,
    check_eviction_deletes_oldest,
    check_stopped_server_fails_fast,
    key,
    key_string,
    load,
    lookup,
    store,
)
from lmcache.v1.distributed.config import EvictionConfig
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import NativeConnectorL2Adapter

import memkv_lmcache


def adapter_spec(srv, **extra) -> dict:
    spec = {
        "type": "native_plugin",
        "module_path": "memkv_lmcache",
        "class_name": "MemkvConnector",
        "adapter_params": {
            "servers": [srv.address],
            "auth_key": srv.auth_key,
            "transport": "tcp",
            "timeout_ms": TIMEOUT_MS,
        },
    }
    spec.update(extra)
    return spec


@pytest.fixture
def adapter(server):
    _, adp = build_adapter(adapter_spec(server))
    yield adp
    adp.close()


def test_factory_builds_native_adapter_around_memkv(server):
    adapter_config, adp = build_adapter(adapter_spec(server))
    try:
        assert isinstance(adp, NativeConnectorL2Adapter)
        assert isinstance(adp._client, memkv_lmcache.MemkvConnector)
        # Without submit_batch_delete LMCache makes eviction a silent no-op.
        assert adp._has_delete
        assert adp.report_status()["is_healthy"]
    finally:
        adp.close()


def test_store_lookup_load_roundtrip_with_a_miss(adapter, server):
    sizes = [64 * 1024, 256 * 1024 + 3, 1]
    datas = [pattern(f"rt{i}", n) for i, n in enumerate(sizes)]
    result = store(adapter, [1, 2, 3], datas)
    assert result.is_successful()

    # Stored under LMCache's own key strings, readable by any memkv client.
    with server.client() as c:
        assert c.get(key_string(2)) == datas[1]

    assert lookup(adapter, [1, 2, 3, 99]) == [True, True, True, False]
    adapter.submit_unlock([key(1), key(2), key(3)])

    hits, loaded = load(adapter, [1, 2, 3], sizes)
    assert hits == [True, True, True]
    assert loaded == datas

    # A batch with a miss: the miss is reported per key; the hit's bytes are right.
    hits, loaded = load(adapter, [3, 98], [1, 4096])
    assert hits == [True, False]
    assert loaded[0] == datas[2]


def test_eventfd_is_reset_after_completions_are_drained(adapter):
    # LMCache's demux thread polls the connector's eventfd and only calls
    # drain_completions(); if that left the counter set, the thread would spin a core.
    assert store(adapter, [5], [b"y" * 1000]).is_successful()
    assert lookup(adapter, [5]) == [True]
    time.sleep(0.3)
    poller = select.poll()
    poller.register(adapter._client_fd, select.POLLIN)
    assert poller.poll(0) == [], "eventfd still readable with nothing to drain"


def test_delete_removes_from_memkv(adapter, server):
    assert store(adapter, [10, 11], [pattern("d10", 5000), pattern("d11", 6000)]).is_successful()
    used = adapter.get_usage().total_bytes_used
    adapter.delete([key(10)])
    assert lookup(adapter, [10, 11]) == [False, True]
    with server.client() as c:
        assert not c.exists(key_string(10))
    assert adapter.get_usage().total_bytes_used == used - 5000


def test_l2_eviction_controller_deletes_from_memkv(server):
    # Capacity for 8 objects of 64 KiB; LMCache's L2 eviction controller starts at 50%.
    obj_size = 64 * 1024
    spec = adapter_spec(
        server,
        max_capacity_gb=8 * obj_size / 1024**3,
        eviction={"eviction_policy": "LRU", "trigger_watermark": 0.5, "eviction_ratio": 0.5},
    )
    adapter_config, adp = build_adapter(spec)
    assert isinstance(adapter_config.eviction_config, EvictionConfig)
    check_eviction_deletes_oldest(server, adapter_config, adp, obj_size)


def test_second_process_loads_what_first_stored(adapter, server):
    sizes = [4096, 70000]
    datas = [pattern(f"xp{i}", n) for i, n in enumerate(sizes)]
    assert store(adapter, [20, 21], datas).is_successful()
    script = Path(__file__).with_name("second_instance.py")
    spec = json.dumps(adapter_spec(server))
    out = subprocess.run(
        [
            sys.executable,
            str(script),
            "native_plugin",
            spec,
            json.dumps({"ids": [20, 21, 22], "sizes": sizes + [10], "seeds": ["xp0", "xp1", None]}),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "hit hit miss", out.stdout


def test_server_stopped_mid_run_fails_fast(adapter, server):
    check_stopped_server_fails_fast(adapter, server)


def test_empty_adapter_params_take_memkv_environment(server, monkeypatch):
    monkeypatch.setenv("MEMKV_SERVERS", server.address)
    monkeypatch.setenv("MEMKV_AUTH_KEY", server.auth_key)
    monkeypatch.setenv("MEMKV_TRANSPORT", "tcp")
    spec = adapter_spec(server)
    spec["adapter_params"] = {}
    _, adp = build_adapter(spec)
    try:
        assert store(adp, [50], [b"z" * 300]).is_successful()
        assert lookup(adp, [50, 51]) == [True, False]
    finally:
        adp.close()


def test_frozen_server_fails_within_the_deadline(adapter, server):
    assert store(adapter, [60], [pattern("f60", 4096)]).is_successful()
    limit = TIMEOUT_MS / 1000 + 3
    with frozen(server):
        t0 = time.monotonic()
        assert not store(adapter, [61], [pattern("f61", 4096)], deadline_s=limit).is_successful()
        assert lookup(adapter, [60], deadline_s=limit) == [False]
        hits, _ = load(adapter, [60], [4096], deadline_s=limit)
        assert hits == [False]
        assert time.monotonic() - t0 < 3 * limit
    hits, loaded = load(adapter, [60], [4096])
    assert hits == [True] and loaded == [pattern("f60", 4096)]


def test_bad_adapter_params_name_the_setting(server):
    spec = adapter_spec(server)
    spec["adapter_params"]["timeout"] = 5
    with pytest.raises(TypeError, match=r"adapter_params\.timeout.*timeout_ms"):
        build_adapter(spec)
    spec = adapter_spec(server)
    spec["adapter_params"]["transport"] = "udp"
    with pytest.raises(ValueError, match="transport"):
        build_adapter(spec)


def test_wrong_auth_key_is_an_error_not_a_miss(server):
    spec = adapter_spec(server)
    spec["adapter_params"]["auth_key"] = "00" * 32
    try:
        _, adp = build_adapter(spec)
    except memkv.Error:
        return  # refused at connect time: fine
    try:
        assert not store(adp, [40], [b"x" * 100]).is_successful()
    finally:
        adp.close()


def test_a_value_shorter_than_its_load_buffer_is_not_loaded(adapter):
    # An ObjectKey has no dtype or layout in it: another writer's shorter value under the same
    # key fills only the front of the buffer. Loaded would hand LMCache a buffer whose tail is
    # stale, so it is a miss (LMCache's own adapters fail a short read the same way).
    short = pattern("short", 1000)
    assert store(adapter, [41], [short]).is_successful()
    hits, _ = load(adapter, [41], [4000])
    assert hits == [False]


def test_draining_after_close_is_an_error_not_a_read_of_a_closed_descriptor(server):
    # The connector used to read the eventfd by the number it had saved: after close() that
    # descriptor is closed, or reused by something else in the process.
    from memkv_lmcache import MemkvConnector

    connector = MemkvConnector(**adapter_spec(server)["adapter_params"])
    connector.close()
    with pytest.raises(memkv.Error, match="closed"):
        connector.drain_completions()
