# SPDX-License-Identifier: Apache-2.0
"""The real `lmcache server` (multiprocess mode) started with the memkv L2 adapter from
its command line, as an operator would: it must start, load MemkvConnector through the
native_plugin factory, put it under L2 eviction and report it healthy on /status."""

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_lmcache_server_runs_with_memkv_l2_adapter(server):
    spec = {
        "type": "native_plugin",
        "module_path": "memkv_lmcache",
        "class_name": "MemkvConnector",
        "adapter_params": {"servers": [server.address], "auth_key": server.auth_key, "transport": "tcp"},
        "max_capacity_gb": 0.05,
        "eviction": {"eviction_policy": "LRU", "trigger_watermark": 0.8, "eviction_ratio": 0.2},
    }
    http_port = free_port()
    lmcache = Path(sys.executable).with_name("lmcache")
    args = [
        str(lmcache), "server", "--host", "127.0.0.1", "--port", str(free_port()),
        "--http-host", "127.0.0.1", "--http-port", str(http_port),
        "--l1-size-gb", "0.05", "--eviction-policy", "LRU", "--l2-adapter", json.dumps(spec),
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
        assert sm["l2_adapters"] == [{"is_healthy": True, "type": "MemkvConnector"}], sm["l2_adapters"]
        (evicted,) = sm["l2_eviction_controller"]["adapters"]
        assert evicted["eviction_policy"] == "LRU"
        assert evicted["total_capacity_bytes"] == int(0.05 * 1024**3)
        assert status["is_healthy"]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
