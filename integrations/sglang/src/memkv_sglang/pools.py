# SPDX-License-Identifier: Apache-2.0
"""Side pools of SGLang's hybrid HiCache (Mamba state, SWA, indexers, drafts) as memkv objects.

SGLang's multi-pool interface (``batch_*_v2``) moves pages of host pools other than the KV
pool: a Mamba pool holds one recurrent state per slot (``page_size`` 1) stored under the
hash of the KV page it ends at, an SWA pool holds a sliding window of KV-like pages, an
indexer pool a DSA index page per KV page. Each pool registered with
``register_mem_host_pool_v2`` becomes one :class:`SidePool`, which says how a page of that
pool maps to memkv objects:

* **zero-copy** (SGLang's ``MHATokenToKVPoolHost`` / ``MLATokenToKVPoolHost`` and a
  page-first ``MambaPoolHost``): the pool's ``get_page_buffer_meta`` ranges, grouped into
  objects the way the KV pool's are (``k``/``v`` for MHA, ``k`` for MLA, ``temporal`` and
  ``conv{i}`` for Mamba), read and written in place;
* **flat** (any other host pool, and a Mamba pool that carries extra slot side states): the
  pool's own flat page (``get_data_page`` / ``set_from_flat_data_page``), one object per
  page, one copy each way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost

from memkv_sglang.keys import pool_format
from memkv_sglang.pages import ObjectRanges, group_objects

# The name SGLang gives the pool whose state is split across TP ranks even when the model's
# KV (MLA) is the same on every rank: PoolName.MAMBA's value.
MAMBA = "mamba"


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _tensor_bytes(t: torch.Tensor):
    """A writable uint8 numpy view of a contiguous CPU tensor (no copy)."""
    return t.reshape(-1).view(torch.uint8).numpy()


class FlatPage:
    """One page of a pool without zero-copy ranges: SGLang's flat page, staged once."""

    def __init__(self, pool: Any, index: int, size: int):
        self.pool = pool
        self.index = index
        self.size = size
        self._target: torch.Tensor | None = None

    def source(self):
        page = self.pool.get_data_page(self.index, flat=True)
        return _tensor_bytes(page.detach().cpu().contiguous())

    def target(self):
        # The pool's own scratch page: set_from_flat_data_page expects its dtype.
        self._target = self.pool.get_dummy_flat_data_page()
        return _tensor_bytes(self._target)

    def commit(self, buf) -> None:
        assert self._target is not None
        self.pool.set_from_flat_data_page(self.index, self._target)


class RangeObject:
    """One object made of host pool ranges: written and read in place when it is one range."""

    def __init__(self, ranges: ObjectRanges):
        self.ranges = ranges
        self.size = ranges.size

    def source(self):
        return self.ranges.view() if self.ranges.contiguous else self.ranges.gather()

    def target(self):
        return self.ranges.view() if self.ranges.contiguous else bytearray(self.size)

    def commit(self, buf) -> None:
        if not self.ranges.contiguous:
            self.ranges.scatter(buf)


PageObject = FlatPage | RangeObject


@dataclass
class SidePool:
    name: str
    host_pool: Any
    tag: str  # the pool's part of every key: its name and what decides its bytes
    components: tuple[str, ...]  # object names of one page, in get_page_buffer_meta order
    sharded: bool  # each TP rank holds its own part (keys carry the rank)
    zero_copy: bool
    flat_size: int = 0

    @property
    def page_size(self) -> int:
        return int(getattr(self.host_pool, "page_size", 1) or 1)

    @staticmethod
    def build(name: str, host_pool: Any, is_mla_model: bool) -> SidePool:
        kind = type(host_pool)
        components: tuple[str, ...] = ()
        zero_copy = False
        if kind is MambaPoolHost:
            fmt = (
                f"{host_pool.layout}-{_dtype_name(host_pool.temporal_dtype)}-"
                f"{_dtype_name(host_pool.conv_dtype)}-x{host_pool.num_mamba_layers}"
            )
            if (
                not host_pool.slot_state_device_tensors
                and host_pool.layout in ("page_first", "page_first_direct")
                and all(
                    t.device.type == "cpu" and t.is_contiguous()
                    for t in (host_pool.temporal_buffer, *host_pool.conv_buffer)
                )
            ):
                zero_copy = True
                # get_page_buffer_meta leaves out the temporal state when it is empty
                # (conv-only models).
                temporal = ("temporal",) if host_pool.temporal_state_elem_size > 0 else ()
                components = temporal + tuple(
                    f"conv{i}" for i in range(len(host_pool.conv_buffer))
                )
        else:
            fmt = pool_format(host_pool) or "unknown"
            kv = getattr(host_pool, "kv_buffer", None)
            if (
                kind in (MHATokenToKVPoolHost, MLATokenToKVPoolHost)
                and isinstance(kv, torch.Tensor)
                and kv.device.type == "cpu"
                and kv.is_contiguous()
            ):
                zero_copy = True
                components = ("k",) if kind is MLATokenToKVPoolHost else ("k", "v")
        flat_size = 0
        if not zero_copy:
            components = ("page",)
            fmt += f"-{kind.__name__}"
            try:
                page = host_pool.get_dummy_flat_data_page()
                flat_size = page.numel() * page.element_size()
            except Exception as e:
                raise ValueError(
                    f"memkv-sglang cannot store HiCache pool {name!r} "
                    f"({kind.__name__}): it has neither zero-copy page ranges memkv "
                    f"understands nor a flat page ({e})"
                ) from e
            if flat_size <= 0:
                raise ValueError(
                    f"memkv-sglang cannot store HiCache pool {name!r} ({kind.__name__}): "
                    "its pages hold no bytes (a logical pool)"
                )
        # MLA KV and the pools that go with it are the same on every TP rank, and SGLang
        # lets only the first rank write them; Mamba state and any MHA-shaped pool are
        # split by heads, so each rank stores its own.
        sharded = (
            not is_mla_model or name == MAMBA or isinstance(host_pool, MHATokenToKVPoolHost)
        )
        return SidePool(
            name=name,
            host_pool=host_pool,
            tag=f"{name}-{fmt}",
            components=components,
            sharded=sharded,
            zero_copy=zero_copy,
            flat_size=flat_size,
        )

    def buffers(self) -> list[torch.Tensor]:
        """The host tensors zero-copy objects live in (registered with memkv for RDMA)."""
        if not self.zero_copy:
            return []
        pool = self.host_pool
        if isinstance(pool, MambaPoolHost):
            tensors = [pool.temporal_buffer, *pool.conv_buffer]
        else:
            tensors = [pool.kv_buffer]
        return [t for t in tensors if t.numel() > 0]

    def page_objects(self, host_indices: torch.Tensor, pages: int) -> list[PageObject]:
        """The objects of ``pages`` pages at ``host_indices``, page by page, in
        ``components`` order."""
        if pages == 0:
            return []
        if self.zero_copy:
            ptrs, sizes = self.host_pool.get_page_buffer_meta(host_indices)
            return [
                RangeObject(r)
                for r in group_objects(ptrs, sizes, pages, len(self.components))
            ]
        step = self.page_size
        return [
            FlatPage(self.host_pool, int(host_indices[p * step]), self.flat_size)
            for p in range(pages)
        ]
