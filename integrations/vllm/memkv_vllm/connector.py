"""``MemkvConnector``: vLLM's V1 KV connector backed by memkv.

Turn it on with::

    --kv-transfer-config '{"kv_connector": "MemkvConnector",
                           "kv_connector_module_path": "memkv_vllm.connector",
                           "kv_role": "kv_both",
                           "kv_connector_extra_config": {"servers": ["10.0.0.5:9900"]}}'

vLLM makes two instances: one in the scheduler (looks prompts up, plans loads and saves), one
in each worker (moves the bytes). A chunk is one vLLM KV block of prompt tokens; it is stored
as one memkv value per (rank, layer), keyed as described in ``keys.py``.

* Scheduler: memkv is asked (one ``exists_many``, on the connector's lookup threads, started
  as the request arrives) which leading chunks it holds on every rank and layer;
  ``get_num_new_matched_tokens`` claims those beyond what vLLM has locally, leaving at least
  the prompt's last token to compute (vLLM needs its logits). A scheduling step waits at most
  ``lookup_wait_ms`` for lookups in all; a request whose lookup is still running answers None
  ("ask again"), and one unanswered after ``lookup_timeout_s`` claims nothing.
* Worker: the claimed blocks are filled with one ``get_many_into`` straight into the paged
  cache. With ``load_async`` (the default) the load runs on a thread of its own while vLLM's
  steps go on for the other requests; the request waits for it (vLLM's
  WAITING_FOR_REMOTE_KVS) and ``get_finished`` reports it loaded. Otherwise ``start_load_kv``
  loads before the forward pass. ``wait_for_save`` stores the prompt chunks completed this step
  with one ``put_many`` straight from the cache. With ``save_async`` (the default) it runs on a
  thread of its own: a finished request's blocks are held (``request_finished`` answers True)
  until ``get_finished`` reports its saves ended, and a preempted request's saves end before the
  next forward pass (``handle_preemptions``). Otherwise the step waits for it.
* Failures never give wrong tokens: a lookup that fails claims nothing; a load that fails or
  misses reports its blocks through ``get_block_ids_with_load_errors`` and vLLM recomputes
  them (the connector switches ``kv_load_failure_policy`` from vLLM's default "fail" to
  "recompute" unless ``recompute_on_load_failure`` is false); a save that fails is a future miss.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from . import keys as K
from .inflight import LoadJob, Loads, Lookups, SaveJob, Saves
from .pages import LayerPages, host_ranges, range_view
from .settings import parse
from .store import Store, StoreUnavailable, item_results

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

# Under "vllm." so vLLM's handler prints it, naming the process (Worker / EngineCore).
logger = logging.getLogger("vllm.memkv_vllm")

# A lookup's answer is reused while the request waits to be admitted (vLLM asks again each step
# it cannot allocate the blocks), but not for longer than this: memkv may have gained chunks.
LOOKUP_FRESH_S = 1.0


@dataclass
class Transfer:
    """Chunks of one request to move: ``hashes[i]`` lives in block ``block_ids[i]``."""

    req_id: str
    hashes: list[str]
    block_ids: list[int]
    background: bool = False  # an asynchronous load: the request waits, the step does not


@dataclass
class MemkvConnectorMetadata(KVConnectorMetadata):
    loads: list[Transfer] = field(default_factory=list)
    saves: list[Transfer] = field(default_factory=list)
    preempted: set[str] = field(default_factory=set)  # their saves must end before the step


@dataclass
class _Request:
    """Scheduler-side state of one request."""

    hashes: list[str]  # every whole prompt chunk
    loadable: int  # chunks that may be loaded: whole chunks before the prompt's last token
    lookup_tokens: int = 0  # tokens vLLM had computed locally at lookup
    pending_load: tuple[int, int] | None = None  # chunk range to load in the next step
    block_ids: list[int] = field(default_factory=list)
    saved_upto: int = 0  # chunks below this are in memkv (found there or saved)
    lookup: Future[int] | None = None  # the lookup running for this request
    lookup_started: float = 0.0
    found: int | None = None  # its answer, until the request is admitted or it goes stale
    found_at: float = 0.0
    load_async: bool = False  # the hit was claimed for an asynchronous load
    loading_from: int | None = None  # first chunk of an asynchronous load, until scheduled
    planned_to: int = 0  # tokens it would have computed after its last scheduled step
    saving: bool = False  # saves were planned: with save_async its blocks wait for them


class MemkvConnector(KVConnectorBase_V1):
    @property
    def requires_kv_delivery(self) -> bool:
        # A cache, not a hand-off: a save lost to preemption is only a future miss.
        return False

    def __init__(
        self,
        vllm_config: VllmConfig,
        role: KVConnectorRole,
        kv_cache_config: KVCacheConfig | None = None,
    ) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        if kv_cache_config is None:
            raise ValueError("memkv_vllm: MemkvConnector needs vLLM's KV cache config (vLLM >= 0.32)")
        pc = vllm_config.parallel_config
        for setting, size in (("decode_context_parallel_size", pc.decode_context_parallel_size),
                              ("prefill_context_parallel_size", pc.prefill_context_parallel_size)):
            if size > 1:
                # A block then holds every cp-th token of a larger span, and ranks with one
                # TP rank hold different tokens: chunk hashes and tp<rank> keys would name
                # the wrong bytes.
                raise ValueError(
                    f"memkv_vllm: MemkvConnector does not support context parallelism "
                    f"({setting}={size}); set it to 1, or use memkv as a tier of vLLM's "
                    "OffloadingConnector (MemkvTier)"
                )
        groups = kv_cache_config.kv_cache_groups
        if len(groups) != 1:
            raise ValueError(
                f"memkv_vllm: the model has {len(groups)} KV cache groups; MemkvConnector "
                "supports one (plain attention models, hybrid KV cache manager off)"
            )
        refuse_unsupported_group(groups[0])
        tc = self._kv_transfer_config
        self._settings = parse(tc.kv_connector_extra_config, os.environ)
        spec = groups[0].kv_cache_spec
        self._block_size: int = spec.block_size
        self._layer_names: list[str] = list(groups[0].layer_names)
        self._num_blocks: int = kv_cache_config.num_blocks
        self._page_bytes: int = spec.page_size_bytes
        self._tp_size: int = pc.tensor_parallel_size
        mc = vllm_config.model_config
        if mc is None:
            raise ValueError("memkv_vllm: MemkvConnector needs vLLM's model config")
        layout = K.Layout(
            model=self._settings.model_id or f"{mc.model}@{mc.revision or ''}",
            # The same model with other weight quantization (--quantization, or what vLLM
            # detected from the checkpoint) computes other KV values: never share them.
            quantization=K.quantization_name(mc.quantization),
            kv_dtype=str(spec.dtype),
            # The spec's dtype is only the storage type: every fp8 format is torch.uint8.
            cache_dtype=vllm_config.cache_config.cache_dtype,
            block_size=self._block_size,
            num_kv_heads=int(getattr(spec, "num_kv_heads", 0)),
            head_size=int(getattr(spec, "head_size", 0)),
            page_bytes=self._page_bytes,
            layer_names=tuple(self._layer_names),
            tp_size=self._tp_size,
            namespace=self._settings.namespace,
        )
        self._layout = layout
        self._namespace = layout.digest()
        self._may_load = tc.is_kv_consumer
        self._may_save = tc.is_kv_producer
        who = "scheduler" if role == KVConnectorRole.SCHEDULER else "worker"
        self._store = Store(self._settings, who)
        self._load_async = self._settings.load_async
        self._save_async = self._settings.save_async
        if role == KVConnectorRole.SCHEDULER:
            self._requests: dict[str, _Request] = {}
            self._lookups = Lookups(self._lookup)
            self._lookup_wait_s = self._settings.lookup_wait_ms / 1e3
            self._lookup_timeout_s = self._settings.lookup_timeout_s
            self._wait_left = self._lookup_wait_s  # this scheduling step's, all requests together
            self._background_loads: list[Transfer] = []
            if self._settings.recompute_on_load_failure and tc.kv_load_failure_policy == "fail":
                # A cache miss or a lost server must cost recomputation, never a failed request.
                tc.kv_load_failure_policy = "recompute"
                logger.info("memkv_vllm: kv_load_failure_policy set to 'recompute'")
        else:
            self._rank = _tp_rank()
            self._pages: dict[str, LayerPages] = {}
            self._failed_blocks: set[int] = set()
            # Steps whose saves are dropped after a failed load in the step, this one included:
            # under async scheduling the next step is planned before vLLM hears of the
            # failure, and its forward pass reads the failed blocks too.
            self._drop_saves_for = 0
            self._steps_behind = 2 if vllm_config.scheduler_config.async_scheduling else 1
            self._loads = Loads(self._fetch)
            self._saves = Saves(self._put)
            self.stats = {"loaded_chunks": 0, "loaded_bytes": 0, "failed_chunks": 0,
                          "saved_chunks": 0, "saved_bytes": 0, "save_failures": 0, "dropped_saves": 0}
        if role == KVConnectorRole.SCHEDULER:
            self._warm_up()  # the worker warms up once its KV cache is registered
        logger.info(
            "memkv_vllm %s: namespace %s (%s, quantization %s), block %d tokens, %d layers, "
            "page %d bytes, roles load=%s save=%s", who, self._namespace, layout.model,
            layout.quantization, self._block_size,
            len(self._layer_names), self._page_bytes, self._may_load, self._may_save,
        )

    def _warm_up(self) -> None:
        """Connect now, so the first request does not pay for the connection; a server that is
        down only means recomputing until it is back."""
        try:
            self._store.call("exists_many", [f"vllm/{self._namespace}/warm-up"])
        except StoreUnavailable:
            pass

    # ------------------------------------------------------------------ scheduler side

    def _seed(self, request: Request) -> bytes:
        parts = []
        lora = getattr(request, "lora_request", None)
        if lora is not None:
            parts.append(f"lora:{lora.lora_name}:{lora.lora_path}")
        salt = getattr(request, "cache_salt", None)
        if salt:
            parts.append(f"salt:{salt}")
        return K.chain_seed(parts)

    def on_new_request(self, request: Request) -> None:
        # Ask memkv as the request arrives: the answer is usually there by the time vLLM
        # gets to the request, however long it waited in the queue.
        st = self._state(request)
        if st is not None and st.lookup is None:
            self._start_lookup(st)

    def _state(self, request: Request) -> _Request | None:
        """The request's state, made on first sight; None for requests never cached."""
        tokens = request.prompt_token_ids
        if not tokens or request.mm_features or getattr(request, "prompt_embeds", None) is not None:
            # Images and embeddings are not in the token hash chain: never cache them.
            self._requests.pop(request.request_id, None)
            return None
        st = self._requests.get(request.request_id)
        if st is None:
            hashes = K.chunk_hashes(tokens, self._block_size, self._seed(request))
            st = _Request(hashes=hashes, loadable=(len(tokens) - 1) // self._block_size)
            self._requests[request.request_id] = st
        return st

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        st = self._state(request)
        if st is None:
            return 0, False
        st.lookup_tokens = num_computed_tokens
        st.pending_load = None
        remote = self._remote_chunks(st)
        if remote is None:
            return None, False
        if st.loading_from is not None:
            # Its asynchronous load failed at its first chunk (vLLM sent the request back
            # unscheduled): claiming the same chunks again would fail again, for ever.
            remote = min(remote, st.loading_from)
        st.saved_upto = remote
        if not self._may_load:
            return 0, False
        matched = max(min(remote, st.loadable) * self._block_size - num_computed_tokens, 0)
        st.load_async = self._load_async and matched > 0
        return matched, st.load_async

    def _start_lookup(self, st: _Request) -> None:
        st.lookup, st.lookup_started = self._lookups.start(st.hashes), time.monotonic()

    def _remote_chunks(self, st: _Request) -> int | None:
        """The leading chunks memkv holds, or None while the lookup runs."""
        now = time.monotonic()
        if st.found is not None and now - st.found_at < LOOKUP_FRESH_S:
            return st.found
        if st.lookup is None:
            self._start_lookup(st)
        assert st.lookup is not None
        if not st.lookup.done() and self._wait_left > 0:
            # One budget for the whole step: vLLM asks about every waiting request in it.
            t0 = time.monotonic()
            self._lookups.wait(st.lookup, self._wait_left)
            self._wait_left -= time.monotonic() - t0
        found = self._lookups.answer(st.lookup)
        if found is None:
            if st.found is not None:
                return st.found  # stale, but better than holding the request while it refreshes
            if time.monotonic() - st.lookup_started < self._lookup_timeout_s:
                return None
            st.lookup.cancel()
            logger.debug("memkv_vllm: a lookup took over %.3f s; claiming nothing", self._lookup_timeout_s)
            found = 0
        st.lookup, st.found, st.found_at = None, found, time.monotonic()
        return found

    def _lookup(self, hashes: list[str]) -> int:
        """How many leading chunks memkv holds on every rank and layer (0 on any failure)."""
        if not hashes:
            return 0
        keys = [
            key
            for h in hashes
            for rank in range(self._tp_size)
            for key in K.chunk_keys(self._namespace, rank, h, self._layer_names)
        ]
        t0 = time.perf_counter()
        try:
            found = self._store.call("exists_many", keys)
        except StoreUnavailable as e:
            # Leading chunks whose keys all answered still count.
            found = [r is True for r in item_results(e, len(keys))]
        hits = K.leading_hits(found, self._tp_size * len(self._layer_names))
        logger.debug("memkv_vllm: lookup of %d chunks (%d keys): %d held, %.1f ms", len(hashes),
                     len(keys), hits, (time.perf_counter() - t0) * 1e3)
        return hits

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        st = self._requests.get(request.request_id)
        if st is None:
            return
        # Admitted: should it come back (preempted), memkv is asked afresh.
        st.found = None
        if num_external_tokens <= 0:
            return
        start = st.lookup_tokens // self._block_size
        end = start + num_external_tokens // self._block_size
        if not st.load_async:
            st.pending_load = (start, end)
            return
        # The request waits for this load outside the step's batch, so vLLM does not list it
        # among the scheduled requests: its blocks come from here.
        block_ids = list(blocks.get_block_ids()[0])
        self._background_loads.append(
            Transfer(request.request_id, st.hashes[start:end], block_ids[start:end], background=True)
        )
        st.saved_upto = max(st.saved_upto, end)
        st.loading_from = start

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = MemkvConnectorMetadata()
        meta.loads, self._background_loads = self._background_loads, []
        self._wait_left = self._lookup_wait_s  # the step is planned: the next one's budget
        if self._save_async:
            meta.preempted = set(scheduler_output.preempted_req_ids or ())
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            st = self._requests.get(new.req_id)
            if st is None:
                continue
            st.block_ids = list(new.block_ids[0])
            if st.loading_from is not None:
                # Out of its asynchronous load: where that failed part-way, vLLM recomputes
                # from the failed chunk on, and those chunks are saved over what memkv held.
                st.saved_upto = min(st.saved_upto, new.num_computed_tokens // self._block_size)
            self._plan(new.req_id, st, new.num_computed_tokens + scheduled.get(new.req_id, 0), meta)
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            st = self._requests.get(req_id)
            if st is None:
                continue
            new_blocks = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                # After preemption vLLM hands over the request's whole block list again.
                st.block_ids = list(new_blocks[0]) if new_blocks else []
                st.planned_to = 0  # looked up afresh, so saved_upto is too
            elif new_blocks:
                st.block_ids.extend(new_blocks[0])
            self._after_rollback(st, cached.num_computed_tokens[i])
            self._plan(req_id, st, cached.num_computed_tokens[i] + scheduled.get(req_id, 0), meta)
        return meta

    def _after_rollback(self, st: _Request, computed: int) -> None:
        """A request scheduled with fewer computed tokens than its last step would have left
        was rolled back by vLLM: a load in the step failed, its own or that of a request
        sharing a block with it, and vLLM recomputes from there. Chunks computed over the
        failed blocks may have been saved; from the rollback point on they are saved again,
        over what went to memkv. (Under async scheduling the step right after the failed one
        is planned before vLLM hears of the failure; the one after that shows the rollback.
        Spec-decode rollbacks only touch decode tokens, beyond every saved chunk.)"""
        if computed < st.planned_to:
            st.saved_upto = min(st.saved_upto, computed // self._block_size)

    def _plan(self, req_id: str, st: _Request, computed_after: int, meta: MemkvConnectorMetadata) -> None:
        st.loading_from = None  # scheduled: any asynchronous load of it is over
        st.planned_to = computed_after
        if st.pending_load is not None:
            start, end = st.pending_load
            st.pending_load = None
            if end > start:
                meta.loads.append(Transfer(req_id, st.hashes[start:end], st.block_ids[start:end]))
            st.saved_upto = max(st.saved_upto, end)
        if not self._may_save:
            return
        # Chunks whose every token has KV in the cache once this step has run.
        done = min(computed_after // self._block_size, len(st.hashes), len(st.block_ids))
        if done > st.saved_upto:
            first = st.saved_upto
            meta.saves.append(Transfer(req_id, st.hashes[first:done], st.block_ids[first:done]))
            st.saved_upto = done
            st.saving = True

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        # With save_async the blocks wait until the workers report the request's saves ended;
        # otherwise saves end inside the step that computed them, so the blocks can go now.
        # (vLLM itself keeps a request's blocks while an asynchronous load into them runs.)
        st = self._requests.pop(request.request_id, None)
        if st is not None and st.lookup is not None:
            st.lookup.cancel()  # not to run ahead of the live requests' lookups
        return self._save_async and st is not None and st.saving, None

    # ------------------------------------------------------------------ worker side

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        missing = [name for name in self._layer_names if name not in kv_caches]
        if missing:
            raise ValueError(f"memkv_vllm: no KV cache tensor for layer(s) {missing}")
        self._pages = {
            name: LayerPages(name, kv_caches[name], self._num_blocks, self._page_bytes)
            for name in self._layer_names
        }
        ranges = host_ranges(self._pages.values())
        # Registered once: with RDMA the NIC then reads and writes the pages directly.
        self._store.register([range_view(s, e) for s, e in ranges])
        self._warm_up()
        zero_copy = all(p.zero_copy for p in self._pages.values())
        logger.info(
            "memkv_vllm worker rank %d: %d layers, %d blocks, %s; %d host range(s), %.1f MiB "
            "registered", self._rank, len(self._pages), self._num_blocks,
            "pages moved in place" if zero_copy else "pages staged through host copies",
            len(ranges), sum(e - s for s, e in ranges) / 2**20,
        )

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, MemkvConnectorMetadata)
        now = [t for t in meta.loads if not t.background]
        self._drop_saves_for = max(self._drop_saves_for - 1, 0)  # a step begins
        if now:
            job = self._load_job(now, background=False)
            job.lengths = self._fetch(job)
            if self._finish_load(job):
                self._drop_saves_for = self._steps_behind
        later = [t for t in meta.loads if t.background]
        if later:
            self._loads.submit(self._load_job(later, background=True))

    def _load_job(self, transfers: list[Transfer], background: bool) -> LoadJob:
        job = LoadJob([t.req_id for t in transfers], background, started=time.perf_counter())
        for transfer in transfers:
            for layer in self._layer_names:
                views, commit = self._pages[layer].write_views(transfer.block_ids)
                job.commits.append((commit, len(job.keys), len(views)))
                job.keys.extend(K.chunk_key(self._namespace, self._rank, h, layer) for h in transfer.hashes)
                job.buffers.extend(views)
                job.owners.extend(transfer.block_ids)
        return job

    def _fetch(self, job: LoadJob) -> list[Any]:
        """Each value's length as read into its buffer, None where it failed or is missing."""
        try:
            return list(self._store.call("get_many_into", job.keys, job.buffers))
        except StoreUnavailable:
            return [None] * len(job.keys)

    def _finish_load(self, job: LoadJob) -> set[int]:
        """Commits the pages read (in the step's thread: staged pages are copied to the device
        here), and marks the blocks that were not for vLLM to recompute; returns them."""
        assert job.lengths is not None
        ok = [n == self._page_bytes for n in job.lengths]
        for commit, first, count in job.commits:
            commit(ok[first : first + count])
        failed = {job.owners[i] for i, good in enumerate(ok) if not good}
        self._failed_blocks |= failed
        n_blocks = len(set(job.owners))
        self.stats["loaded_chunks"] += n_blocks - len(failed)
        # Bytes of whole chunks only: a chunk missing one layer is recomputed entirely.
        loaded_bytes = (n_blocks - len(failed)) * len(self._layer_names) * self._page_bytes
        self.stats["loaded_bytes"] += loaded_bytes
        self.stats["failed_chunks"] += len(failed)
        logger.info(
            "memkv_vllm: loaded %d of %d chunks (%d tokens, %.1f MiB) in %.1f ms%s%s",
            n_blocks - len(failed), n_blocks, (n_blocks - len(failed)) * self._block_size,
            loaded_bytes / 2**20, (time.perf_counter() - job.started) * 1e3,
            " in the background" if job.background else "",
            f"; {len(failed)} to recompute" if failed else "",
        )
        return failed

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        loaded: set[str] = set()
        for job in self._loads.finished():
            self._finish_load(job)
            loaded.update(job.req_ids)
        # Failed blocks go out in this same step (vLLM collects them after this call), never
        # after the request is reported loaded.
        saved = self._saves.finished(finished_req_ids) if self._save_async else set()
        return saved or None, loaded or None

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        # A preempted request's blocks go to other requests in this very step.
        assert isinstance(kv_connector_metadata, MemkvConnectorMetadata)
        if kv_connector_metadata.preempted:
            self._saves.wait_for(kv_connector_metadata.preempted)

    def wait_for_layer_load(self, layer_name: str) -> None:
        # start_load_kv fills every layer before the forward pass begins.
        return

    def save_kv_layer(
        self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: AttentionMetadata, **kwargs: Any
    ) -> None:
        # All layers are stored together in wait_for_save: one batch instead of one per layer.
        return

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, MemkvConnectorMetadata)
        if not meta.saves:
            return
        if self._drop_saves_for:
            # This step's forward pass read a failed load's stale bytes: what it computed
            # after them, in any request sharing them, is wrong. vLLM recomputes it, and the
            # scheduler saves it again then; until then memkv must not serve it.
            dropped = sum(len(t.hashes) for t in meta.saves)
            self.stats["dropped_saves"] += dropped
            logger.info("memkv_vllm: a load in the step failed; %d chunk saves dropped", dropped)
            return
        t0 = time.perf_counter()
        items: list[tuple[str, memoryview]] = []
        for transfer in meta.saves:
            for layer in self._layer_names:
                views = self._pages[layer].read_views(transfer.block_ids)
                items.extend(
                    (K.chunk_key(self._namespace, self._rank, h, layer), v)
                    for h, v in zip(transfer.hashes, views)
                )
        job = SaveJob({t.req_id for t in meta.saves}, items, sum(len(t.hashes) for t in meta.saves), t0)
        if self._save_async:
            self._saves.submit(job)
        else:
            self._put(job)

    def _put(self, job: SaveJob) -> None:
        try:
            self._store.call("put_many", job.items)
        except StoreUnavailable:
            self.stats["save_failures"] += job.chunks
            return
        except Exception as e:  # noqa: BLE001 - a failed save is a future miss, never fatal
            self.stats["save_failures"] += job.chunks
            logger.warning("memkv_vllm: saving %d chunks failed: %s", job.chunks, e)
            return
        self.stats["saved_chunks"] += job.chunks
        self.stats["saved_bytes"] += len(job.items) * self._page_bytes
        logger.info(
            "memkv_vllm: saved %d chunks (%.1f MiB) in %.1f ms", job.chunks,
            len(job.items) * self._page_bytes / 2**20, (time.perf_counter() - job.started) * 1e3,
        )

    def get_block_ids_with_load_errors(self) -> set[int]:
        failed, self._failed_blocks = self._failed_blocks, set()
        return failed

    def shutdown(self) -> None:
        if self.role == KVConnectorRole.WORKER:
            self._loads.close()
            self._saves.close()
            logger.info("memkv_vllm worker rank %d: totals %s", self._rank, self.stats)
        else:
            self._lookups.close()
        self._store.close()


def refuse_unsupported_group(group: Any) -> None:
    """Refuses a KV cache group whose blocks vLLM frees while their request runs (sliding
    window, chunked local attention, Mamba state): a background save could read blocks that
    were handed to another request, and a load could target blocks already let go. Full
    attention keeps every block (so do sliding-window layers folded into it, as vLLM does with
    its hybrid manager off)."""
    from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager
    from vllm.v1.kv_cache_spec_registry import KVCacheSpecRegistry

    spec = group.kv_cache_spec
    manager = KVCacheSpecRegistry.get_manager_class(spec, getattr(group, "role", None))
    if manager is not FullAttentionManager:
        raise ValueError(
            f"memkv_vllm: MemkvConnector supports full-attention KV caches; this model's is "
            f"{type(spec).__name__}, managed by {getattr(manager, '__name__', manager)}, which "
            "frees blocks while their request runs (use memkv as a tier of vLLM's "
            "OffloadingConnector, MemkvTier, for such models)"
        )


def _tp_rank() -> int:
    from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

    return get_tensor_model_parallel_rank()
