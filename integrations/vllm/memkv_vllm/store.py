"""One memkv client per connector, kept for the connector's life.

A load or lookup that fails makes vLLM recompute. A server that is down or hung fails only its
own keys, and the memkv client fails them at once once it has found the server silent (it
checks the server in the background), so the client is kept through such failures: closing it used to
fail every server's keys for ``retry_after_s`` and then pay a fresh deadline. Only a failure
of the whole client (no client could be opened, a refused key, required RDMA unusable) makes
the store answer "unavailable" at once for ``retry_after_s``, then try a fresh client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import memkv

from .settings import Settings

logger = logging.getLogger("vllm.memkv_vllm")

# Failures that say the client itself is unusable: back off and open a fresh one later.
_CLIENT_ERRORS = (
    memkv.AuthenticationError,
    memkv.RdmaUnavailableError,
)


class StoreUnavailable(Exception):
    """memkv could not answer (down, backing off, or the call failed); the caller recomputes."""


class Store:
    def __init__(self, settings: Settings, who: str) -> None:
        self._kwargs = dict(settings.client_kwargs)
        self._retry_after_s = settings.retry_after_s
        self._who = who
        self._lock = threading.Lock()
        self._client: Any = None
        self._down_until = 0.0
        self._registered: list[memoryview] = []
        self._quiet_until = 0.0

    def register(self, buffers: Sequence[memoryview]) -> None:
        """Remember host buffers to register (for RDMA) with every client this store opens."""
        self._registered.extend(buffers)
        with self._lock:
            client = self._client
        if client is not None:
            self._register(client, buffers)

    def _register(self, client: Any, buffers: Sequence[memoryview]) -> None:
        """Registers `buffers` where RDMA can use them; a registration that fails (a memlock
        limit, say) leaves the client working, copying through its own buffers instead."""
        if not _registers(client):
            return
        try:
            for buf in buffers:
                client.register(buf)
        except (memkv.Error, ValueError, OSError, BufferError) as e:
            logger.warning(
                "memkv_vllm %s: cannot register %d host buffers for RDMA (%s); values are "
                "copied through the client's own registered memory instead", self._who,
                len(buffers), e,
            )

    def _client_or_raise(self) -> Any:
        with self._lock:
            if self._client is not None:
                return self._client
            if time.monotonic() < self._down_until:
                raise StoreUnavailable("memkv is backing off after a failure")
            try:
                client = memkv.Client(**self._kwargs)
            except (memkv.Error, ValueError, OSError) as e:
                self._down_until = time.monotonic() + self._retry_after_s
                logger.warning(
                    "memkv_vllm %s: cannot open a memkv client (%s); recomputing for the next "
                    "%.0f s", self._who, e, self._retry_after_s,
                )
                raise StoreUnavailable(str(e)) from e
            self._register(client, self._registered)
            logger.info("memkv_vllm %s: connected, transport %s", self._who, client.transport)
            self._client = client
            return client

    def call(self, op: str, *args: Any) -> Any:
        """``client.<op>(*args)``; a failure of the whole client closes it and backs off.

        Raises ``StoreUnavailable`` for any memkv failure, with the memkv error as its cause:
        a batch's cause carries each item's result (``item_results``).
        """
        client = self._client_or_raise()
        try:
            return getattr(client, op)(*args)
        except _CLIENT_ERRORS as e:
            with self._lock:
                if self._client is client:
                    self._client = None
                self._down_until = time.monotonic() + self._retry_after_s
            try:
                client.close()
            except memkv.Error:
                pass
            logger.warning(
                "memkv_vllm %s: %s failed (%s: %s); recomputing for the next %.0f s",
                self._who, op, type(e).__name__, e, self._retry_after_s,
            )
            raise StoreUnavailable(str(e)) from e
        except memkv.Error as e:
            # Some servers or items failed (down, hung, a value larger than its buffer): the
            # client stays, and the other servers' items keep their results. Logged once per
            # ``retry_after_s``, not on every step of an outage.
            now = time.monotonic()
            if now >= self._quiet_until:
                self._quiet_until = now + self._retry_after_s
                logger.warning(
                    "memkv_vllm %s: %s failed: %s: %s (recomputing what it missed; further "
                    "failures in the next %.0f s are not logged)", self._who, op,
                    type(e).__name__, e, self._retry_after_s,
                )
            raise StoreUnavailable(str(e)) from e

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


def item_results(error: StoreUnavailable, n: int) -> list[object]:
    """Each item's outcome of a failed batch call: what memkv got for it, or its error.

    memkv's batch errors carry every item's result; a failure without them (a client that could
    not be opened) failed every item.
    """
    results = getattr(error.__cause__, "results", None)
    if isinstance(results, list) and len(results) == n:
        return results
    return [error] * n


def _registers(client: Any) -> bool:
    """Whether to register host memory with this client: only where RDMA can use it.

    Registration is for RDMA; over TCP it does nothing useful, and measured with memkv 0.1.0 it
    made get_many_into about 1.4x slower (124 values of 128 KiB: 14.2 ms against 9.9 ms).
    """
    return not str(client.transport).startswith("tcp")
