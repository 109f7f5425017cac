"""Chunk transfers between vLLM's CPU offload buffer and memkv, off the scheduler thread.

vLLM calls its secondary tiers from the scheduler, which must never wait on I/O, so every
transfer runs on a small pool of threads with the blocking memkv client (it releases the GIL
while it waits). Loads and stores have separate pools: a burst of stores, which nobody waits
for, must not queue ahead of a load that a request is waiting for.

Bytes move in place: each chunk is one row of the buffer, handed to ``put_many`` /
``get_many_into`` as a memoryview slice, with no copy on the Python side.

Nothing here imports vLLM, so it can be reasoned about (and tested) on its own.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .store import Store, StoreUnavailable, item_results

logger = logging.getLogger("vllm.memkv_vllm")


@dataclass(frozen=True)
class Outcome:
    """How one job ended: ``ok[i]`` says whether chunk i was stored (or loaded) whole."""

    job_id: int
    ok: list[bool]
    nbytes: int
    seconds: float


class ChunkTransfers:
    def __init__(
        self,
        store: Store,
        rows: memoryview,
        row_bytes: int,
        load_threads: int,
        store_threads: int,
    ) -> None:
        if rows.ndim != 1 or rows.itemsize != 1 or rows.nbytes % row_bytes:
            raise ValueError("memkv_vllm: the offload buffer must be flat bytes, whole rows")
        self._store = store
        self._rows = rows
        self._row_bytes = row_bytes
        self._num_rows = rows.nbytes // row_bytes
        self._loads = concurrent.futures.ThreadPoolExecutor(load_threads, "memkv_tier_load")
        self._stores = concurrent.futures.ThreadPoolExecutor(store_threads, "memkv_tier_store")
        self._done: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._in_flight: set[concurrent.futures.Future[None]] = set()

    def _row(self, index: int) -> memoryview:
        if not 0 <= index < self._num_rows:
            raise IndexError(f"memkv_vllm: chunk {index} outside the {self._num_rows} of the buffer")
        start = index * self._row_bytes
        return self._rows[start : start + self._row_bytes]

    def submit_store(self, job_id: int, keys: Sequence[str], rows: Sequence[int]) -> None:
        """Store rows ``rows[i]`` under ``keys[i]``, skipping keys memkv already holds."""
        self._submit(self._stores, job_id, keys, rows, self._store_rows)

    def submit_load(self, job_id: int, keys: Sequence[str], rows: Sequence[int]) -> None:
        """Read ``keys[i]`` into row ``rows[i]``; a key that is missing or not exactly one row
        long is a failed chunk (its row may hold anything and must not be used)."""
        self._submit(self._loads, job_id, keys, rows, self._load_rows)

    def _submit(
        self,
        pool: concurrent.futures.ThreadPoolExecutor,
        job_id: int,
        keys: Sequence[str],
        rows: Sequence[int],
        move: Callable[[list[str], list[memoryview]], tuple[list[bool], int]],
    ) -> None:
        if len(keys) != len(rows):
            raise ValueError(f"memkv_vllm: job {job_id} has {len(keys)} keys for {len(rows)} chunks")
        keys, rows = list(keys), [int(r) for r in rows]

        def run() -> None:
            t0 = time.monotonic()
            try:
                ok, nbytes = move(keys, [self._row(r) for r in rows])
            except Exception:
                # A bug must still end the job, or vLLM keeps its chunks pinned forever.
                logger.exception("memkv_vllm tier: job %d failed", job_id)
                ok, nbytes = [False] * len(keys), 0
            self._done.put(Outcome(job_id, ok, nbytes, time.monotonic() - t0))

        future = pool.submit(run)
        with self._lock:
            self._in_flight.add(future)
        future.add_done_callback(self._forget)

    def _forget(self, future: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._in_flight.discard(future)

    def _store_rows(self, keys: list[str], views: list[memoryview]) -> tuple[list[bool], int]:
        if not keys:
            return [], 0
        try:
            present = self._store.call("exists_many", keys)
        except StoreUnavailable as e:
            # Keys whose server answered keep their answer; the others are stored (again).
            present = [r is True for r in item_results(e, len(keys))]
        todo = [i for i, p in enumerate(present) if not p]
        ok = [bool(p) for p in present]
        if not todo:
            return ok, 0
        try:
            self._store.call("put_many", [(keys[i], views[i]) for i in todo])
            stored = [True] * len(todo)
        except StoreUnavailable as e:
            # Items that went through are stored even when others failed.
            stored = [r is None for r in item_results(e, len(todo))]
        for i, s in zip(todo, stored):
            ok[i] = s
        return ok, sum(stored) * self._row_bytes

    def _load_rows(self, keys: list[str], views: list[memoryview]) -> tuple[list[bool], int]:
        if not keys:
            return [], 0
        try:
            sizes = self._store.call("get_many_into", keys, views)
        except StoreUnavailable as e:
            sizes = item_results(e, len(keys))
        # A shorter value than the row would leave stale bytes behind it: not a hit.
        ok = [type(n) is int and n == self._row_bytes for n in sizes]
        return ok, sum(ok) * self._row_bytes

    def finished(self) -> list[Outcome]:
        """Jobs that ended since the last call; never waits."""
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def drain(self) -> None:
        """Wait until no job is running or queued; their outcomes stay for ``finished``."""
        while True:
            with self._lock:
                pending = list(self._in_flight)
            if not pending:
                return
            concurrent.futures.wait(pending)

    def shutdown(self) -> None:
        # Queued jobs never start (nothing of theirs touches the buffer); running ones end
        # within the memkv deadline.
        self._loads.shutdown(wait=True, cancel_futures=True)
        self._stores.shutdown(wait=True, cancel_futures=True)


