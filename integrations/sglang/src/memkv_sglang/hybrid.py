# SPDX-License-Identifier: Apache-2.0
"""SGLang's multi-pool HiCache interface (``batch_*_v2``) for hybrid models.

Hybrid models keep, besides the KV pool, side pools that SGLang's HybridCacheController
stores and loads with the same page hashes: Mamba state (one slot per page hash, only at
the end of a cached node), SWA windows, DSA indexer pages, draft KV. The KV pool itself
still moves through ``batch_get_v1`` / ``batch_set_v1`` (or the plain calls); the v2 calls
carry the side pools:

* ``batch_exists_v2(keys, transfers)``: ``keys`` are the KV page hashes of the whole span.
  The KV prefix is counted first, as ``batch_exists`` does; each side pool then keeps the
  prefix lengths it can serve under its hit policy, and the answer is the set left
  (``restorable_prefix_pages``) and its longest member. One ``exists_many`` covers the KV
  pool and every side pool.
* ``batch_get_v2`` / ``batch_set_v2``: each transfer names a pool, its page hashes and its
  host slots; the pages move in place (see ``pools.py``), one memkv batch call for all
  pools, and each pool gets one bool per page.

A memkv failure is a miss or ``False``, never an exception. A hit policy this backend
cannot honour (``BLOCK_GROUPS``, which SGLang 0.5.23 never sends) raises ``NotImplementedError``,
which SGLang's prefetch thread logs and turns into a miss.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorageExtraInfo,
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
)

from memkv_sglang.pages import view_at
from memkv_sglang.plain import group_all, put_absent, read_lengths
from memkv_sglang.pools import MAMBA, PageObject, SidePool

logger = logging.getLogger(__name__)

_POLICIES = (PoolHitPolicy.ALL_PAGES, PoolHitPolicy.TRAILING_PAGES)


def _leading(ok: Sequence[bool]) -> int:
    return next((i for i, v in enumerate(ok) if not v), len(ok))


def _trailing_stops(present: Sequence[bool], window: int) -> set[int]:
    """Prefix lengths p (1..len) whose last ``window`` pages (fewer when p is shorter) are all
    present."""
    stops = set()
    run = 0  # present pages ending at page p - 1
    for p, here in enumerate(present, start=1):
        run = run + 1 if here else 0
        if run >= min(window, p):
            stops.add(p)
    return stops


class HybridPools:
    """Mixed into MemKVHiCacheStorage, which provides client, keys, storage_config,
    _kv_page_names and _exists_objects."""

    def _init_hybrid(self) -> None:
        self.registered_pools: dict[Any, Any] = {}
        self._side_pools: dict[str, SidePool] = {}
        self._side_views: list[memoryview] = []

    # ---- registration -------------------------------------------------------------

    def register_mem_host_pool_v2(self, host_pool, host_pool_name) -> None:
        self.registered_pools[host_pool_name] = host_pool
        name = str(host_pool_name)
        if name == PoolName.KV.value:
            # The KV (anchor) pool came through register_mem_pool_host and moves by v1.
            return
        cfg = self.storage_config
        side = SidePool.build(name, host_pool, cfg.is_mla_model)
        if cfg.is_mla_model and cfg.tp_size > 1 and side.sharded and name != MAMBA:
            # SGLang backs up an MLA model's side pools from the first TP rank only (Mamba
            # state excepted; HybridCacheController.should_backup), but this pool is split by
            # heads, so every other rank would look for pages nobody writes and the engine's
            # hit (the minimum over ranks) would always be 0.
            raise ValueError(
                f"memkv-sglang cannot store HiCache pool {name!r} ({type(host_pool).__name__}) "
                f"of an MLA model under tensor parallelism ({cfg.tp_size} ranks): its pages "
                "differ per rank, but SGLang stores them from the first rank only"
            )
        for t in side.buffers():
            view = view_at(t.data_ptr(), t.numel() * t.element_size())
            self.client.register(view)
            self._side_views.append(view)
        self._side_pools[name] = side
        logger.info(
            "memkv: HiCache side pool %s (%s, %s, %s)",
            name,
            type(host_pool).__name__,
            "zero-copy" if side.zero_copy else "flat pages",
            "per TP rank" if side.sharded else "shared by TP ranks",
        )

    def _side(self, name) -> SidePool:
        side = self._side_pools.get(str(name))
        if side is None:
            raise ValueError(
                f"HiCache pool {name!r} was not registered with register_mem_host_pool_v2 "
                f"(registered: {sorted(self._side_pools)})"
            )
        return side

    def _side_names(self, side: SidePool, keys: Sequence[str]) -> list[str]:
        names: list[str] = []
        for k in keys:
            names.extend(
                self.keys.side_page_objects(k, side.tag, side.components, side.sharded)
            )
        return names

    # ---- existence ----------------------------------------------------------------

    def batch_exists_v2(
        self,
        keys: list[str],
        pool_transfers: list[PoolTransfer] | None = None,
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> PoolTransferResult:
        transfers = [t for t in pool_transfers or [] if str(t.name) != PoolName.KV.value]
        for t in transfers:
            if t.hit_policy not in _POLICIES:
                policy = getattr(t.hit_policy, "value", t.hit_policy)
                raise NotImplementedError(
                    f"memkv-sglang does not support HiCache hit policy {policy!r} (pool "
                    f"{t.name!s}); only all_pages and trailing_pages"
                )
        if not keys:
            return PoolTransferResult(0, {}, [])
        kv_names, kv_per_page = self._kv_page_names(keys)
        names = list(kv_names)
        spans: list[tuple[PoolTransfer, int, int]] = []
        for t in transfers:
            side = self._side(t.name)
            spans.append((t, len(names), len(side.components)))
            # A side pool's page i is stored under the hash of KV page i.
            names.extend(self._side_names(side, keys))
        found = self._exists_objects(names)
        if found is None:
            return PoolTransferResult(0, {}, [])

        kv_pages = _leading(group_all(found[: len(kv_names)], kv_per_page))
        hits: dict[Any, int] = {PoolName.KV: kv_pages} if kv_pages else {}
        restorable = set(range(1, kv_pages + 1))
        for t, start, per_page in spans:
            if not restorable:
                break
            present = group_all(found[start : start + len(keys) * per_page], per_page)
            present = present[:kv_pages]
            if t.hit_policy == PoolHitPolicy.ALL_PAGES:
                stops = set(range(1, _leading(present) + 1))
            else:
                # The pool covers only the tail of a prefix: a prefix is usable when its
                # last len(keys) pages are stored. Holes are possible (a Mamba state at
                # pages 4 and 8, none at 6), hence a set, not a count.
                stops = _trailing_stops(present, max(1, len(t.keys or ())))
            if stops:
                hits[t.name] = max(stops)
            restorable &= stops
        ordered = sorted(restorable)
        return PoolTransferResult(ordered[-1] if ordered else 0, hits, ordered)

    # ---- transfers ------------------------------------------------------------------

    def _plan(
        self, transfers: list[PoolTransfer], what: str
    ) -> tuple[dict[Any, list[bool]], list[tuple[Any, int, int, int]], list[str], list[PageObject]]:
        """Each transfer's objects and keys, concatenated; transfers that cannot be moved
        get their all-False answer at once."""
        results: dict[Any, list[bool]] = {}
        # (pool name, first object, end, objects per page)
        plan: list[tuple[Any, int, int, int]] = []
        names: list[str] = []
        objects: list[PageObject] = []
        for t in transfers:
            keys = list(t.keys or [])
            side = self._side(t.name)
            want = len(keys) * side.page_size
            got = 0 if t.host_indices is None else int(t.host_indices.numel())
            if got != want:
                logger.error(
                    "memkv: %s of pool %s: %d host slots for %d pages of %d; skipped",
                    what, t.name, got, len(keys), side.page_size,
                )
                results[t.name] = [False] * len(keys)
                continue
            if not keys:
                results[t.name] = []
                continue
            host_indices = t.host_indices
            if isinstance(host_indices, torch.Tensor) and host_indices.device.type != "cpu":
                host_indices = host_indices.cpu()
            start = len(objects)
            objects.extend(side.page_objects(host_indices, len(keys)))
            names.extend(self._side_names(side, keys))
            plan.append((t.name, start, len(objects), len(side.components)))
        return results, plan, names, objects

    @staticmethod
    def _collect(
        results: dict[Any, list[bool]],
        plan: list[tuple[Any, int, int, int]],
        object_ok: list[bool],
    ) -> dict[Any, list[bool]]:
        for name, start, end, per_page in plan:
            results[name] = group_all(object_ok[start:end], per_page)
        return results

    def batch_get_v2(
        self,
        transfers: list[PoolTransfer],
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> dict[Any, list[bool]]:
        results, plan, names, objects = self._plan(transfers, "read")
        if not objects:
            return results
        buffers = [o.target() for o in objects]
        lengths = read_lengths(self.client, names, buffers, "side-pool objects")
        object_ok = []
        for obj, buf, n in zip(objects, buffers, lengths):
            # A value of another size is another model's or layout's page: a miss.
            hit = n is not None and n == obj.size
            if hit:
                try:
                    obj.commit(buf)
                except (ValueError, RuntimeError) as e:  # the pool refused the page
                    logger.warning("memkv: loading a side-pool page failed: %s", e)
                    hit = False
            object_ok.append(hit)
        return self._collect(results, plan, object_ok)

    def batch_set_v2(
        self,
        transfers: list[PoolTransfer],
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> dict[Any, list[bool]]:
        results, plan, names, objects = self._plan(transfers, "write")
        if not objects:
            return results
        present = self._exists_objects(names) or [False] * len(names)
        _, failed = put_absent(
            self.client, names, present, lambda i: objects[i].source(), "side-pool objects"
        )
        object_ok = [name not in failed for name in names]
        return self._collect(results, plan, object_ok)
