# SPDX-License-Identifier: Apache-2.0
"""The real `lmcache server` (multiprocess mode) started with the memkv L2 adapter from
its command line, as an operator would, once per adapter type: it must start, load
MemkvConnector through the native_plugin factory or MemkvL2Adapter through the plugin factory
(which registers the server's L1 arena), put it under L2 eviction and report it healthy on
/status."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

START_DEADLINE_S = 120  # importing torch and LMCache on a busy 2-core machine
L1_SIZE_GB = 0.05
CAPACITY_GB = 0.05


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def adapter_spec(adapter_type: str, server) -> dict:
    params = {"servers": [server.address], "auth_key": server.auth_key, "transport": "tcp"}
    eviction = {"eviction_policy": "LRU", "trigger_watermark": 0.8, "eviction_ratio": 0.2}
    if adapter_type == "native_plugin":
        return {
            "type": "native_plugin",
            "module_path": "memkv_lmcache",
            "class_name": "MemkvConnector",
            "adapter_params": params,
            "max_capacity_gb": CAPACITY_GB,
            "eviction": eviction,
        }
    return {
        "type": "plugin",
        "module_path": "memkv_lmcache.l2",
        "class_name": "MemkvL2Adapter",
        "adapter_params": {**params, "max_capacity_gb": CAPACITY_GB},
        "eviction": eviction,
    }


@pytest.mark.parametrize("adapter_type", ["native_plugin", "plugin"])
def test_lmcache_server_runs_with_memkv_l2_adapter(server, adapter_type):
    spec = adapter_spec(adapter_type, server)
    http_port = free_port()
    lmcache = Path(sys.executable).with_name("lmcache")
    args = [
        str(lmcache), "server", "--host", "127.0.0.1", "--port", str(free_port()),
        "--http-host", "127.0.0.1", "--http-port", str(http_port),
        "--l1-size-gb", str(L1_SIZE_GB), "--eviction-policy", "LRU", "--l2-adapter", json.dumps(spec),
    ]  # fmt: skip
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "LMCACHE_DISABLE_BANNER": "1"},
    )
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True).start()
    try:
        status = None
        end = time.monotonic() + START_DEADLINE_S
        while status is None:
            if proc.poll() is not None:
                pytest.fail(f"lmcache server exited with {proc.returncode}:\n" + "".join(log[-40:]))
            if time.monotonic() > end:
                pytest.fail("lmcache server did not answer /status in time:\n" + "".join(log[-40:]))
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/status", timeout=2) as r:
                    status = json.load(r)
            except OSError:
                time.sleep(0.5)
        sm = status["storage_manager"]
        if adapter_type == "native_plugin":
            expected = {"is_healthy": True, "type": "MemkvConnector"}
        else:
            # The server's whole L1 arena, registered through the descriptor it passed.
            l1_bytes = sm["l1_managers"]["_default"]["memory_total_bytes"]
            assert l1_bytes == int(L1_SIZE_GB * 1024**3)
            expected = {
                "is_healthy": True,
                "type": "memkv",
                "transport": "tcp",
                "l1_registered_bytes": l1_bytes,
            }
        assert sm["l2_adapters"] == [expected], sm["l2_adapters"]
        (evicted,) = sm["l2_eviction_controller"]["adapters"]
        assert evicted["eviction_policy"] == "LRU"
        assert evicted["total_capacity_bytes"] == int(CAPACITY_GB * 1024**3)
        assert status["is_healthy"]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
