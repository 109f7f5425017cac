# SPDX-License-Identifier: Apache-2.0
"""SGLang's plain (non-v1) HiCache interface: one flat page tensor per key.

HiCacheController uses it when interface_v1 is off: it copies each page out of the host
pool into a tensor (get_data_page) for batch_set, and reads into scratch pages
(get_dummy_flat_data_page) for batch_get before copying them into the pool. The page is
stored as one object holding K and V together.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, List, Optional

import memkv
import torch

logger = logging.getLogger(__name__)


def _tensor_bytes(value: torch.Tensor):
    """A C-contiguous CPU byte view of a tensor (copies only when it must)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor page, got {type(value).__name__}")
    t = value.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.contiguous().reshape(-1).view(torch.uint8).numpy()


def kept_results(err: "memkv.Error") -> Optional[List[Any]]:
    """A failed batch read's per-item outcomes, each failed item as a miss (None); None when
    the error says nothing per item (a connection lost, a deadline missed)."""
    if err.results is None:
        return None
    return [None if isinstance(r, Exception) else r for r in err.results]


def read_lengths(client: memkv.Client, names: list[str], buffers: list, what: str) -> list[Any]:
    """``get_many_into``: each value's length, None where it failed or is missing; a failure
    is logged (naming ``what`` was read), never raised."""
    try:
        return list(client.get_many_into(names, buffers))
    except memkv.Error as e:
        logger.warning("memkv: reading %d %s failed: %s", len(names), what, e)
        return kept_results(e) or [None] * len(names)


def put_absent(
    client: memkv.Client, names: list[str], present: Sequence[bool], value_of, what: str
) -> tuple[list[int], set]:
    """Stores the named objects memkv does not hold yet (objects are named by their content's
    hash: one already stored is not written again), ``value_of(i)`` giving object i's bytes.
    Returns which objects were sent, and the names that failed (logged, never raised)."""
    todo = [i for i, p in enumerate(present) if not p]
    failed: set = set()
    if todo:
        try:
            client.put_many([(names[i], value_of(i)) for i in todo])
        except memkv.Error as e:
            failed = failed_keys(e, [names[i] for i in todo])
            logger.warning("memkv: %d of %d %s not stored: %s", len(failed), len(todo), what, e)
    return todo, failed


def group_all(object_ok: Sequence[bool], per_page: int) -> list[bool]:
    """Per page: whether every one of its ``per_page`` consecutive objects is ok."""
    return [all(object_ok[i : i + per_page]) for i in range(0, len(object_ok), per_page)]


def failed_keys(err: Exception, attempted: Sequence[str]) -> set:
    """The keys a batch exception names; all of them when it names none."""
    raw = getattr(err, "keys", None)
    if not raw:
        return set(attempted)
    return {k.decode() if isinstance(k, (bytes, bytearray)) else str(k) for k in raw}


class PlainPages:
    """Mixed into MemKVHiCacheStorage, which provides client, keys, _exists_objects and
    the metrics lists."""

    def set(
        self,
        key: str,
        value: Optional[Any] = None,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        return self.batch_set([key], [value])

    def batch_set(
        self,
        keys: List[str],
        values: Optional[Any] = None,
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        if not keys:
            return True
        if values is None or len(values) != len(keys):
            raise ValueError(
                f"batch_set needs one page tensor per key: {len(keys)} keys, "
                f"{'no' if values is None else len(values)} values"
            )
        names = [self.keys.flat_page(k) for k in keys]
        present = self._exists_objects(names) or [False] * len(names)
        items = [(n, _tensor_bytes(v)) for n, v, p in zip(names, values, present) if not p]
        start = time.perf_counter()
        if items:
            try:
                self.client.put_many(items)
            except memkv.Error as e:
                logger.warning("memkv: storing %d pages failed: %s", len(items), e)
                return False
        self._record(
            self._backup_pgs, self._backup_bw, len(keys), sum(b.nbytes for _, b in items), start
        )
        return True

    def get(
        self,
        key: str,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> torch.Tensor | None:
        targets = None if target_location is None else [target_location]
        return self.batch_get([key], targets)[0]

    def batch_get(
        self,
        keys: List[str],
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> List[torch.Tensor | None]:
        if not keys:
            return []
        names = [self.keys.flat_page(k) for k in keys]
        start = time.perf_counter()
        if target_locations is None:
            # No destination given: return the stored bytes as uint8 tensors.
            try:
                values = self.client.get_many(names)
            except memkv.Error as e:
                logger.warning("memkv: reading %d pages failed: %s", len(keys), e)
                values = kept_results(e) or [None] * len(keys)
            return [
                None if v is None else torch.frombuffer(bytearray(v), dtype=torch.uint8)
                for v in values
            ]
        if len(target_locations) != len(keys):
            raise ValueError(
                f"batch_get needs one target tensor per key: {len(keys)} keys, "
                f"{len(target_locations)} targets"
            )
        buffers = []
        for t in target_locations:
            direct = t.device.type == "cpu" and t.is_contiguous()
            # Read straight into the caller's tensor when its memory allows it.
            buffers.append(
                t.reshape(-1).view(torch.uint8).numpy()
                if direct
                else bytearray(t.numel() * t.element_size())
            )
        lengths = read_lengths(self.client, names, buffers, "pages")
        out: List[torch.Tensor | None] = []
        read = 0
        for t, buf, n in zip(target_locations, buffers, lengths):
            want = t.numel() * t.element_size()
            if n is None or n != want:
                out.append(None)
                continue
            if isinstance(buf, bytearray):
                src = torch.frombuffer(buf, dtype=torch.uint8).view(t.dtype).reshape(t.shape)
                t.copy_(src)
            out.append(t)
            read += want
        self._record(self._prefetch_pgs, self._prefetch_bw, len(keys), read, start)
        return out
