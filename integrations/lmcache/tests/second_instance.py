# SPDX-License-Identifier: Apache-2.0
"""A second LMCache instance in a fresh process: loads keys another process stored and
prints "hit"/"miss" per key. A hit whose bytes differ from the expected pattern exits 1.

  second_instance.py native_plugin ADAPTER_JSON '{"ids": [...], "sizes": [...], "seeds": [...]}'
  second_instance.py storage_plugin - '{"config": PATH, "ids": [...], "seeds": [...]}'
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from conftest import pattern  # noqa: E402


def native_plugin(spec: str, args: dict) -> list[str]:
    from l2_ops import build_adapter, load

    _, adapter = build_adapter(json.loads(spec))
    try:
        hits, datas = load(adapter, args["ids"], args["sizes"])
    finally:
        adapter.close()
    out = []
    for hit, data, seed in zip(hits, datas, args["seeds"], strict=True):
        if hit and (seed is None or data != pattern(seed, len(data))):
            sys.exit(f"wrong bytes for seed {seed}")
        out.append("hit" if hit else "miss")
    return out


def storage_plugin(args: dict) -> list[str]:
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.event_manager import EventManager
    from lmcache.v1.storage_backend.storage_manager import StorageManager
    from test_storage_plugin import key, metadata

    sm = StorageManager(LMCacheEngineConfig.from_file(args["config"]), metadata(), EventManager())
    try:
        objs = sm.batched_get([key(i) for i in args["ids"]], location="memkv")
        out = []
        for obj, seed in zip(objs, args["seeds"], strict=True):
            if obj is not None:
                data = bytes(obj.byte_array)
                if seed is None or data != pattern(seed, len(data)):
                    sys.exit(f"wrong bytes for seed {seed}")
            out.append("hit" if obj is not None else "miss")
        return out
    finally:
        sm.close()


if __name__ == "__main__":
    mode, first, rest = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    result = native_plugin(first, rest) if mode == "native_plugin" else storage_plugin(rest)
    print(" ".join(result))
