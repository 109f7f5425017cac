# SPDX-License-Identifier: Apache-2.0
"""memkv as an LMCache in-process storage plugin (vLLM's ``LMCacheConnectorV1``).

Configuration (LMCache YAML)::

    storage_plugins: [memkv]
    extra_config:
      storage_plugin.memkv.module_path: memkv_lmcache.backend
      storage_plugin.memkv.class_name: MemKVStorageBackend
      storage_plugin.memkv.servers: "10.0.0.1:9900,10.0.0.2:9900"   # optional, else MEMKV_*

Values are stored as the chunk's raw KV bytes under ``CacheEngineKey.to_string()``,
with no header: gets allocate a full-chunk MemoryObj from LMCache's local CPU backend,
read into it in place and shrink it to the bytes that came back (the last chunk of a
prompt is shorter), the way LMCache's own Mooncake connector does without chunk meta.

Threads: ``io_threads`` (default 4) is split into two lanes: non-blocking gets get the
larger half, puts the rest, and at least one each (so ``io_threads: 1`` runs two threads).
Async lookups (``batched_async_contains``, on the scheduler's path to a request's first
token) run on one more thread of their own: one ``exists_many`` each, a millisecond or so. A
burst of saves of a long prompt thus only fills the put lane, and a burst of loads only the
get lane: the next request's lookup waits behind neither, and its load not behind saves;
saves may lag.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, List, Optional, Sequence

import memkv
import torch
from lmcache.logging import init_logger
from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryFormat, MemoryObj
from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface

from memkv_lmcache._params import CLIENT_PARAMS, as_bool, client_kwargs, plugin_prefix, plugin_settings

logger = init_logger(__name__)

# Settings this backend reads from extra_config besides the memkv client ones.
BACKEND_PARAMS = ("io_threads", "register_cpu_buffer")
_MAX_IO_THREADS = 64


def _bytes_view(obj: MemoryObj) -> memoryview:
    # MemoryObj.byte_array is a ctypes overlay with struct format "<B"; cast it to plain
    # "B" so any buffer consumer takes it as bytes. Zero-copy either way.
    return obj.byte_array.cast("B")


class MemKVStorageBackend(StoragePluginInterface):
    """An LMCache storage tier on a fleet of memkv servers.

    Blocking calls (contains, get_blocking, remove) run on the caller's thread: the
    memkv client releases the GIL and is safe to share. Puts run on threads of their
    own, async lookups and non-blocking gets on others (see the module docstring), and
    hand back futures. Failures of memkv (server down, timeout) are logged and counted
    in ``stats`` and turn into misses or failed put futures, never into exceptions in
    LMCache's threads.
    """

    def __init__(
        self,
        config: Any = None,
        metadata: Any = None,
        local_cpu_backend: Any = None,
        loop: Optional[asyncio.AbstractEventLoop] = None,
        dst_device: str = "cpu",
    ) -> None:
        super().__init__(
            dst_device=dst_device,
            config=config,
            metadata=metadata,
            local_cpu_backend=local_cpu_backend,
            loop=loop,
        )
        if config is None or metadata is None:
            raise ValueError(
                "MemKVStorageBackend needs LMCache's config and metadata "
                "(it is built by storage_plugin_launcher)"
            )
        if getattr(config, "use_layerwise", False):
            raise ValueError(
                "MemKVStorageBackend does not support use_layerwise: true (per-layer keys); "
                "turn it off or use the native_plugin L2 adapter"
            )
        prefix = plugin_prefix(config, type(self).__name__)
        settings = plugin_settings(config, prefix, BACKEND_PARAMS)
        kwargs = client_kwargs(
            {k: v for k, v in settings.items() if k in CLIENT_PARAMS}, where=f"extra_config {prefix}"
        )

        try:
            io_threads = int(settings.get("io_threads", 4))
        except (TypeError, ValueError):
            raise ValueError(
                f"extra_config {prefix}io_threads must be a whole number, got {settings['io_threads']!r}"
            ) from None
        if not 1 <= io_threads <= _MAX_IO_THREADS:
            raise ValueError(
                f"extra_config {prefix}io_threads must be between 1 and {_MAX_IO_THREADS}, got {io_threads}"
            )
        register = as_bool(
            settings.get("register_cpu_buffer", True), f"extra_config {prefix}register_cpu_buffer"
        )

        # Chunk layout: every value is one full chunk or, for a prompt's last chunk,
        # a prefix of one in whole tokens.
        self._shapes: list[torch.Size] = list(metadata.get_shapes())
        self._dtypes: list[torch.dtype] = list(metadata.get_dtypes())
        self._fmt = MemoryFormat.KV_MLA_FMT if getattr(metadata, "use_mla", False) else MemoryFormat.KV_2LTD
        self._full_chunk_bytes = sum(
            s.numel() * d.itemsize for s, d in zip(self._shapes, self._dtypes, strict=True)
        )
        self._chunk_tokens = int(metadata.chunk_size)

        self._client = memkv.Client(**kwargs)
        read_threads = (io_threads + 1) // 2
        put_threads = max(1, io_threads - read_threads)
        self._read_executor = ThreadPoolExecutor(
            max_workers=read_threads, thread_name_prefix="memkv-lmcache-read"
        )
        self._put_executor = ThreadPoolExecutor(
            max_workers=put_threads, thread_name_prefix="memkv-lmcache-put"
        )
        self._lookup_executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="memkv-lmcache-lookup"
        )
        self._lock = threading.Lock()
        self._put_tasks: set[CacheEngineKey] = set()
        # memkv has no pin: LMCache's pins are kept here so pin/unpin answer
        # consistently; the server may still evict a pinned key under memory pressure.
        self._pins: Counter[CacheEngineKey] = Counter()
        self.stats: Counter[str] = Counter()
        self._closed = False
        self.registered_bytes = 0
        if register and local_cpu_backend is not None:
            self._register_cpu_arena()
        logger.info(
            "memkv storage plugin ready (%s), transport %s, I/O threads: %d for gets, %d for "
            "puts, 1 for lookups, chunk %d bytes",
            prefix.rstrip("."),
            self._client.transport,
            read_threads,
            put_threads,
            self._full_chunk_bytes,
        )

    def __str__(self) -> str:
        return self.__class__.__name__

    # ------------------------------------------------------------------ helpers

    def _register_cpu_arena(self) -> None:
        """Register LocalCPUBackend's whole arena with memkv once, so RDMA reads and
        writes go straight into the MemoryObjs (a no-op on TCP)."""
        allocator = getattr(self.local_cpu_backend, "memory_allocator", None)
        buffer = getattr(allocator, "buffer", None)
        if buffer is None:
            buffer = getattr(getattr(allocator, "pin_allocator", None), "buffer", None)
        if not isinstance(buffer, torch.Tensor) or buffer.device.type != "cpu":
            logger.info("memkv: LocalCPUBackend exposes no CPU arena; not registering memory for RDMA")
            return
        nbytes = buffer.numel() * buffer.element_size()
        view = memoryview((ctypes.c_ubyte * nbytes).from_address(buffer.data_ptr()))
        try:
            self._client.register(view)
        except memkv.Error as e:
            # TCP still works; only the zero-copy RDMA path is lost.
            logger.warning("memkv: registering LMCache's %d-byte CPU arena failed: %s", nbytes, e)
            return
        self._arena_keepalive = buffer
        self.registered_bytes = nbytes

    def _count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.stats[what] += n

    def _failed(self, what: str, err: Exception, n: int = 1) -> None:
        self._count(what, n)
        logger.warning("memkv %s failed: %s", what.replace("_failures", ""), err)

    def _submit_read(
        self, fn: Callable[..., Any], *args: Any, executor: Optional[ThreadPoolExecutor] = None
    ) -> Optional[Future]:
        """Run a get (or, on ``executor``, a lookup) off LMCache's thread; None once close()
        has begun, so LMCache's lookup gets a miss to answer its scheduler with rather than an
        exception."""
        if self._closed:
            return None
        try:
            return (executor or self._read_executor).submit(fn, *args)
        except RuntimeError:  # executor shut down by a concurrent close()
            return None

    def _shrink(self, obj: MemoryObj, nbytes: int) -> Optional[MemoryObj]:
        """Fit a full-chunk MemoryObj to the ``nbytes`` that memkv returned."""
        if nbytes == self._full_chunk_bytes:
            return obj
        token_bytes = self._full_chunk_bytes // self._chunk_tokens
        if len(self._shapes) != 1 or nbytes <= 0 or nbytes % token_bytes or nbytes > self._full_chunk_bytes:
            raise ValueError(
                f"value of {nbytes} bytes is not a whole number of tokens of this model's chunk "
                f"({self._full_chunk_bytes} bytes, {token_bytes} per token, {len(self._shapes)} group(s))"
            )
        shape = list(obj.meta.shape)
        shape[2] = nbytes // token_bytes  # [2 or 1, layers, tokens, hidden]
        obj.raw_data = obj.raw_data[:nbytes]
        obj.meta.shape = torch.Size(shape)
        if hasattr(obj, "group_prefix_sum"):
            obj.group_prefix_sum = [0, nbytes]
        return obj

    def _allocate(self) -> Optional[MemoryObj]:
        # busy_loop=False: a get must not wait for LMCache's stores to free memory
        # (that can deadlock); a failed allocation is reported as a miss.
        return self.local_cpu_backend.allocate(
            self._shapes, self._dtypes, self._fmt, eviction=True, busy_loop=False
        )

    def _get_many(self, keys: Sequence[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        """Read keys into fresh MemoryObjs; misses and failures are None."""
        if self.local_cpu_backend is None or not keys:
            return [None] * len(keys)
        objs: list[Optional[MemoryObj]] = []
        for _ in keys:
            obj = self._allocate()
            if obj is None:
                self._count("allocation_failures")
                break
            objs.append(obj)
        wanted = len(objs)
        results: List[Optional[MemoryObj]] = [None] * len(keys)
        if wanted == 0:
            return results
        try:
            lengths = self._client.get_many_into(
                [k.to_string() for k in keys[:wanted]], [_bytes_view(o) for o in objs]
            )
        except memkv.Error as e:
            if e.results is None:
                self._failed("get_failures", e, wanted)
                for o in objs:
                    o.ref_count_down()
                return results
            # Only the items that failed are lost: the others were read into their objects.
            self._failed("get_failures", e, len(e.keys))
            lengths = e.results
        for i, (obj, n) in enumerate(zip(objs, lengths, strict=True)):
            if isinstance(n, Exception):
                obj.ref_count_down()
                continue
            if n is None:
                self._count("get_misses")
                obj.ref_count_down()
                continue
            try:
                results[i] = self._shrink(obj, n)
                self._count("get_hits")
            except ValueError as e:
                self._failed("get_failures", ValueError(f"{keys[i].to_string()}: {e}"))
                obj.ref_count_down()
        return results

    def _put_many(
        self,
        keys: list[CacheEngineKey],
        objs: list[MemoryObj],
        on_complete: Optional[Callable[[CacheEngineKey], None]],
    ) -> None:
        try:
            self._client.put_many([(k.to_string(), _bytes_view(o)) for k, o in zip(keys, objs, strict=True)])
        except memkv.Error as e:
            self._failed("put_failures", e, len(keys))
            raise
        finally:
            for o in objs:
                o.ref_count_down()
            with self._lock:
                self._put_tasks.difference_update(keys)
        self._count("puts", len(keys))
        if on_complete is not None:
            for k in keys:
                try:
                    on_complete(k)
                except Exception as e:  # LMCache's callback; must not kill the worker
                    logger.warning("on_complete_callback failed for %s: %s", k.to_string(), e)

    # ---------------------------------------------------------------- contains

    def contains(self, key: CacheEngineKey, pin: bool = False) -> bool:
        try:
            found = bool(self._client.exists(key.to_string()))
        except memkv.Error as e:
            self._failed("contains_failures", e)
            return False
        if found and pin:
            with self._lock:
                self._pins[key] += 1
        return found

    def batched_contains(self, keys: List[CacheEngineKey], pin: bool = False) -> int:
        """How many keys, from the first, are stored (LMCache's prefix match)."""
        if not keys:
            return 0
        try:
            found = self._client.exists_many([k.to_string() for k in keys])
        except memkv.Error as e:
            self._failed("contains_failures", e)
            # Keys on servers that answered keep their answer: the prefix may still hit.
            results = getattr(e, "results", None)
            if results is None:
                return 0
            found = [r is True for r in results]
        hits = 0
        for f in found:
            if not f:
                break
            hits += 1
        if pin and hits:
            with self._lock:
                for k in keys[:hits]:
                    self._pins[k] += 1
        return hits

    async def batched_async_contains(
        self, lookup_id: str, keys: List[CacheEngineKey], pin: bool = False
    ) -> int:
        future = self._submit_read(self.batched_contains, keys, pin, executor=self._lookup_executor)
        if future is None:
            return 0
        return await asyncio.wrap_future(future)

    def exists_in_put_tasks(self, key: CacheEngineKey) -> bool:
        with self._lock:
            return key in self._put_tasks

    # --------------------------------------------------------------------- put

    def batched_submit_put_task(
        self,
        keys: Sequence[CacheEngineKey],
        objs: List[MemoryObj],
        transfer_spec: Any = None,
        on_complete_callback: Optional[Callable[[CacheEngineKey], None]] = None,
    ) -> Optional[List[Future]]:
        """Fire-and-forget: one future for the whole batch (one memkv put_many).

        LMCache drops its reference to ``objs`` as soon as this returns, so each object
        is held (ref_count_up) until memkv has read it.
        """
        if self._closed:
            return None
        todo_keys: list[CacheEngineKey] = []
        todo_objs: list[MemoryObj] = []
        with self._lock:
            for k, o in zip(keys, objs, strict=True):
                if k in self._put_tasks:
                    continue
                self._put_tasks.add(k)
                todo_keys.append(k)
                todo_objs.append(o)
        if not todo_keys:
            return None
        for o in todo_objs:
            o.ref_count_up()
        try:
            return [self._put_executor.submit(self._put_many, todo_keys, todo_objs, on_complete_callback)]
        except RuntimeError as e:  # executor shut down by a concurrent close()
            for o in todo_objs:
                o.ref_count_down()
            with self._lock:
                self._put_tasks.difference_update(todo_keys)
            self._failed("put_failures", e, len(todo_keys))
            return None

    # --------------------------------------------------------------------- get

    def get_blocking(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        return self._get_many([key])[0]

    def batched_get_blocking(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        return self._get_many(keys)

    def get_non_blocking(self, key: CacheEngineKey, location: Optional[str] = None) -> Optional[Future]:
        """A future resolving to the MemoryObj, or to None on a miss."""
        if self.local_cpu_backend is None:
            return None
        return self._submit_read(lambda: self._get_many([key])[0])

    async def batched_get_non_blocking(
        self, lookup_id: str, keys: list[CacheEngineKey], transfer_spec: Any = None
    ) -> list[MemoryObj]:
        """The loaded prefix of ``keys`` (StorageManager's prefetch counts chunks up to
        the first gap, so objects past a miss are released here)."""
        future = self._submit_read(self._get_many, keys)
        if future is None:
            return []
        objs = await asyncio.wrap_future(future)
        prefix: list[MemoryObj] = []
        for obj in objs:
            if obj is None:
                break
            prefix.append(obj)
        for obj in objs[len(prefix) :]:
            if obj is not None:
                obj.ref_count_down()
        return prefix

    # ------------------------------------------------------------ pin / remove

    def pin(self, key: CacheEngineKey) -> bool:
        if not self.contains(key):
            return False
        with self._lock:
            self._pins[key] += 1
        return True

    def unpin(self, key: CacheEngineKey) -> bool:
        with self._lock:
            if self._pins[key] <= 0:
                self._pins.pop(key, None)
                return False
            self._pins[key] -= 1
            if self._pins[key] == 0:
                del self._pins[key]
            return True

    def is_pinned(self, key: CacheEngineKey) -> bool:
        with self._lock:
            return self._pins.get(key, 0) > 0

    def remove(self, key: CacheEngineKey, force: bool = True) -> bool:
        """Delete from memkv. A pinned key is kept unless ``force``."""
        if not force and self.is_pinned(key):
            return False
        try:
            removed = bool(self._client.delete(key.to_string()))
        except memkv.Error as e:
            self._failed("remove_failures", e)
            return False
        with self._lock:
            self._pins.pop(key, None)
        return removed

    def batched_remove(self, keys: list[CacheEngineKey], force: bool = True) -> int:
        todo = [k for k in keys if force or not self.is_pinned(k)]
        if not todo:
            return 0
        try:
            removed = self._client.delete_many([k.to_string() for k in todo])
        except memkv.Error as e:
            self._failed("remove_failures", e, len(todo))
            return 0
        with self._lock:
            for k in todo:
                self._pins.pop(k, None)
        return sum(bool(r) for r in removed)

    # ------------------------------------------------------------------- misc

    def get_allocator_backend(self):
        """Puts and gets use LocalCPUBackend's memory (so puts need no copy)."""
        if self.local_cpu_backend is None:
            raise RuntimeError(
                "MemKVStorageBackend needs LMCache's LocalCPUBackend (max_local_cpu_size > 0) "
                "to allocate memory"
            )
        return self.local_cpu_backend

    def touch_cache(self) -> None:
        # memkv servers keep their own approximate LRU; nothing to do client-side.
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Refuse new work on every lane before waiting on any. Then let the puts and gets
        # already submitted finish (each is bounded by the client's timeout), so the
        # MemoryObjs they hold are released before LMCache frees its arena.
        executors = (self._put_executor, self._read_executor, self._lookup_executor)
        for executor in executors:
            executor.shutdown(wait=False)
        for executor in executors:
            executor.shutdown(wait=True)
        self._client.close()
