# SPDX-License-Identifier: Apache-2.0
"""Host KV pool memory as Python buffers memkv can read from and write into.

SGLang's zero-copy path describes pages as raw (pointer, size) pairs from
``mem_pool_host.get_page_buffer_meta``. memkv's batch calls take buffer
objects, so each range becomes a writable ``memoryview`` over the same memory
(a ctypes array placed at the address): no bytes are copied.

With ``page_first`` / ``page_first_direct`` layouts each stored object (K or V
half of a page, or an MLA page) is one contiguous range. With ``layer_first``
SGLang hands out one range per layer instead; those objects are packed into a
staging buffer on write and scattered back on read, which costs one copy.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import List, Sequence, Tuple


def view_at(ptr: int, size: int) -> memoryview:
    """A writable memoryview of ``size`` bytes at address ``ptr``.

    The caller keeps the owning allocation (SGLang's host pool tensor) alive for as long
    as the view is used.
    """
    if ptr <= 0 or size <= 0:
        raise ValueError(f"bad host buffer range: ptr={ptr:#x} size={size}")
    return memoryview((ctypes.c_ubyte * size).from_address(ptr)).cast("B")


@dataclass
class ObjectRanges:
    """The host memory ranges that make up one stored object, in order."""

    ranges: List[Tuple[int, int]]

    @property
    def size(self) -> int:
        return sum(size for _, size in self.ranges)

    @property
    def contiguous(self) -> bool:
        return len(self.ranges) == 1

    def view(self) -> memoryview:
        """Zero-copy view; only for a single range."""
        ptr, size = self.ranges[0]
        return view_at(ptr, size)

    def gather(self) -> bytearray:
        """Copy the ranges into one staging buffer (for writing a split object)."""
        out = bytearray(self.size)
        dst = (ctypes.c_ubyte * len(out)).from_buffer(out)
        offset = 0
        for ptr, size in self.ranges:
            ctypes.memmove(ctypes.addressof(dst) + offset, ptr, size)
            offset += size
        del dst  # release the export so the bytearray stays an ordinary object
        return out

    def scatter(self, data: bytearray) -> None:
        """Copy a staging buffer back into the ranges (after reading a split object)."""
        src = (ctypes.c_ubyte * len(data)).from_buffer(data)
        offset = 0
        for ptr, size in self.ranges:
            ctypes.memmove(ptr, ctypes.addressof(src) + offset, size)
            offset += size
        del src


def group_objects(
    ptrs: Sequence, sizes: Sequence, pages: int, objects_per_page: int
) -> List[ObjectRanges]:
    """Split get_page_buffer_meta's flat lists into one ObjectRanges per stored object.

    Per page SGLang lists its ranges object-interleaved: for MHA ``k, v`` (page-first) or
    ``k_l0, v_l0, k_l1, v_l1, ...`` (layer-first); for MLA one range per layer. So object
    ``j`` of a page owns every ``objects_per_page``-th range starting at ``j``.
    """
    ptrs = [int(p) for p in ptrs]
    sizes = [int(s) for s in sizes]
    if len(ptrs) != len(sizes):
        raise ValueError(f"{len(ptrs)} page pointers but {len(sizes)} sizes")
    if pages == 0:
        return []
    per_page, rest = divmod(len(ptrs), pages)
    if rest or per_page == 0 or per_page % objects_per_page:
        raise ValueError(
            f"host pool gave {len(ptrs)} buffer ranges for {pages} pages; expected a "
            f"multiple of {objects_per_page} per page"
        )
    objects = []
    for page in range(pages):
        base = page * per_page
        for j in range(objects_per_page):
            idx = range(base + j, base + per_page, objects_per_page)
            objects.append(ObjectRanges([(ptrs[i], sizes[i]) for i in idx]))
    return objects
