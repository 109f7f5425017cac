"""Helpers for the offloading-tier tests: vLLM's own config, spec and factory objects, built the
way vLLM builds them for an engine (``build_offloading_config``), minus the engine, which
refuses offloading on the CPU platform."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from vllm.v1.kv_offload.base import (
    LookupResult,
    OffloadingSpec,
    OffloadKey,
    ReqContext,
    ScheduleEndContext,
    make_offload_key,
)
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.factory import OffloadingSpecFactory
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob
from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

LAYERS = tuple(f"model.layers.{i}.self_attn.attn" for i in range(4))
# One block of the test model on one worker: 4 layers x 16 KiB pages.
WORKER_BYTES_PER_BLOCK = 4 * 16384
DEADLINE_S = 10.0
STEP = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())


def module_path_tier(srv: Any, **params: Any) -> dict[str, Any]:
    """A tier entry of ``secondary_tiers`` in the module_path form, for one test server, for
    unquantized weights (no vLLM config is current here: the tier must be told)."""
    return {"type": "MemkvTier", "module_path": "memkv_vllm.tier", "servers": [srv.address],
            "auth_key": srv.auth_key, "timeout_ms": 1000, "quantization": "none", **params}


def offloading_config(
    tiers: list[dict[str, Any]], engine_id: str, model: str = "test/llama", num_chunks: int = 32,
) -> OffloadingConfig:
    return OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=16, layer_names=LAYERS, group_id=0),),
        worker_kv_bytes_per_block=WORKER_BYTES_PER_BLOCK,
        enable_kv_cache_events=False,
        extra_config={
            "spec_name": "TieringOffloadingSpec",
            "cpu_bytes_to_use": num_chunks * WORKER_BYTES_PER_BLOCK,
            "secondary_tiers": tiers,
        },
        engine_id=engine_id,
        model=OffloadingModelConfig(name=model, dtype="bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(
            rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=True,
        ),
    )


def tiering_spec(tiers: list[dict[str, Any]], engine_id: str, **kw: Any) -> OffloadingSpec:
    """vLLM's TieringOffloadingSpec, made by vLLM's spec factory."""
    return OffloadingSpecFactory.create_spec(offloading_config(tiers, engine_id, **kw))


def primary_buffer(rows: int = 32) -> np.ndarray:
    """A stand-in for the primary tier's buffer: one row per chunk, as vLLM's memoryview."""
    return np.zeros((rows, WORKER_BYTES_PER_BLOCK), dtype=np.uint8)


def make_tier(
    tier: dict[str, Any], buffer: np.ndarray, engine_id: str = "t", **kw: Any
) -> SecondaryTierManager:
    """The tier as vLLM's TieringOffloadingSpec makes it: through SecondaryTierFactory."""
    spec = tiering_spec([tier], engine_id, **kw)
    return SecondaryTierFactory.create_secondary_tier(tier, buffer.data, spec)


def offload_keys(n: int, salt: int = 0) -> list[OffloadKey]:
    rng = np.random.default_rng(1000 + salt)
    return [make_offload_key(rng.bytes(32), 0) for _ in range(n)]


def fill_random(buffer: np.ndarray, rows: list[int], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for r in rows:
        buffer[r] = rng.integers(0, 256, buffer.shape[1], dtype=np.uint8)


_job_ids = iter(range(1_000_000))


def job(keys: list[OffloadKey], rows: list[int], promotion: bool, req: str = "r") -> TransferJob:
    return TransferJob(job_id=next(_job_ids), keys=keys, chunk_ids=np.array(rows, dtype=np.int32),
                       is_promotion=promotion, req_context=ReqContext(req_id=req))


def wait_job(tier: SecondaryTierManager, job_id: int, deadline_s: float = DEADLINE_S) -> JobResult:
    """Poll ``get_finished_jobs`` as the scheduler does, until ``job_id`` ends."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for result in tier.get_finished_jobs():
            if result.job_id == job_id:
                return result
        time.sleep(0.005)
    raise AssertionError(f"job {job_id} did not finish within {deadline_s} s")


def store_through(manager: Any, keys: list[OffloadKey], seed: int) -> dict[OffloadKey, np.ndarray]:
    """Stores ``keys`` through vLLM's ``TieringOffloadingManager`` (into its CPU buffer,
    random bytes standing in for the GPU copy, then cascaded to the secondary tier) and waits
    for the cascade; returns each chunk's bytes."""
    from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec

    ctx = ReqContext(req_id="writer")
    manager.on_new_request(ctx)
    out = manager.prepare_store(keys, ctx)
    assert out is not None and out.keys_to_store == keys
    assert isinstance(out.store_spec, CPULoadStoreSpec)
    rows = np.asarray(manager.primary_tier.get_kv_memoryview())
    fill_random(rows, out.store_spec.chunk_ids.tolist(), seed=seed)  # the GPU -> CPU copy
    manager.complete_store(keys, ctx)  # cascades to the secondary tier
    manager.on_request_finished(ctx)
    end = time.monotonic() + DEADLINE_S
    while manager.has_pending_work():
        assert time.monotonic() < end, "the cascade to the secondary tier did not finish"
        manager.on_schedule_end(STEP)
        time.sleep(0.005)
    return {k: rows[c].copy() for k, c in zip(keys, out.store_spec.chunk_ids)}


def load_through(manager: Any, keys: list[OffloadKey], stored: dict[OffloadKey, np.ndarray]) -> None:
    """Looks ``keys`` up through a manager whose CPU buffer lacks them (HIT from the secondary
    tier), promotes them and checks their bytes."""
    from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec

    ctx = ReqContext(req_id="reader")
    manager.on_new_request(ctx)
    assert [resolve(manager, k, ctx) for k in keys] == [LookupResult.HIT] * len(keys)
    spec = manager.prepare_load(keys, ctx)
    assert isinstance(spec, CPULoadStoreSpec)
    rows = np.asarray(manager.primary_tier.get_kv_memoryview())
    for k, c in zip(keys, spec.chunk_ids):
        assert np.array_equal(rows[c], stored[k])
    manager.complete_load(keys, ctx)
    manager.on_request_finished(ctx)


def resolve(tier: Any, key: OffloadKey, ctx: ReqContext, deadline_s: float = DEADLINE_S) -> LookupResult:
    """Look ``key`` up once per scheduler step until the answer is not RETRY (or HIT_PENDING,
    for a tiering manager promoting it)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        result = tier.lookup(key, ctx)
        if result not in (LookupResult.RETRY, LookupResult.HIT_PENDING):
            return result
        tier.on_schedule_end(STEP)
        time.sleep(0.005)
    raise AssertionError(f"lookup still pending after {deadline_s} s")
