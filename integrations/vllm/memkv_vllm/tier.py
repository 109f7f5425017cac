"""``MemkvTier``: memkv as a secondary tier of vLLM's ``TieringOffloadingSpec``.

vLLM's tiered offloading keeps KV chunks in a CPU buffer (the primary tier) and cascades every
chunk stored there to each secondary tier; a chunk the primary tier lacks is looked up in the
secondary tiers and promoted back into the buffer. This tier keeps those chunks in memkv, so
other engines (other processes, other hosts, the same engine after a restart) find them.

Turn it on with ``OffloadingConnector`` and, in ``kv_connector_extra_config``::

    "spec_name": "TieringOffloadingSpec",
    "cpu_bytes_to_use": 8589934592,
    "secondary_tiers": [{"type": "MemkvTier", "module_path": "memkv_vllm.tier",
                         "servers": ["10.0.0.5:9900"]}]

or ``{"type": "memkv", ...}`` once the ``vllm.general_plugins`` entry point of this package
(``memkv_vllm.plugin:register``) has run, which vLLM does at start-up.

Everything here runs in vLLM's scheduler and returns at once:

* ``lookup`` answers from vLLM's ``AsyncLookupManager``: a key not seen yet is queued, asked of
  memkv in one ``exists_many`` per step on the manager's thread (after ``on_schedule_end``), and
  answers RETRY until then; HIT or MISS after. A secondary tier never answers HIT_PENDING: the
  tiering manager itself turns a HIT into HIT_PENDING while it promotes the chunk.
* ``submit_store`` / ``submit_load`` hand the job to ``transfers.ChunkTransfers`` (worker
  threads, ``put_many`` / ``get_many_into`` straight from and into the buffer's rows);
  ``get_finished_jobs`` collects what ended.
* Failures are misses, never wrong bytes: a load that fails or finds a value of the wrong size
  fails those chunks (vLLM frees their rows and recomputes), and its keys are marked missing so
  the scheduler does not promote them again and again. Every memkv call carries ``timeout_ms``,
  and after a connection failure memkv is not asked again for ``retry_after_s``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from vllm.config import get_current_vllm_config_or_none
from vllm.v1.kv_offload.base import (
    Locality,
    LookupResult,
    Medium,
    OffloadKey,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
    get_offload_block_hash,
    get_offload_group_idx,
)
from vllm.v1.kv_offload.tiering.async_lookup import AsyncLookupManager
from vllm.v1.kv_offload.tiering.base import (
    JobId,
    JobResult,
    SecondaryTierManager,
    TransferJob,
)
from vllm.v1.metrics.cache_hit_source import CacheHitSource

from . import keys as K
from .settings import DEFAULT_RETRY_AFTER_S, parse
from .store import Store, StoreUnavailable, item_results
from .transfers import ChunkTransfers, Outcome

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import OffloadingSpec
    from vllm.v1.kv_offload.tiering.backpressure import BackpressureDetector

logger = logging.getLogger("vllm.memkv_vllm")


def _served_weights(
    model_name: str, quantization: str | None, revision: str | None, source: str
) -> tuple[str, str]:
    """(quantization, revision) of the weights the engine serves, for the tier's keys.

    The same model path with differently quantized weights (vLLM's ``--quantization``, or what
    it detected from the checkpoint) or another revision computes other KV values for the same
    tokens, so both are keyed. vLLM hands a secondary tier only its ``OffloadingSpec``, whose
    model config holds the model's name and KV dtype, neither of them. They are taken from
    vLLM's current config when one is set for this model (vLLM 0.32 builds the scheduler's
    tiers outside ``set_current_vllm_config``, so in an engine it is not), else from the tier's
    ``quantization`` and ``revision`` settings. An unknown quantization is refused, never
    guessed: keys that left it out, or named it "unknown", would let an fp8 engine load a bf16
    engine's KV and answer wrongly without a sign. A revision left out is keyed as none, as the
    connector keys ``--revision`` left out.
    """
    given = None
    if quantization is not None:
        try:
            given = K.quantization_name(quantization)
        except ValueError as e:
            raise ValueError(f"memkv_vllm: {source} 'quantization': {e}") from None
    if revision is not None and not isinstance(revision, str):
        raise ValueError(f"memkv_vllm: {source} 'revision' must be a string, got {revision!r}")

    current = get_current_vllm_config_or_none()
    mc = current.model_config if current is not None else None
    if mc is not None and mc.model == model_name:
        served = K.quantization_name(mc.quantization)
        served_revision = mc.revision or ""
        if given is not None and given != served:
            raise ValueError(
                f"memkv_vllm: {source} 'quantization' is {quantization!r}, but vLLM serves "
                f"{model_name} with quantization {served!r}"
            )
        if revision is not None and revision != served_revision:
            raise ValueError(
                f"memkv_vllm: {source} 'revision' is {revision!r}, but vLLM serves "
                f"{model_name} at revision {served_revision!r}"
            )
        return served, served_revision
    if given is None:
        raise ValueError(
            f"memkv_vllm: {source} cannot tell how the weights of {model_name} are quantized "
            "(vLLM does not give secondary tiers its model config): set 'quantization' in the "
            f"tier's config to vLLM's quantization method, {K.UNQUANTIZED!r} for unquantized "
            "weights, else e.g. 'fp8', 'awq', 'gptq' (the quantization= vLLM logs when the "
            "engine starts). KV from differently quantized weights differs, so it is keyed; "
            "'model_id' names the model only"
        )
    return given, revision or ""


class MemkvLookups(AsyncLookupManager):
    """vLLM's per-tier lookup cache and thread, asking memkv one batch per step."""

    def __init__(self, tier_type: str, store: Store, tier: MemkvTier) -> None:
        self._store = store
        self._tier = tier
        super().__init__(tier_type=tier_type)

    def batch_lookup(self, keys: list[OffloadKey], req_context: ReqContext) -> Iterable[bool]:
        try:
            found: list[bool] = self._store.call(
                "exists_many", [self._tier.memkv_key(k) for k in keys]
            )
        except StoreUnavailable as e:
            # Store has logged it; vLLM would log again on every step of an outage. Keys on
            # servers that answered keep their answer.
            return [r is True for r in item_results(e, len(keys))]
        return found


class MemkvTier(SecondaryTierManager):
    """A secondary tier in memkv: one memkv value per offloaded chunk (one row of the buffer)."""

    # memkv servers are other hosts' memory (or drives): neither this host's memory nor its
    # disk, so hits are reported as external.
    medium: ClassVar[Medium | None] = None
    cache_hit_source: ClassVar[CacheHitSource] = CacheHitSource.EXTERNAL_UNSPECIFIED

    def __init__(
        self,
        offloading_spec: OffloadingSpec,
        primary_kv_view: memoryview,
        tier_type: str,
        servers: list[str] | str | None = None,
        auth_key: str | None = None,
        transport: str | None = None,
        timeout_ms: int | None = None,
        config: str | None = None,
        namespace: str = "",
        model_id: str | None = None,
        quantization: str | None = None,
        revision: str | None = None,
        retry_after_s: float = DEFAULT_RETRY_AFTER_S,
        load_threads: int = 2,
        store_threads: int = 2,
        locality: str | None = "REMOTE",
        lookup_timeout_s: float | None = None,
        backpressure_detector: BackpressureDetector | None = None,
    ) -> None:
        """Args beyond vLLM's own: memkv's client settings (``servers``, ``auth_key``,
        ``transport``, ``timeout_ms``, ``config``; each left out is taken from ``MEMKV_*``),
        ``namespace`` (mixed into every key), ``model_id`` (the model's name and revision in
        keys, when hosts load the same weights from different paths), ``quantization`` and
        ``revision`` (the served weights' quantization method, "none" when unquantized, and the
        model's revision: see ``_served_weights``; required where vLLM's config is not at hand),
        ``retry_after_s`` (back-off after a connection failure), ``load_threads`` /
        ``store_threads`` (transfer threads), ``locality`` (vLLM's tier filter; memkv is
        ``REMOTE`` unless said otherwise) and ``lookup_timeout_s`` (how long lookups may hold
        a request; then its unanswered chunks are misses and it is computed)."""
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        self.locality = Locality(locality.upper()) if locality else None
        if load_threads < 1 or store_threads < 1:
            raise ValueError("memkv_vllm: load_threads and store_threads must be at least 1")
        if not primary_kv_view.c_contiguous:
            raise ValueError("memkv_vllm: the primary tier's buffer is not C-contiguous")

        source = f"secondary tier '{tier_type}'"
        given = dict(
            servers=servers, auth_key=auth_key, transport=transport, timeout_ms=timeout_ms,
            config=config, retry_after_s=retry_after_s, lookup_timeout_s=lookup_timeout_s,
        )
        settings = parse({k: v for k, v in given.items() if v is not None}, os.environ, source)

        spec_config = offloading_spec.config
        parallel = spec_config.parallel
        model_name = spec_config.model.name
        quantization, revision = _served_weights(model_name, quantization, revision, source)
        layout = K.TierLayout(
            # model_id replaces the name and revision only: the quantization is always keyed.
            model=model_id or f"{model_name}@{revision}",
            quantization=quantization,
            kv_dtype=spec_config.model.dtype,
            tokens_per_hash=spec_config.cache.tokens_per_hash,
            blocks_per_chunk=spec_config.cache.blocks_per_chunk,
            groups=tuple((g.tokens_per_block, tuple(g.layer_names)) for g in spec_config.groups),
            world_size=parallel.world_size,
            tp_size=parallel.tp_size,
            pp_size=parallel.pp_size,
            pcp_size=parallel.pcp_size,
            dcp_size=parallel.dcp_size,
            replicated_layout=bool(offloading_spec.replicated_layout),
            canonical_layout=spec_config.canonical_layout,
            kv_cache_layout=spec_config.kv_cache_layout,
            chunk_bytes=self.block_size_bytes,
            namespace=namespace,
        )
        self.layout = layout
        self.namespace = layout.digest()
        self._ranks = layout.ranks()

        self._store = Store(settings, "tier")
        # One flat byte view of the buffer, rows sliced from it per transfer (no copies).
        self._rows = primary_kv_view.cast("B")
        # Only registers where RDMA can use it (Store decides); over TCP it would slow gets.
        self._store.register([self._rows])
        self._transfers = ChunkTransfers(
            self._store, self._rows, self.block_size_bytes, load_threads, store_threads
        )
        self._lookups = MemkvLookups(tier_type, self._store, self)
        self._lookup_timeout_s = settings.lookup_timeout_s
        # vLLM holds a request while any of its lookups answers RETRY: since when each
        # request has been held (step after step), so that after lookup_timeout_s its
        # unanswered keys answer MISS and it is computed.
        self._held_since: dict[str, float] = {}
        self._held_this_step: set[str] = set()
        # Keys of promotions in flight, so a failed one can mark exactly its keys missing.
        self._load_keys: dict[JobId, list[OffloadKey]] = {}
        self._closed = False
        logger.info(
            "memkv_vllm tier '%s': namespace %s (model %s, quantization %s), %d-byte chunks, "
            "servers %s", tier_type, self.namespace, layout.model, layout.quantization,
            self.block_size_bytes,
            settings.client_kwargs.get("servers", "from MEMKV_SERVERS / MEMKV_CONFIG"),
        )

    def memkv_key(self, key: OffloadKey) -> str:
        return K.tier_key(
            self.namespace, self._ranks, get_offload_block_hash(key), get_offload_group_idx(key)
        )

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        found = self._lookups.lookup(key, req_context)
        if found is None:
            req = req_context.req_id
            now = time.monotonic()
            self._held_this_step.add(req)  # still waiting: its clock goes on
            if now - self._held_since.setdefault(req, now) < self._lookup_timeout_s:
                return LookupResult.RETRY
            # Past its limit: MISS for as long as vLLM keeps asking, not RETRY again.
            logger.debug("memkv_vllm tier: request %s waited %.3f s for lookups; a miss", req,
                         self._lookup_timeout_s)
            return LookupResult.MISS
        return LookupResult.HIT if found else LookupResult.MISS

    def submit_store(self, job_metadata: TransferJob) -> None:
        keys = [self.memkv_key(k) for k in job_metadata.keys]
        self._transfers.submit_store(job_metadata.job_id, keys, job_metadata.chunk_ids.tolist())

    def submit_load(self, job_metadata: TransferJob) -> None:
        offload_keys = list(job_metadata.keys)
        self._load_keys[job_metadata.job_id] = offload_keys
        keys = [self.memkv_key(k) for k in offload_keys]
        self._transfers.submit_load(job_metadata.job_id, keys, job_metadata.chunk_ids.tolist())

    def get_finished_jobs(self) -> Iterable[JobResult]:
        return [self._result(outcome) for outcome in self._transfers.finished()]

    def _result(self, outcome: Outcome) -> JobResult:
        success = all(outcome.ok)
        successful_keys = None
        load_keys = self._load_keys.pop(outcome.job_id, None)
        if load_keys is not None and not success:
            loaded = [k for k, ok in zip(load_keys, outcome.ok) if ok]
            successful_keys = tuple(loaded) or None
            # Without this the scheduler would see the cached HIT again and promote the same
            # missing chunk on every step (vLLM #49176).
            self._lookups.mark_miss([k for k, ok in zip(load_keys, outcome.ok) if not ok])
        return JobResult(
            job_id=outcome.job_id,
            success=success,
            successful_keys=successful_keys,
            transfer_time=outcome.seconds,
            transfer_bytes=outcome.nbytes,
        )

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def on_request_finished(self, req_context: ReqContext) -> None:
        self._lookups.cleanup(req_context.req_id)
        self._held_since.pop(req_context.req_id, None)

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        self._lookups.flush()
        # A request held by none of its lookups this step is no longer waiting: a later wait
        # (after preemption, say) has a clock of its own.
        for req in self._held_since.keys() - self._held_this_step:
            del self._held_since[req]
        self._held_this_step.clear()

    def drain_jobs(self) -> None:
        self._transfers.drain()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._lookups.shutdown()
        self._transfers.shutdown()
        self._store.close()
        # vLLM unmaps the buffer after its tiers shut down; a view of ours still alive would
        # keep it exported and the unmap would fail.
        try:
            self._rows.release()
        except BufferError as e:
            logger.warning("memkv_vllm tier: the offload buffer is still in use (%s)", e)

