"""memkv calls the connector keeps off vLLM's engine step.

vLLM's scheduler asks for a request's hit on its own thread, and the worker runs the whole
batch's step around its loads: a memkv call that waits there (a slow or stalled server, a large
load or save) holds every request in the engine, not only the one it is for. So lookups,
asynchronous loads and saves run on threads of their own, and the step only collects what has
finished.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("vllm.memkv_vllm")


class Lookups:
    """The scheduler's lookups, run ``threads`` at a time, each answered when it ends."""

    def __init__(self, lookup: Callable[[list[str]], int], threads: int = 4) -> None:
        self._lookup = lookup
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="memkv-lookup")

    def start(self, hashes: list[str]) -> Future[int]:
        return self._pool.submit(self._lookup, hashes)

    @staticmethod
    def wait(lookup: Future[int], seconds: float) -> None:
        wait([lookup], timeout=seconds)

    @staticmethod
    def answer(lookup: Future[int]) -> int | None:
        """The lookup's hit, or None while it runs; a lookup that raised found nothing."""
        if not lookup.done():
            return None
        if lookup.cancelled():
            return 0
        error = lookup.exception()
        if error is not None:
            logger.warning("memkv_vllm: a lookup failed unexpectedly (%s: %s); claiming nothing",
                           type(error).__name__, error)
            return 0
        return lookup.result()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class LoadJob:
    """One step's loads: ``keys[i]`` is read into ``buffers[i]``, a page of block ``owners[i]``;
    ``commits`` are the layers' (commit, first, count) for pages staged through host copies."""

    req_ids: list[str]
    background: bool
    keys: list[str] = field(default_factory=list)
    buffers: list[memoryview] = field(default_factory=list)
    owners: list[int] = field(default_factory=list)
    commits: list[tuple[Callable[[list[bool]], None], int, int]] = field(default_factory=list)
    started: float = 0.0
    lengths: list[Any] | None = None


# Jobs at once, each a step's batch that memkv spreads over its connections: more than one so
# that a job waiting out its deadline on a stalled server does not hold up the next step's.
JOB_THREADS = 2


class Loads:
    """Loads that run while vLLM's steps go on, on threads of their own; ``finished`` hands
    back the jobs that ended."""

    def __init__(self, fetch: Callable[[LoadJob], list[Any]]) -> None:
        self._fetch = fetch
        self._pool = ThreadPoolExecutor(max_workers=JOB_THREADS, thread_name_prefix="memkv-load")
        self._lock = threading.Lock()
        self._done: list[LoadJob] = []

    def submit(self, job: LoadJob) -> None:
        self._pool.submit(self._run, job)

    def _run(self, job: LoadJob) -> None:
        try:
            job.lengths = self._fetch(job)
        except Exception as e:  # noqa: BLE001 - a load that fails is recomputed, never fatal
            logger.warning("memkv_vllm: loading %d values failed unexpectedly (%s: %s)",
                           len(job.keys), type(e).__name__, e)
            job.lengths = [None] * len(job.keys)
        with self._lock:
            self._done.append(job)

    def finished(self) -> list[LoadJob]:
        with self._lock:
            done, self._done = self._done, []
        return done

    def close(self) -> None:
        # The jobs write into vLLM's KV cache: it must not be freed under them. Each memkv
        # call ends within its deadline, so this wait is bounded.
        self._pool.shutdown(wait=True)


@dataclass
class SaveJob:
    """One step's saves: ``items`` (key, page view) of the chunks of ``req_ids``."""

    req_ids: set[str]
    items: list[tuple[str, memoryview]]
    chunks: int
    started: float = 0.0


class Saves:
    """Saves that run while vLLM's steps go on, on threads of their own (so they never queue
    loads), reading pages straight from the KV cache.

    vLLM keeps a block's pages as they are while its request runs; it frees them when the
    request finishes (held back here until its saves end: ``finished``) or is preempted (the
    worker first waits for its saves: ``wait_for``)."""

    def __init__(self, put: Callable[[SaveJob], None]) -> None:
        self._put = put
        self._pool = ThreadPoolExecutor(max_workers=JOB_THREADS, thread_name_prefix="memkv-save")
        self._cond = threading.Condition()
        self._in_flight: dict[str, int] = {}  # request -> its save jobs not yet ended
        self._saved: set[str] = set()  # requests with saves: vLLM holds their blocks at finish
        self._finishing: set[str] = set()  # finished, a save still reading their pages
        self._released: set[str] = set()  # finished, saves ended: to report

    def submit(self, job: SaveJob) -> None:
        with self._cond:
            for r in job.req_ids:
                self._in_flight[r] = self._in_flight.get(r, 0) + 1
                self._saved.add(r)
        self._pool.submit(self._run, job)

    def _run(self, job: SaveJob) -> None:
        try:
            self._put(job)
        except Exception as e:  # noqa: BLE001 - a failed save is a future miss, never fatal
            logger.warning("memkv_vllm: saving %d chunks failed unexpectedly (%s: %s)",
                           job.chunks, type(e).__name__, e)
        finally:
            with self._cond:
                for r in job.req_ids:
                    self._in_flight[r] -= 1
                    if self._in_flight[r] == 0:
                        del self._in_flight[r]
                        if r in self._finishing:
                            self._finishing.discard(r)
                            self._released.add(r)
                self._cond.notify_all()

    def finished(self, finished_req_ids: set[str]) -> set[str]:
        """Requests whose blocks vLLM may free now: finished (now or earlier), saves ended."""
        with self._cond:
            for r in finished_req_ids & self._saved:
                self._saved.discard(r)
                if r in self._in_flight:
                    self._finishing.add(r)
                else:
                    self._released.add(r)
            released, self._released = self._released, set()
        return released

    def wait_for(self, req_ids: set[str]) -> None:
        """Until no save reads the pages of ``req_ids`` (bounded by memkv's deadline)."""
        with self._cond:
            self._cond.wait_for(lambda: not any(r in self._in_flight for r in req_ids))

    def close(self) -> None:
        # The jobs read vLLM's KV cache: it must not be freed under them.
        self._pool.shutdown(wait=True)
