# SPDX-License-Identifier: Apache-2.0
"""memkv as an SGLang HiCache L3 storage backend.

Selected with::

    --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "memkv",
        "module_path": "memkv_sglang.backend", "class_name": "MemKVHiCacheStorage",
        "interface_v1": 1, "servers": ["10.0.0.1:9900"], "auth_key": "..."}'

SGLang calls every method synchronously from its prefetch and backup threads; a
memkv failure (server down, timeout) turns into a miss or a failed write, never
an exception out of an I/O method, so HiCache falls back to recomputing.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, List, Optional

import memkv
import torch
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorage,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
)

from memkv_sglang.hybrid import HybridPools
from memkv_sglang.keys import KeyScheme, pool_format
from memkv_sglang.pages import ObjectRanges, group_objects, view_at
from memkv_sglang.plain import (
    PlainPages,
    group_all,
    kept_results,
    put_absent,
    read_lengths,
)

logger = logging.getLogger(__name__)


def _servers(value: Any) -> Optional[List[str]]:
    if value is None:
        return None
    if isinstance(value, str):
        servers = [s.strip() for s in value.split(",") if s.strip()]
    elif isinstance(value, (list, tuple)):
        servers = [str(s).strip() for s in value]
    else:
        raise ValueError(
            "extra_config 'servers' must be a list of host:port strings or one "
            f"comma-separated string, got {type(value).__name__}"
        )
    if not servers:
        raise ValueError("extra_config 'servers' is empty; omit it to use MEMKV_SERVERS")
    return servers


# --hicache-storage-backend-extra-config is JSON typed by hand: a flag may come as true, 1
# or "true", and bool("false") would be True, so text is read by its words.
_TRUE_WORDS = ("true", "1", "yes")
_FALSE_WORDS = ("false", "0", "no")


def _flag(extra: dict, name: str, default: bool) -> bool:
    value = extra.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS + _FALSE_WORDS:
        return value.strip().lower() in _TRUE_WORDS
    raise ValueError(
        f"extra_config {name!r} must be true or false (a bool, 0 or 1, or one of "
        f"{'/'.join(_TRUE_WORDS + _FALSE_WORDS)}), got {value!r}"
    )


def _positive_int(extra: dict, name: str, unit: str) -> Optional[int]:
    value = extra.get(name)
    if value is None:
        return None
    number = None
    # int(True) is 1 and int(2.7) is 2: neither is what someone typing them meant.
    if not isinstance(value, bool) and not (isinstance(value, float) and not value.is_integer()):
        try:
            number = int(value)
        except (TypeError, ValueError, OverflowError):
            pass
    if number is None or number <= 0:
        raise ValueError(
            f"extra_config {name!r} must be a positive integer ({unit}), got {value!r}"
        )
    return number


def client_from_extra_config(extra: dict) -> "memkv.Client":
    """A memkv client; options missing here come from MEMKV_* and the local key file."""
    return memkv.Client(
        servers=_servers(extra.get("servers")),
        auth_key=extra.get("auth_key"),
        transport=extra.get("transport"),
        timeout_ms=_positive_int(extra, "timeout_ms", "milliseconds"),
        config=extra.get("config"),
    )


class MemKVHiCacheStorage(HybridPools, PlainPages, HiCacheStorage):
    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None):
        # SGLang's "dynamic" loader calls cls(storage_config, kwargs).
        if storage_config is None:
            raise ValueError("MemKVHiCacheStorage needs SGLang's HiCacheStorageConfig")
        if storage_config.should_split_heads:
            raise ValueError(
                "memkv-sglang does not support tp_lcm_size head splitting "
                "(heterogeneous TP with the page_head layout); drop tp_lcm_size"
            )
        self.storage_config = storage_config
        extra = dict(storage_config.extra_config or {})
        self.interface_v1 = _flag(extra, "interface_v1", False)
        raw_v1 = extra.get("interface_v1")
        if raw_v1 is not None and bool(raw_v1) != self.interface_v1:
            # SGLang's cache controller picks the page functions by bool(interface_v1): it
            # would call the zero-copy methods on a backend keyed for the plain ones, and
            # find nothing, ever.
            raise ValueError(
                f"extra_config 'interface_v1' is {raw_v1!r}: false here, but SGLang's cache "
                "controller reads any non-empty text as true; write false or 0 without "
                "quotes, or leave the key out"
            )
        self.key_prefix = extra.get("key_prefix")
        self.keys = KeyScheme.build(storage_config, self.key_prefix)
        self.client = client_from_extra_config(extra)
        self.mem_pool_host = None
        self._registered_view: Optional[memoryview] = None
        self._init_hybrid()
        self._closed = False
        # Metrics, drained by get_stats (SGLang's StorageMetrics shape).
        self._metrics_lock = threading.Lock()
        self._prefetch_pgs: List[int] = []
        self._backup_pgs: List[int] = []
        self._prefetch_bw: List[float] = []
        self._backup_bw: List[float] = []
        logger.info(
            "memkv HiCache storage: namespace %s, %s interface, transport %s",
            self.keys.namespace,
            "zero-copy v1" if self.interface_v1 else "plain",
            self.client.transport,
        )

    # ---- host pool ---------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host) -> None:
        super().register_mem_pool_host(mem_pool_host)
        # The pool's layout and dtype decide the byte order of a page: key on them so
        # engines started with different --hicache-mem-layout never share pages.
        self.keys = KeyScheme.build(
            self.storage_config, self.key_prefix, pool_format(mem_pool_host)
        )
        if not self.interface_v1:
            return
        kv = getattr(mem_pool_host, "kv_buffer", None)
        if not isinstance(kv, torch.Tensor):
            raise ValueError(
                "memkv-sglang's zero-copy interface needs a host pool with one kv_buffer "
                f"tensor (MHA or MLA); {type(mem_pool_host).__name__} has "
                f"{type(kv).__name__}. Drop interface_v1 to use the plain interface."
            )
        if kv.device.type != "cpu" or not kv.is_contiguous():
            raise ValueError(
                f"host kv_buffer must be contiguous CPU memory, got device={kv.device} "
                f"contiguous={kv.is_contiguous()}"
            )
        nbytes = kv.numel() * kv.element_size()
        if nbytes:
            # RDMA needs the pool registered once; on TCP this only keeps the export.
            self._registered_view = view_at(kv.data_ptr(), nbytes)
            self.client.register(self._registered_view)
        logger.info(
            "memkv: registered host KV pool (%d bytes, layout %s) over %s",
            nbytes,
            getattr(mem_pool_host, "layout", "?"),
            self.client.transport,
        )

    def _pool(self):
        if self.mem_pool_host is None:
            raise RuntimeError(
                "batch_get_v1/batch_set_v1 called before register_mem_pool_host"
            )
        return self.mem_pool_host

    def _page_objects(self, keys: List[str], host_indices) -> List[ObjectRanges]:
        pool = self._pool()
        n = len(host_indices)
        if n % len(keys):
            raise ValueError(
                f"{n} host indices for {len(keys)} pages: not a whole number of tokens per page"
            )
        ptrs, sizes = pool.get_page_buffer_meta(host_indices)
        return group_objects(ptrs, sizes, len(keys), self.keys.objects_per_page)

    def _object_names(self, keys: List[str]) -> List[str]:
        names: List[str] = []
        for k in keys:
            names.extend(self.keys.page_objects(k))
        return names

    def _kv_page_names(self, keys: list[str]) -> tuple[list[str], int]:
        """The KV objects of each page as this interface stores them, and how many per page."""
        if self.interface_v1:
            return self._object_names(keys), self.keys.objects_per_page
        return [self.keys.flat_page(k) for k in keys], 1

    def _per_page(self, object_ok: List[bool]) -> List[bool]:
        return group_all(object_ok, self.keys.objects_per_page)

    # ---- zero-copy interface ---------------------------------------------------------

    def batch_set_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        if not keys:
            return []
        objects = self._page_objects(keys, host_indices)
        names = self._object_names(keys)
        present = self._exists_objects(names) or [False] * len(names)
        start = time.perf_counter()
        todo, failed = put_absent(
            self.client, names, present,
            lambda i: objects[i].view() if objects[i].contiguous else objects[i].gather(),
            "page objects",
        )
        ok = self._per_page([names[i] not in failed for i in range(len(names))])
        written = sum(objects[i].size for i in todo if names[i] not in failed)
        self._record(self._backup_pgs, self._backup_bw, len(keys), written, start)
        return ok

    def batch_get_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        if not keys:
            return []
        objects = self._page_objects(keys, host_indices)
        names = self._object_names(keys)
        buffers = [o.view() if o.contiguous else bytearray(o.size) for o in objects]
        start = time.perf_counter()
        lengths = read_lengths(self.client, names, buffers, "page objects")
        object_ok = []
        for obj, buf, n in zip(objects, buffers, lengths):
            # A value of another size is another layout's or model's page: a miss.
            hit = n is not None and n == obj.size
            if hit and not obj.contiguous:
                obj.scatter(buf)
            object_ok.append(hit)
        ok = self._per_page(object_ok)
        read = sum(o.size for o, hit in zip(objects, object_ok) if hit)
        self._record(self._prefetch_pgs, self._prefetch_bw, len(keys), read, start)
        return ok

    # ---- existence -------------------------------------------------------------------

    def _exists_objects(self, names: List[str]) -> Optional[List[bool]]:
        try:
            return self.client.exists_many(names)
        except memkv.Error as e:
            logger.warning("memkv: existence check of %d objects failed: %s", len(names), e)
            # Objects on servers that answered keep their answer (one server down need not
            # make every page a miss, and a rewrite of every page).
            kept = kept_results(e)
            return None if kept is None else [r is True for r in kept]

    def batch_exists(
        self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None
    ) -> int:
        """How many pages, from the first, are stored (SGLang loads only a prefix)."""
        if not keys:
            return 0
        names, per_page = self._kv_page_names(keys)
        found = self._exists_objects(names)
        if found is None:
            return 0
        pages = group_all(found, per_page)
        return pages.index(False) if False in pages else len(pages)

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # ---- housekeeping ----------------------------------------------------------------

    def _record(self, pages: list, bandwidth: list, n: int, nbytes: int, start: float) -> None:
        if not self.storage_config.enable_storage_metrics:
            return
        elapsed = max(time.perf_counter() - start, 1e-9)
        with self._metrics_lock:
            pages.append(n)
            bandwidth.append(nbytes / elapsed / 1e9)  # GB/s, as SGLang's backends report

    def get_stats(self):
        if not self.storage_config.enable_storage_metrics:
            return None
        from sglang.srt.observability.metrics_collector import StorageMetrics

        m = StorageMetrics()
        with self._metrics_lock:
            m.prefetch_pgs.extend(self._prefetch_pgs)
            m.backup_pgs.extend(self._backup_pgs)
            m.prefetch_bandwidth.extend(self._prefetch_bw)
            m.backup_bandwidth.extend(self._backup_bw)
            for lst in (self._prefetch_pgs, self._backup_pgs, self._prefetch_bw, self._backup_bw):
                lst.clear()
        return m

    def clear(self) -> None:
        # memkv has no key listing or namespace delete; stored pages stay until the
        # servers evict them (LRU) or are restarted.
        logger.warning(
            "memkv: clear() leaves pages of %s in place (memkv cannot list keys); "
            "they age out by LRU",
            self.keys.namespace,
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.client.close()
        self._registered_view = None
