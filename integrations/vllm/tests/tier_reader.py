"""A second "engine" for test_tier.py, in its own process: vLLM's plug-in loader registers the
tier, the config names it {"type": "memkv"} with no servers or key (memkv takes them from
MEMKV_SERVERS / MEMKV_AUTH_KEY), and vLLM's TieringOffloadingManager looks chunks up and promotes
them into its own primary buffer.

    python -m tests.tier_reader ENGINE_ID KEY_HEX...

prints one JSON object: {key_hex: sha256 of the promoted chunk's bytes, or "MISS"}.
"""

from __future__ import annotations

import hashlib
import json
import sys

import numpy as np
from vllm.plugins import load_general_plugins
from vllm.v1.kv_offload.base import LookupResult, OffloadKey, ReqContext
from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec
from vllm.v1.kv_offload.tiering.manager import TieringOffloadingManager

from tests.tiering import resolve, tiering_spec


def main(engine_id: str, key_hexes: list[str]) -> dict[str, str]:
    load_general_plugins()
    # Unquantized weights, as the writer's: no vLLM config is current here to say so.
    tier = {"type": "memkv", "timeout_ms": 2000, "quantization": "none"}
    manager = tiering_spec([tier], engine_id).get_manager()
    assert isinstance(manager, TieringOffloadingManager)
    rows = np.asarray(manager.primary_tier.get_kv_memoryview())
    ctx = ReqContext(req_id="reader")
    manager.on_new_request(ctx)
    out: dict[str, str] = {}
    try:
        for key_hex in key_hexes:
            key = OffloadKey(bytes.fromhex(key_hex))
            if resolve(manager, key, ctx) is not LookupResult.HIT:
                out[key_hex] = "MISS"
                continue
            spec = manager.prepare_load([key], ctx)
            assert isinstance(spec, CPULoadStoreSpec)
            out[key_hex] = hashlib.sha256(rows[int(spec.chunk_ids[0])].tobytes()).hexdigest()
            manager.complete_load([key], ctx)
        manager.on_request_finished(ctx)
        del rows  # a view of vLLM's buffer, which shutdown unmaps
    finally:
        manager.shutdown()
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2:])))
