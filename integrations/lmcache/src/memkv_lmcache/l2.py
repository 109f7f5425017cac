# SPDX-License-Identifier: Apache-2.0
"""memkv as LMCache's ``plugin`` L2 adapter (multiprocess mode).

    {"type": "plugin", "module_path": "memkv_lmcache.l2", "class_name": "MemkvL2Adapter",
     "adapter_params": {"servers": [...], "auth_key_file": "...", "max_capacity_gb": 512}}

The data path is the one ``native_plugin`` uses (``MemkvConnector`` under LMCache's own
``NativeConnectorL2Adapter``). What ``plugin`` adds is the L1 arena: LMCache's factory hands
this adapter an ``L1MemoryDesc``, and registering that memory with memkv up front lets RDMA
move chunks straight between L1 and the servers instead of through the client's staging
buffers. LMCache finds ``MemkvL2AdapterConfig`` by its naming convention (class name +
"Config") and builds it from ``adapter_params``.
"""

from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING, Any, Mapping, Optional

import memkv
from lmcache.logging import init_logger
from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import NativeConnectorL2Adapter

from memkv_lmcache._connector import MemkvConnector
from memkv_lmcache._params import CLIENT_PARAMS, client_kwargs

if TYPE_CHECKING:
    from lmcache.v1.distributed.internal_api import L1MemoryDesc

logger = init_logger(__name__)

ADAPTER_PARAMS = CLIENT_PARAMS + ("max_capacity_gb",)


class MemkvL2AdapterConfig(L2AdapterConfigBase):
    """``adapter_params`` of the memkv ``plugin`` adapter: the memkv client settings
    (``memkv_lmcache.client_kwargs``) and ``max_capacity_gb``.

    ``max_capacity_gb`` lives in ``adapter_params`` here, not next to ``type`` as with
    ``native_plugin``: LMCache's ``plugin`` config ignores unknown outer keys.
    """

    def __init__(self, client: Optional[Mapping[str, Any]] = None, max_capacity_gb: float = 0.0):
        self.client = dict(client or {})
        self.max_capacity_gb = max_capacity_gb

    @classmethod
    def from_dict(cls, d: dict) -> "MemkvL2AdapterConfig":
        unknown = sorted(set(d) - set(ADAPTER_PARAMS))
        if unknown:
            raise TypeError(
                f"unknown memkv setting(s) {', '.join('adapter_params.' + u for u in unknown)}; "
                f"accepted: {', '.join(ADAPTER_PARAMS)}"
            )
        params = dict(d)
        capacity = params.pop("max_capacity_gb", None)
        if capacity is None:
            capacity = 0
        if (
            isinstance(capacity, bool)
            or not isinstance(capacity, (int, float))
            or not math.isfinite(capacity)
            or capacity < 0
        ):
            raise ValueError(
                f"adapter_params.max_capacity_gb must be a non-negative number of GiB, got {capacity!r}"
            )
        return cls(client_kwargs(params, where="adapter_params."), float(capacity))

    @classmethod
    def help(cls) -> str:
        return (
            "memkv plugin L2 adapter, adapter_params (all optional):\n"
            "- servers: list of host:port, or 'h:p,h:p' (default: MEMKV_SERVERS)\n"
            "- auth_key (64 hex digits) or auth_key_file (default: MEMKV_AUTH_KEY, key file)\n"
            "- transport: auto, tcp, rdma or shm (default: MEMKV_TRANSPORT, else auto)\n"
            "- timeout_ms: per-call deadline (default: MEMKV_TIMEOUT_MS)\n"
            "- config: a memkv client YAML (default: MEMKV_CONFIG)\n"
            "- max_capacity_gb: capacity LMCache tracks for L2 eviction (default 0 = none)\n"
            "\n"
            'Example: {"type": "plugin", "module_path": "memkv_lmcache.l2", '
            '"class_name": "MemkvL2Adapter", "adapter_params": {"servers": ["10.0.0.1:9900"], '
            '"max_capacity_gb": 512}, "eviction": {"eviction_policy": "LRU"}}'
        )


class MemkvL2Adapter(NativeConnectorL2Adapter):
    """LMCache's ``NativeConnectorL2Adapter`` over ``MemkvConnector``, with LMCache's L1
    arena registered with memkv. ``report_status()`` adds ``transport`` and
    ``l1_registered_bytes``."""

    def __init__(self, config: MemkvL2AdapterConfig, l1_memory_desc: Optional["L1MemoryDesc"] = None):
        if not isinstance(config, MemkvL2AdapterConfig):
            raise TypeError(
                f"MemkvL2Adapter takes a MemkvL2AdapterConfig, got {type(config).__name__}; "
                "leave config_class_name out of the adapter JSON, LMCache finds the class by its name"
            )
        connector = MemkvConnector(**config.client)
        try:
            registered = register_l1(connector, l1_memory_desc)
            super().__init__(
                connector,
                max_capacity_gb=config.max_capacity_gb,
                type_name="memkv",
                extra_status={"transport": connector.transport, "l1_registered_bytes": registered},
            )
        except BaseException:
            connector.close()
            raise
        logger.info(
            "memkv plugin L2 adapter ready: transport %s, %d bytes of L1 registered, capacity %s GiB",
            connector.transport,
            registered,
            config.max_capacity_gb or "untracked",
        )


def register_l1(connector: MemkvConnector, desc: Optional["L1MemoryDesc"]) -> int:
    """Register LMCache's L1 arena with memkv; returns the bytes registered (0 for none).

    Only ``stable_registration_size`` bytes when LMCache gives it: a lazily grown L1 reports
    its final ``size`` before that memory exists, and only the prefix already allocated
    (and pinned) is safe to register. Buffers outside the registered range still work, through
    the client's staging path.
    """
    if desc is None:
        return 0
    nbytes = desc.size if desc.stable_registration_size is None else desc.stable_registration_size
    if nbytes <= 0 or not desc.ptr:
        return 0
    view = memoryview((ctypes.c_ubyte * nbytes).from_address(desc.ptr)).cast("B")
    try:
        connector.register(view)
    except memkv.Error as e:
        # TCP and staged RDMA still work; only the copy-free RDMA path is lost.
        logger.warning("memkv: registering %d bytes of LMCache's L1 arena failed: %s", nbytes, e)
        return 0
    return nbytes
