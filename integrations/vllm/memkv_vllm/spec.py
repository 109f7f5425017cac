"""``MemKVOffloadingSpec``: MemKV's name for memkv under vLLM's ``OffloadingConnector``, kept so
that a kv-transfer config written for MemKV's vLLM integration runs on memkv unchanged::

    "kv_connector": "OffloadingConnector",
    "kv_role": "kv_both",
    "kv_connector_extra_config": {
        "spec_name": "MemKVOffloadingSpec", "spec_module_path": "memkv_vllm.spec",
        "servers": ["10.0.0.5:9900"], "quantization": "none"}

Here it is vLLM's ``TieringOffloadingSpec`` with memkv as its one secondary tier, configured
from the same flat extra config: KV goes from the GPU into vLLM's CPU offload buffer and from
there to memkv, and comes back the same way. That buffer is the scratch space
(``memkv_scratch_medium``), so ``cpu`` is the one medium accepted; GPU scratch (MemKV's
GPUDirect path) is refused by name rather than quietly replaced. ``cpu_bytes_to_use`` sizes the
buffer (all workers together), as for vLLM's own specs, and defaults to
``DEFAULT_SCRATCH_BYTES``. The memkv tier's keys (``servers``, ``quantization``,
``lookup_timeout_s`` ...; see ``tier.MemkvTier``) go to the tier, everything else (eviction
policy, ``block_size``, ``offload_prompt_only`` ...) to vLLM's spec.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

from typing_extensions import override
from vllm.v1.kv_offload.base import OffloadingMetricMetadata
from vllm.v1.kv_offload.config import OffloadingConfig
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

from .plugin import SPEC_NAME, TIER_CLASS, TIER_MODULE
from .tier import MemkvTier

# Room for the chunks in flight between the GPU and memkv; chunks kept there are also hits
# that need no trip to memkv.
DEFAULT_SCRATCH_BYTES = 2 << 30
SCRATCH_MEDIA = ("cpu",)

# What goes to the memkv tier: MemkvTier's own keyword arguments, beyond those vLLM passes.
TIER_KEYS = tuple(
    inspect.signature(MemkvTier).parameters.keys()
    - {"offloading_spec", "primary_kv_view", "tier_type", "backpressure_detector"}
)


def tiering_extra_config(extra: Mapping[str, Any]) -> dict[str, Any]:
    """The ``TieringOffloadingSpec`` extra config that ``extra`` (MemKV's flat form) means."""
    source = f"kv_connector_extra_config of {SPEC_NAME}"
    if "secondary_tiers" in extra:
        raise ValueError(
            f"memkv_vllm: {source} has 'secondary_tiers': {SPEC_NAME} makes memkv its one "
            "secondary tier from the flat keys. For several tiers use spec_name "
            "'TieringOffloadingSpec' with {\"type\": \"memkv\", ...} among its secondary_tiers"
        )
    medium = extra.get("memkv_scratch_medium", "cpu")
    if not isinstance(medium, str) or medium.strip().lower() not in SCRATCH_MEDIA:
        raise ValueError(
            f"memkv_vllm: {source} 'memkv_scratch_medium' must be one of {list(SCRATCH_MEDIA)} "
            f"(memkv stages KV in vLLM's CPU offload buffer), got {medium!r}"
        )
    tier = {"type": TIER_CLASS, "module_path": TIER_MODULE}
    tier.update({k: v for k, v in extra.items() if k in TIER_KEYS})
    rest = {k: v for k, v in extra.items() if k not in TIER_KEYS and k != "memkv_scratch_medium"}
    rest.setdefault("cpu_bytes_to_use", DEFAULT_SCRATCH_BYTES)
    rest["secondary_tiers"] = [tier]
    return rest


class MemKVOffloadingSpec(TieringOffloadingSpec):
    """vLLM's tiered offloading with memkv as its secondary tier, under MemKV's spec name."""

    @classmethod
    @override
    def build_metric_definitions(
        cls, extra_config: dict[str, Any]
    ) -> dict[str, OffloadingMetricMetadata]:
        return super().build_metric_definitions(tiering_extra_config(extra_config))

    def __init__(self, config: OffloadingConfig):
        extra = tiering_extra_config(config.extra_config)
        super().__init__(dataclasses.replace(config, extra_config=extra))
