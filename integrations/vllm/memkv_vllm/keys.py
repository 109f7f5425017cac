"""memkv keys for vLLM KV-cache chunks.

A chunk is one vLLM KV block: ``block_size`` consecutive prompt tokens. Its key names

* the namespace: a digest of everything that makes two KV pages byte-compatible (model and
  its revision, the weights' quantization, KV dtype and vLLM's KV cache dtype setting, block
  size, KV heads, head size, page size, layer names, tensor-parallel size, an optional user
  namespace), so different models, weights, dtypes or layouts never read each other's bytes.
  The same model served with differently quantized weights (vLLM's ``--quantization``: none,
  fp8, awq, gptq, ...) computes different KV values for the same tokens, so the quantization
  is part of it even where the pages' sizes and dtypes are equal;
* the tensor-parallel rank, because each rank holds a different slice of the heads;
* a hash chain over the token ids: chunk i's hash covers every token of chunks 0..i (and a
  per-request seed for LoRA adapters and cache salts), so a key only matches the same prefix;
* the layer name, because vLLM keeps one paged tensor per attention layer.

The offloading tier (``tier.py``) stores vLLM's own offload chunks instead: one value per
chunk holding every worker's bytes of it, keyed by vLLM's block hash; its namespace names the
same model identity (model, revision, weight quantization) and the offload layout (see
``TierLayout``).

Nothing here imports vLLM or memkv, so the unit tests run without either.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

# Bumped whenever the key or value format changes, so old entries are never misread.
# 2: the weights' quantization (and, for the tier, the model's revision) joined the namespace.
FORMAT_VERSION = 2
_HASH_BYTES = 16
# How unquantized weights are named in keys (vLLM's model_config.quantization is then None).
UNQUANTIZED = "none"


def quantization_name(method: str | None) -> str:
    """The weights' quantization as keys name it: vLLM's quantization method (its
    ``--quantization``, or what it detected from the checkpoint: "fp8", "awq", "gptq", ...) in
    lower case, or ``UNQUANTIZED`` for None (unquantized weights)."""
    if method is None:
        return UNQUANTIZED
    if not isinstance(method, str) or not method.strip():
        raise ValueError(
            f"a quantization method must be a non-empty string ({UNQUANTIZED!r} for unquantized "
            f"weights), got {method!r}"
        )
    return method.strip().lower()


@dataclass(frozen=True)
class Layout:
    """What must match for a stored KV page to be loadable as-is."""

    model: str
    # The weights' quantization (``quantization_name``): the same model quantized otherwise
    # computes other KV values for the same tokens, in pages of the same size and dtype.
    quantization: str
    kv_dtype: str
    cache_dtype: str  # vLLM's --kv-cache-dtype: "auto", "fp8_e4m3", "fp8_e5m2", ...
    block_size: int
    num_kv_heads: int
    head_size: int
    page_bytes: int
    layer_names: tuple[str, ...]
    tp_size: int
    namespace: str = ""

    def digest(self) -> str:
        return _digest(asdict(self))


def _digest(fields: dict[str, object]) -> str:
    fields = {**fields, "format": FORMAT_VERSION}
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(canonical, digest_size=_HASH_BYTES).hexdigest()


@dataclass(frozen=True)
class TierLayout:
    """What must match for a chunk stored by vLLM's offloading tier to be loadable as-is.

    The tier sees one row of vLLM's CPU offload buffer per chunk: every worker's pages of
    ``blocks_per_chunk`` blocks of all offloaded layers, side by side in rank order (one copy
    when the layout is replicated). The row's bytes depend on all of these (the model, its
    revision and its weights' quantization decide the KV values, the rest their layout), so
    all of them are in the key; the data-parallel index and the engine id are not (DP replicas
    share).
    """

    model: str  # the model and its revision ("name@revision"), or the user's model_id
    quantization: str  # the weights' quantization (``quantization_name``), as in ``Layout``
    kv_dtype: str
    tokens_per_hash: int
    blocks_per_chunk: int
    # (tokens per block, layer names) of each offloaded KV cache group, in order.
    groups: tuple[tuple[int, tuple[str, ...]], ...]
    world_size: int
    tp_size: int
    pp_size: int
    pcp_size: int
    dcp_size: int
    replicated_layout: bool
    canonical_layout: bool
    kv_cache_layout: str | None
    chunk_bytes: int
    namespace: str = ""

    def digest(self) -> str:
        return _digest({**asdict(self), "kind": "offloading-tier"})

    def ranks(self) -> str:
        """The ranks whose bytes a value holds: all of them, or rank 0's one replicated copy."""
        copies = 1 if self.replicated_layout else self.world_size
        return f"ranks0-{copies - 1}"


def tier_key(namespace: str, ranks: str, block_hash: bytes, group: int) -> str:
    """The memkv key of one offloaded chunk, named by vLLM's block hash and KV cache group."""
    return f"vllm/{namespace}/{ranks}/{block_hash.hex()}/g{group}"


def chain_seed(extra: Sequence[str] = ()) -> bytes:
    """The hash a request's chain starts from: LoRA adapter, cache salt, ... (empty for most)."""
    h = hashlib.blake2b(b"memkv-vllm chain", digest_size=_HASH_BYTES)
    for part in extra:
        encoded = part.encode()
        h.update(len(encoded).to_bytes(4, "little"))
        h.update(encoded)
    return h.digest()


def chunk_hashes(
    token_ids: Sequence[int], block_size: int, seed: bytes, prev: Sequence[str] = ()
) -> list[str]:
    """Hex hashes of every whole chunk of ``token_ids`` (a trailing partial chunk has none).

    ``prev`` holds hashes already computed for chunks ``0..len(prev)``; only later chunks are
    hashed, so a request that grows is hashed once.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    out = list(prev)
    n_chunks = len(token_ids) // block_size
    if len(out) >= n_chunks:
        return out[:n_chunks]
    # Little-endian uint32 fixes the byte form on every host; vLLM's token ids fit.
    tokens = np.asarray(token_ids[len(out) * block_size : n_chunks * block_size], dtype="<u4")
    parent = bytes.fromhex(out[-1]) if out else seed
    for i in range(n_chunks - len(out)):
        h = hashlib.blake2b(parent, digest_size=_HASH_BYTES)
        h.update(tokens[i * block_size : (i + 1) * block_size].tobytes())
        parent = h.digest()
        out.append(parent.hex())
    return out


def chunk_key(namespace: str, rank: int, chunk_hash: str, layer_name: str) -> str:
    return f"vllm/{namespace}/tp{rank}/{chunk_hash}/{layer_name}"


def chunk_keys(namespace: str, rank: int, chunk_hash: str, layer_names: Sequence[str]) -> list[str]:
    """The keys of one chunk on one rank: one per layer, in layer order."""
    return [chunk_key(namespace, rank, chunk_hash, layer) for layer in layer_names]


def leading_hits(found: Sequence[bool], keys_per_chunk: int) -> int:
    """How many chunks from the first have every one of their keys present."""
    if keys_per_chunk <= 0:
        raise ValueError(f"keys_per_chunk must be positive, got {keys_per_chunk}")
    n = 0
    for i in range(0, len(found) - keys_per_chunk + 1, keys_per_chunk):
        if not all(found[i : i + keys_per_chunk]):
            break
        n += 1
    return n
