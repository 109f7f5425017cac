# SPDX-License-Identifier: Apache-2.0
"""LMCache L2 store / load throughput through LMCache's own adapters: memkv via
`native_plugin` against LMCache's built-in RESP (Redis) adapter on redis-server, with the
same objects and the same concurrency. Run it with integrations/lmcache/run-bench.

Both adapters are NativeConnectorL2Adapter (LMCache's bridge) around a native client:
memkv's Rust client, or LMCache's C++ Redis client. Each round keeps `--inflight` tasks of
`--batch` objects in flight; a task's latency is from submit to its completion being seen.
Loads are checked bit-exact against what was stored.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from lmcache.v1.distributed.api import ObjectKey
from lmcache.v1.distributed.l2_adapters.config import add_l2_adapters_args, parse_args_to_l2_adapters_config
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj
from memkv.testing import MemkvServer

MiB = 1024 * 1024


def build(spec: dict):
    parser = add_l2_adapters_args(argparse.ArgumentParser())
    (cfg,) = parse_args_to_l2_adapters_config(parser.parse_args(["--l2-adapter", json.dumps(spec)])).adapters
    return create_l2_adapter_from_registry(cfg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def redis_server():
    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("redis-server not found (apt-get install redis-server)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="lmc-bench-redis-") as d:
        args = [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            d,
        ]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            end = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if time.monotonic() > end or proc.poll() is not None:
                        sys.exit("redis-server did not start")
                    time.sleep(0.05)
            yield port
        finally:
            proc.terminate()
            proc.wait(10)


def memory_obj(tensor: torch.Tensor) -> TensorMemoryObj:
    n = tensor.numel()
    meta = MemoryObjMetadata(
        shape=torch.Size([n]), dtype=torch.uint8, address=0, phy_size=n, fmt=MemoryFormat.KV_2LTD, ref_count=1
    )
    return TensorMemoryObj(tensor, meta, parent_allocator=None)


def run_round(adapter, kind: str, keys, objs, batch: int, inflight: int) -> tuple[float, list[float], int]:
    """Submit all objects in tasks of `batch`, `inflight` tasks at a time.
    Returns (seconds, per-task latencies, failed tasks)."""
    if kind == "store":
        fd, submit = adapter.get_store_event_fd(), adapter.submit_store_task

        def done():
            return {t: r.is_successful() for t, r in adapter.pop_completed_store_tasks().items()}
    else:
        fd, submit = adapter.get_load_event_fd(), adapter.submit_load_task

        def done():
            out = {}
            for t in list(pending):
                bm = adapter.query_load_result(t)
                if bm is not None:
                    out[t] = bm.popcount() == pending[t][1]
            return out

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    tasks = [(keys[i : i + batch], objs[i : i + batch]) for i in range(0, len(keys), batch)]
    pending: dict[int, tuple[float, int]] = {}
    latencies, failed, nxt = [], 0, 0
    t0 = time.perf_counter()
    while nxt < len(tasks) or pending:
        while nxt < len(tasks) and len(pending) < inflight:
            k, o = tasks[nxt]
            pending[submit(k, o)] = (time.perf_counter(), len(k))
            nxt += 1
        if poller.poll(1000):
            try:
                os.read(fd, 8)
            except BlockingIOError:
                pass
        now = time.perf_counter()
        for t, ok in done().items():
            start, _ = pending.pop(t)
            latencies.append(now - start)
            failed += not ok
    return time.perf_counter() - t0, latencies, failed


def bench(name: str, adapter, size: int, count: int, batch: int, inflight: int, rounds: int) -> list[dict]:
    gen = torch.Generator().manual_seed(size)
    srcs = [torch.randint(0, 256, (size,), dtype=torch.uint8, generator=gen) for _ in range(count)]
    keys = [
        ObjectKey(chunk_hash=ObjectKey.IntHash2Bytes(i + size), model_name="bench", kv_rank=0)
        for i in range(count)
    ]
    rows = []
    for r in range(rounds):
        store_objs = [memory_obj(t) for t in srcs]
        secs, lat, failed = run_round(adapter, "store", keys, store_objs, batch, inflight)
        rows.append(row(name, "store", size, count, secs, lat, failed, r))
        dsts = [memory_obj(torch.zeros(size, dtype=torch.uint8)) for _ in range(count)]
        secs, lat, failed = run_round(adapter, "load", keys, dsts, batch, inflight)
        wrong = sum(not torch.equal(a.tensor, b) for a, b in zip(dsts, srcs, strict=True))
        if wrong:
            sys.exit(f"{name}: {wrong} of {count} loaded objects differ from what was stored")
        rows.append(row(name, "load", size, count, secs, lat, failed, r))
        del store_objs, dsts
    adapter.delete(keys)
    return rows


def row(name, op, size, count, secs, lat, failed, rnd) -> dict:
    lat_ms = sorted(x * 1000 for x in lat)
    p99 = lat_ms[min(len(lat_ms) - 1, int(len(lat_ms) * 0.99))]
    return {
        "adapter": name,
        "op": op,
        "object_MiB": round(size / MiB, 3),
        "round": rnd,
        "GiB_s": count * size / secs / 1024**3,
        "p50_ms": statistics.median(lat_ms),
        "p99_ms": p99,
        "failed_tasks": failed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--sizes-mib", default="32,1", help="object sizes in MiB (32 = Llama-3-8B 256-token chunk)"
    )
    ap.add_argument("--total-mib", type=int, default=512, help="bytes moved per size and round")
    ap.add_argument("--batch", type=int, default=4, help="objects per task")
    ap.add_argument("--inflight", type=int, default=4, help="tasks in flight")
    ap.add_argument("--rounds", type=int, default=3, help="store+load rounds per size (best is reported)")
    ap.add_argument("--json", type=Path, help="also write all rows here")
    ap.add_argument(
        "--transports",
        default="auto,tcp",
        help="memkv client transports to measure, each as its own adapter (auto: shared memory with "
        "this host's server)",
    )
    a = ap.parse_args()
    sizes = [int(float(s) * MiB) for s in a.sizes_mib.split(",")]
    rows = []
    with MemkvServer(max_size=f"{2 * a.total_mib + 256} MiB") as srv, redis_server() as redis_port:
        transports = [t.strip() for t in a.transports.split(",") if t.strip()]
        adapters = {
            f"memkv-{t}": build(
                {
                    "type": "native_plugin",
                    "module_path": "memkv_lmcache",
                    "class_name": "MemkvConnector",
                    "adapter_params": {
                        "servers": [srv.address],
                        "auth_key": srv.auth_key,
                        "transport": t,
                    },
                }
            )
            for t in transports
        }
        adapters["redis"] = build({"type": "resp", "host": "127.0.0.1", "port": redis_port, "num_workers": 8})
        try:
            for size in sizes:
                count = max(1, a.total_mib * MiB // size)
                for name, adapter in adapters.items():
                    rows += bench(name, adapter, size, count, a.batch, a.inflight, a.rounds)
        finally:
            for adapter in adapters.values():
                adapter.close()
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    print(
        f"\nbatch {a.batch} x inflight {a.inflight}, {a.total_mib} MiB per size, "
        f"best of {a.rounds} rounds, one host (memkv auto = shared memory; Redis over loopback TCP)"
    )
    print(
        f"{'object':>8} {'op':>6} {'memkv':>10} | {'memkv GiB/s':>11} {'p50 ms':>7} {'p99 ms':>7} | "
        f"{'redis GiB/s':>11} {'p50 ms':>7} {'p99 ms':>7} | {'x':>5}"
    )
    for size in sizes:
        for op in ("store", "load"):
            best = {}
            for name in adapters:
                cand = [
                    r
                    for r in rows
                    if r["adapter"] == name and r["op"] == op and r["object_MiB"] == round(size / MiB, 3)
                ]
                best[name] = max(cand, key=lambda r: r["GiB_s"])
            r = best["redis"]
            for t in transports:
                m = best[f"memkv-{t}"]
                print(
                    f"{size / MiB:>6g}Mi {op:>6} {t:>10} | {m['GiB_s']:>11.2f} {m['p50_ms']:>7.1f} {m['p99_ms']:>7.1f} | "
                    f"{r['GiB_s']:>11.2f} {r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f} | "
                    f"{m['GiB_s'] / r['GiB_s']:>5.2f}"
                )
    failed = sum(r["failed_tasks"] for r in rows)
    if failed:
        sys.exit(f"{failed} tasks failed")


if __name__ == "__main__":
    main()
