"""Byte views of vLLM's paged KV cache, one per (layer, block).

vLLM hands connectors one tensor per attention layer, standardized so blocks are dim 0; block
``b``'s page is ``kv[b]``. On the CPU build the whole cache is one host allocation (layout
LBHNC: layers, blocks, KV heads, tokens, K|V channels), so every page is one contiguous run of
host memory and memkv reads and writes it in place through a memoryview: no copies.

Where a page is not host memory (GPU builds) or not contiguous, pages go through a host staging
copy instead. That path is written for GPU builds but untested here (no GPU on this machine).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable, Sequence

import torch


def _raw(address: int, nbytes: int) -> memoryview:
    # A writable, C-contiguous byte view of memory owned by a tensor the caller keeps alive.
    return memoryview((ctypes.c_ubyte * nbytes).from_address(address)).cast("B")


class LayerPages:
    def __init__(self, name: str, kv: torch.Tensor, num_blocks: int, page_bytes: int) -> None:
        if kv.dim() < 2 or kv.shape[0] != num_blocks:
            raise ValueError(
                f"memkv_vllm: layer {name}: KV tensor of shape {tuple(kv.shape)} does not have "
                f"the scheduler's {num_blocks} blocks at dim 0 (kernel block splitting is not "
                "supported)"
            )
        actual = kv[0].numel() * kv.element_size()
        if actual != page_bytes:
            raise ValueError(
                f"memkv_vllm: layer {name}: a block holds {actual} bytes but the KV cache spec "
                f"says {page_bytes}; this layout is not supported"
            )
        self.name = name
        self.kv = kv
        self.page_bytes = page_bytes
        self.zero_copy = kv.device.type == "cpu" and kv[0].is_contiguous()
        self._base = kv.data_ptr()
        self._stride = kv.stride(0) * kv.element_size()

    def extent(self) -> tuple[int, int]:
        """[start, end) of the host memory holding every page of this layer."""
        return self._base, self._base + (self.kv.shape[0] - 1) * self._stride + self.page_bytes

    def _check(self, block: int) -> None:
        if not 0 <= block < self.kv.shape[0]:
            raise IndexError(f"memkv_vllm: block {block} outside layer {self.name}'s {self.kv.shape[0]}")

    def read_views(self, blocks: Iterable[int]) -> list[memoryview]:
        """Buffers holding the pages' bytes, for put_many."""
        out = []
        for b in blocks:
            self._check(b)
            if self.zero_copy:
                out.append(_raw(self._base + b * self._stride, self.page_bytes))
            else:
                host = self.kv[b].contiguous().cpu()
                out.append(memoryview(host.view(torch.uint8).reshape(-1).numpy()))
        return out

    def write_views(self, blocks: Sequence[int]) -> tuple[list[memoryview], Callable[[list[bool]], None]]:
        """Buffers for get_many_into, and a function to call with which of them were filled."""
        for b in blocks:
            self._check(b)
        if self.zero_copy:
            return [_raw(self._base + b * self._stride, self.page_bytes) for b in blocks], lambda ok: None
        page = self.kv[0]
        staging = [torch.empty(self.page_bytes, dtype=torch.uint8) for _ in blocks]

        def commit(ok: list[bool]) -> None:
            for b, buf, filled in zip(blocks, staging, ok):
                if filled:
                    self.kv[b].copy_(buf.view(page.dtype).view(page.shape), non_blocking=False)

        return [memoryview(s.numpy()) for s in staging], commit


def host_ranges(layers: Iterable[LayerPages]) -> list[tuple[int, int]]:
    """The host memory under the zero-copy layers, adjacent or overlapping extents merged."""
    spans = sorted(layer.extent() for layer in layers if layer.zero_copy)
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def range_view(start: int, end: int) -> memoryview:
    return _raw(start, end - start)
