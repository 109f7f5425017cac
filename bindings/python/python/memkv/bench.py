"""Throughput of the Python client: ``python -m memkv.bench``.

Each of ``--threads`` threads loops over batch calls (``put_many`` of ``--batch`` values, or
``get_many_into`` into preallocated buffers) for ``--seconds``; the table gives GiB/s, calls/s
and per-call latency percentiles. ``--redis HOST:PORT`` runs the same workload through redis-py
(hiredis parser, a non-transactional pipeline of SET or GET per batch) for comparison, and
``--json`` prints one JSON document. Servers and key come from the arguments or, as for
``memkv.Client``, from the ``MEMKV_*`` environment.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ._memkv import Client

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20}
KEY_SPACE_BYTES = 256 << 20


def parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1] if t and t[-1] in "KM" else ""
    n = int(t[: len(t) - len(unit)]) * UNITS[unit]
    if not 1 <= n <= 64 << 20:
        raise argparse.ArgumentTypeError(f"size {text!r}: must be 1 byte to 64 MiB")
    return n


def show_size(n: int) -> str:
    for unit, scale in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


class Workload:
    """Keys and buffers of one size; `call(thread, round)` does one batch."""

    def __init__(self, size: int, batch: int, threads: int) -> None:
        self.size, self.batch = size, batch
        self.keys = max(16, min(10_000, KEY_SPACE_BYTES // size))
        self.value = bytes(range(256)) * (size // 256) + bytes(size % 256)
        self.buffers = [[bytearray(size) for _ in range(batch)] for _ in range(threads)]

    def batch_keys(self, thread: int, round_: int) -> list[str]:
        start = (thread * 7919 + round_ * self.batch) % self.keys
        return [f"pybench/{self.size}/{(start + i) % self.keys}" for i in range(self.batch)]


def memkv_calls(client: Client, w: Workload, op: str) -> Callable[[int, int], None]:
    def put(thread: int, round_: int) -> None:
        client.put_many([(k, w.value) for k in w.batch_keys(thread, round_)])

    def get(thread: int, round_: int) -> None:
        lens = client.get_many_into(w.batch_keys(thread, round_), w.buffers[thread])
        if None in lens:
            raise RuntimeError("a key of the get workload is missing (was the space stored?)")

    return put if op == "put" else get


def redis_calls(address: str, w: Workload, op: str, threads: int) -> Callable[[int, int], None]:
    import redis  # only for --redis

    host, port = address.rsplit(":", 1)
    conns = [redis.Redis(host=host, port=int(port)) for _ in range(threads)]

    def put(thread: int, round_: int) -> None:
        pipe = conns[thread].pipeline(transaction=False)
        for k in w.batch_keys(thread, round_):
            pipe.set(k, w.value)
        pipe.execute()

    def get(thread: int, round_: int) -> None:
        pipe = conns[thread].pipeline(transaction=False)
        for k in w.batch_keys(thread, round_):
            pipe.get(k)
        if None in pipe.execute():
            raise RuntimeError("a key of the get workload is missing in Redis")

    return put if op == "put" else get


def run(call: Callable[[int, int], None], w: Workload, threads: int, seconds: float) -> dict[str, Any]:
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)
    stop_at = [0.0]

    def worker(t: int) -> None:
        start.wait()
        r = 0
        try:
            while (now := time.perf_counter()) < stop_at[0]:
                call(t, r)
                latencies[t].append(time.perf_counter() - now)
                r += 1
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for p in pool:
        p.start()
    stop_at[0] = time.perf_counter() + seconds
    began = time.perf_counter()
    start.wait()
    for p in pool:
        p.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    all_lat = sorted(x for per in latencies for x in per)
    calls = len(all_lat)
    return {
        "size": w.size,
        "batch": w.batch,
        "threads": threads,
        "calls": calls,
        "seconds": elapsed,
        "gib_per_sec": calls * w.batch * w.size / elapsed / (1 << 30),
        "items_per_sec": calls * w.batch / elapsed,
        "p50_us": percentile(all_lat, 0.50) * 1e6,
        "p99_us": percentile(all_lat, 0.99) * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m memkv.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", help="host:port,... (default: MEMKV_SERVERS / MEMKV_CONFIG)")
    p.add_argument("--auth-key", help="64 hex digits (default: MEMKV_AUTH_KEY, the key file)")
    p.add_argument("--redis", metavar="HOST:PORT", help="bench redis-py against this Redis instead")
    p.add_argument("--op", choices=["put", "get"], default="put")
    p.add_argument("--sizes", default="256K,1M,4M", help="value sizes (default 256K,1M,4M)")
    p.add_argument("--threads", type=int, default=4, help="concurrent callers (default 4)")
    p.add_argument("--batch", type=int, default=8, help="values per call (default 8)")
    p.add_argument("--seconds", type=float, default=2.0, help="per size (default 2)")
    p.add_argument("--warmup", type=float, default=1.0, help="untimed, per size (default 1)")
    p.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = p.parse_args(argv)
    if not 1 <= args.threads <= 256:
        p.error("--threads: 1 to 256")
    if not 1 <= args.batch <= 4096:
        p.error("--batch: 1 to 4096")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    client = None if args.redis else Client(servers=args.servers, auth_key=args.auth_key)
    results: list[dict[str, Any]] = []
    for size in sizes:
        w = Workload(size, args.batch, args.threads)

        def calls(op: str) -> Callable[[int, int], None]:
            if args.redis:
                return redis_calls(args.redis, w, op, args.threads)
            assert client is not None
            return memkv_calls(client, w, op)

        if args.op == "get":
            put = calls("put")
            for round_ in range((w.keys + w.batch - 1) // w.batch):
                put(0, round_)
        call = calls(args.op)
        if args.warmup > 0:
            run(call, w, args.threads, args.warmup)
        results.append(run(call, w, args.threads, args.seconds))
        del w
    client_name = "redis-py" if args.redis else "memkv (Python)"
    if args.json:
        json.dump({"client": client_name, "op": args.op, "results": results}, sys.stdout)
        print()
        return 0
    print(f"{client_name} {args.op}: {args.threads} threads, batch {args.batch}")
    print("| size | GiB/s | items/s | p50 us | p99 us |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {show_size(r['size'])} | {r['gib_per_sec']:.2f} | {r['items_per_sec']:.0f} "
              f"| {r['p50_us']:.0f} | {r['p99_us']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
