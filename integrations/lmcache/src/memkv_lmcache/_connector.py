# SPDX-License-Identifier: Apache-2.0
"""The LMCache ``native_plugin`` connector.

LMCache's factory calls ``MemkvConnector(**adapter_params)`` and wraps the object in
``NativeConnectorL2Adapter``, which submits batches, polls ``event_fd()`` from its demux
thread and calls ``drain_completions()``. All of that is implemented in Rust by
``memkv.MemkvConnector`` (submits never block, the GIL is released, buffers are held
until their completion). This class validates ``adapter_params``, so a typo is a clear
error at start-up instead of a silent fallback to environment defaults.
"""

from __future__ import annotations

from typing import Any

import memkv

from memkv_lmcache._params import client_kwargs


class MemkvConnector:
    """memkv behind LMCache's native connector contract (event_fd, submit_batch_*,
    drain_completions, close), including ``submit_batch_delete`` so that L2 eviction
    really frees memkv memory; plus ``register`` (memory for RDMA) and ``transport``.

    adapter_params: ``servers`` (list or "h:p,h:p"), ``auth_key`` (64 hex digits) or
    ``auth_key_file``, ``transport`` ("auto", "tcp", "rdma"), ``timeout_ms``, ``config``
    (a memkv client YAML). Anything left out comes from the MEMKV_* environment.
    """

    def __init__(self, **adapter_params: Any) -> None:
        kwargs = client_kwargs(adapter_params, where="adapter_params.")
        self._native = memkv.MemkvConnector(**kwargs)
        # Bound once: these are called per batch from LMCache's hot path.
        self.event_fd = self._native.event_fd
        self.submit_batch_get = self._native.submit_batch_get
        self.submit_batch_set = self._native.submit_batch_set
        self.submit_batch_exists = self._native.submit_batch_exists
        self.submit_batch_delete = self._native.submit_batch_delete
        # LMCache's consumers (NativeConnectorL2Adapter's demux thread, ConnectorClientBase's
        # add_reader) poll the eventfd and never read it: draining resets it (in memkv), or
        # it would stay readable and they would spin.
        self.drain_completions = self._native.drain_completions
        # The ``plugin`` adapter (memkv_lmcache.l2) registers LMCache's L1 arena through this.
        self.register = self._native.register

    @property
    def transport(self) -> str:
        return self._native.transport

    def close(self) -> None:
        self._native.close()

    def __repr__(self) -> str:
        return f"memkv_lmcache.MemkvConnector({self._native!r})"
