# SPDX-License-Identifier: Apache-2.0
"""How SGLang page hashes become memkv keys.

SGLang names a page by a hash of its tokens (and of every token before it), so the
hash alone identifies the content but not the *bytes*: the same page is cut
differently per tensor-parallel rank, per pipeline stage, per model, per host
memory layout and per KV dtype. Every one of those goes into the key, so two
engines that disagree on any of them never read each other's pages.

Layout (``{ns}`` is the namespace below):

* zero-copy (v1) MHA: ``{ns}_{hash}_{rank}_k`` and ``{ns}_{hash}_{rank}_v``,
  one object per K and V half of a page, as SGLang's Mooncake backend does;
* zero-copy (v1) MLA: ``{ns}_{hash}_k`` once, because the latent cache is the
  same on every TP rank (only the storage writer rank stores it);
* plain interface: ``{ns}_{hash}_{rank}_page`` (MHA) or ``{ns}_{hash}_page``
  (MLA), one object holding SGLang's flat page (K and V together);
* hybrid side pools (``batch_*_v2``): ``{ns}_{hash}[_{rank}]_{pool}-{format}_{part}``, where
  ``{pool}`` is SGLang's pool name (``mamba``, ``swa``, ...), ``{format}`` what decides the
  pool's bytes (layout, dtypes, layers) and ``{part}`` the object within the page (``k``,
  ``v``, ``temporal``, ``conv0``, ``page``). ``{rank}`` is there when the pool is split
  across TP ranks: always for MHA models, and for Mamba state and MHA-shaped pools of MLA
  models (as ``{tp_rank}of{tp_size}``, since an MLA namespace carries no TP size).

``{rank}`` is the TP rank, followed by ``_{pp_rank}`` under pipeline
parallelism and ``_cp{rank}of{size}`` under attention context parallelism.
``{ns}`` is ``{key_prefix}_{model}`` plus ``_tp{tp_size}`` for MHA (a rank's
head shard depends on the TP size), ``_pp{pp_size}`` under pipeline
parallelism, ``_dcp{size}_page{logical_page_size}`` under decode context
parallelism and, once SGLang has registered its host pool,
``_{layout}-{dtype}_L{start}-{end}``: the model layers ``[start, end)`` the
pool holds, since a pipeline stage's layers depend on SGLANG_PP_LAYER_PARTITION,
not on its rank alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import List, Optional

DEFAULT_KEY_PREFIX = "sglang"


@dataclass(frozen=True)
class KeyScheme:
    namespace: str
    rank_suffix: str  # "" for MLA without PP/DCP
    is_mla: bool
    # The rank part of a side pool split across TP ranks (MLA models included).
    sharded_suffix: str = ""

    @staticmethod
    def build(
        storage_config,
        key_prefix: Optional[str] = None,
        pool_format: Optional[str] = None,
    ) -> "KeyScheme":
        cfg = storage_config
        parts = [key_prefix or DEFAULT_KEY_PREFIX]
        # "/" separates path components in many tools that show keys; SGLang's
        # own backends turn "org/model" into "org-model" too.
        parts.append("-".join((cfg.model_name or "unnamed-model").split("/")))
        if not cfg.is_mla_model:
            parts.append(f"tp{cfg.tp_size}")
        if cfg.pp_size > 1:
            # pp_rank alone names a stage only among engines with the same number of them.
            parts.append(f"pp{cfg.pp_size}")
        if getattr(cfg, "dcp_size", 1) > 1:
            # DCP shards are only interchangeable between matching topologies.
            parts.append(f"dcp{cfg.dcp_size}_page{cfg.logical_page_size}")
        if pool_format:
            parts.append(pool_format)

        rank = []
        if cfg.is_mla_model:
            if getattr(cfg, "dcp_size", 1) > 1:
                rank.append(f"dcp{cfg.dcp_rank}")
        else:
            rank.append(str(cfg.tp_rank))
        if cfg.pp_size > 1:
            rank.append(str(cfg.pp_rank))
        if cfg.attn_cp_size > 1:
            rank.append(f"cp{cfg.attn_cp_rank}of{cfg.attn_cp_size}")
        rank_suffix = "_".join(rank)
        # MLA namespaces carry no TP size: a TP-split side pool names it with the rank.
        sharded = (
            "_".join([f"{cfg.tp_rank}of{cfg.tp_size}", *rank]) if cfg.is_mla_model else rank_suffix
        )
        return KeyScheme("_".join(parts), rank_suffix, cfg.is_mla_model, sharded)

    def _base(self, page_hash: str) -> str:
        base = f"{self.namespace}_{page_hash}"
        return f"{base}_{self.rank_suffix}" if self.rank_suffix else base

    @property
    def objects_per_page(self) -> int:
        """Objects one page is stored as on the zero-copy path."""
        return 1 if self.is_mla else 2

    def page_objects(self, page_hash: str) -> List[str]:
        """Zero-copy object keys of one page, in get_page_buffer_meta's order."""
        base = self._base(page_hash)
        if self.is_mla:
            return [f"{base}_k"]
        return [f"{base}_k", f"{base}_v"]

    def flat_page(self, page_hash: str) -> str:
        """The key of one flat page on the plain (non-v1) interface."""
        return f"{self._base(page_hash)}_page"

    def side_page_objects(
        self, page_hash: str, pool_tag: str, components: Sequence[str], sharded: bool
    ) -> list[str]:
        """Object keys of one page of a hybrid side pool (see the module docstring)."""
        rank = self.sharded_suffix if sharded else self.rank_suffix
        base = f"{self.namespace}_{page_hash}"
        if rank:
            base = f"{base}_{rank}"
        return [f"{base}_{pool_tag}_{part}" for part in components]


def pool_format(mem_pool_host) -> Optional[str]:
    """``{layout}-{dtype}[_L{start}-{end}]`` of a host pool: what decides a page's byte order
    and width, and which layers it holds, beyond what the storage config says."""
    layout = getattr(mem_pool_host, "layout", None)
    dtype = getattr(mem_pool_host, "dtype", None)
    if layout is None or dtype is None:
        return None
    dtype_name = str(dtype).removeprefix("torch.")
    # A pool's own storage_format_tag is already in the model name SGLang hands us.
    fmt = f"{layout}-{dtype_name}"
    # SGLANG_PP_LAYER_PARTITION lets one pp_rank hold other layers on another engine
    # (4,12,16 vs 8,12,12: stage 1 holds 4..15 vs 8..19) in pages of equal size, so only
    # the layers tell them apart. layer_num counts packed MTP draft layers too; end_layer
    # is not used because SGLang's pools disagree on whether it is inclusive.
    start = getattr(mem_pool_host, "start_layer", None)
    count = getattr(mem_pool_host, "layer_num", None)
    if isinstance(start, int) and isinstance(count, int):
        fmt += f"_L{start}-{start + count}"
    return fmt
