"""MemKVOffloadingSpec, MemKV's spec name, built by vLLM's OffloadingSpecFactory from the flat
extra config a MemKV deployment writes, against a real memkv server."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

memkv = pytest.importorskip("memkv")
from memkv.testing import MemkvServer  # noqa: E402
from vllm.v1.kv_offload.factory import OffloadingSpecFactory  # noqa: E402
from vllm.v1.kv_offload.tiering.manager import TieringOffloadingManager  # noqa: E402

from memkv_vllm import plugin  # noqa: E402
from memkv_vllm.spec import DEFAULT_SCRATCH_BYTES, MemKVOffloadingSpec  # noqa: E402
from memkv_vllm.tier import MemkvTier  # noqa: E402
from tests.tiering import (  # noqa: E402
    WORKER_BYTES_PER_BLOCK,
    load_through,
    offload_keys,
    offloading_config,
    store_through,
)


@pytest.fixture(scope="module")
def srv():
    with MemkvServer() as s:
        yield s


def memkv_config(srv, engine_id: str, module_path: bool = True, **extra):
    """The OffloadingConnector's extra config as written for MemKV: flat, no secondary_tiers."""
    base = offloading_config([], engine_id)
    flat = {"spec_name": "MemKVOffloadingSpec", "servers": [srv.address],
            "auth_key": srv.auth_key, "timeout_ms": 1000, "quantization": "none",
            "cpu_bytes_to_use": 32 * WORKER_BYTES_PER_BLOCK, **extra}
    if module_path:
        flat["spec_module_path"] = "memkv_vllm.spec"
    return dataclasses.replace(base, extra_config=flat)


def test_the_memkv_spec_name_gives_tiering_with_memkv_as_its_tier(srv):
    spec = OffloadingSpecFactory.create_spec(memkv_config(srv, f"spec-{uuid.uuid4().hex[:8]}"))
    assert isinstance(spec, MemKVOffloadingSpec)
    (tier,) = spec.extra_config["secondary_tiers"]
    assert tier["type"] == "MemkvTier" and tier["servers"] == [srv.address]
    assert "servers" not in spec.extra_config and "quantization" not in spec.extra_config
    manager = spec.get_manager()
    try:
        assert isinstance(manager, TieringOffloadingManager)
        assert [type(t) for t in manager.secondary_tiers] == [MemkvTier]
    finally:
        manager.shutdown()


def test_chunks_stored_by_one_engine_are_loaded_by_another(srv):
    run = uuid.uuid4().hex[:8]
    a = OffloadingSpecFactory.create_spec(memkv_config(srv, f"a-{run}")).get_manager()
    b = OffloadingSpecFactory.create_spec(memkv_config(srv, f"b-{run}")).get_manager()
    try:
        keys = offload_keys(3, salt=31)
        load_through(b, keys, store_through(a, keys, seed=31))
    finally:
        a.shutdown()
        b.shutdown()


def test_the_scratch_buffer_has_a_default_size_and_cpu_is_the_only_medium(srv):
    config = memkv_config(srv, "defaults", memkv_scratch_medium="CPU")
    del config.extra_config["cpu_bytes_to_use"]
    spec = OffloadingSpecFactory.create_spec(config)
    assert spec.extra_config["cpu_bytes_to_use"] == DEFAULT_SCRATCH_BYTES
    assert "memkv_scratch_medium" not in spec.extra_config
    with pytest.raises(ValueError, match="'memkv_scratch_medium' must be one of \\['cpu'\\]"):
        OffloadingSpecFactory.create_spec(memkv_config(srv, "gpu", memkv_scratch_medium="gpu"))


def test_memkv_settings_reach_the_tier_and_bad_ones_are_named(srv):
    spec = OffloadingSpecFactory.create_spec(
        memkv_config(srv, "timeout", lookup_timeout_s=0.25, eviction_policy="lru")
    )
    assert spec.extra_config["secondary_tiers"][0]["lookup_timeout_s"] == 0.25
    assert spec.extra_config["eviction_policy"] == "lru"  # vLLM's own keys stay vLLM's
    with pytest.raises(ValueError, match="has 'secondary_tiers'"):
        OffloadingSpecFactory.create_spec(memkv_config(srv, "two", secondary_tiers=[]))
    manager = OffloadingSpecFactory.create_spec(
        memkv_config(srv, "bad", lookup_timeout_s=-1)
    )
    with pytest.raises(ValueError, match="'lookup_timeout_s' must be more than 0"):
        manager.get_manager()


def test_the_entry_point_registers_the_spec_name_so_the_module_path_may_be_left_out(srv):
    plugin.register()
    plugin.register()
    spec = OffloadingSpecFactory.create_spec(memkv_config(srv, "named", module_path=False))
    assert isinstance(spec, MemKVOffloadingSpec)


def test_the_documented_config_builds_the_memkv_spec():
    """The README's example, verbatim, through vLLM's own config and factory."""
    import json
    import re
    from pathlib import Path

    from vllm.config import KVTransferConfig

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme[readme.index("### MemKV's spec name"):]
    text = re.search(r"--kv-transfer-config '(\{.*?\})'", section, re.DOTALL).group(1)
    extra = KVTransferConfig(**json.loads(text)).kv_connector_extra_config
    assert OffloadingSpecFactory.get_spec_cls(extra) is MemKVOffloadingSpec
    MemKVOffloadingSpec.build_metric_definitions(dict(extra))
