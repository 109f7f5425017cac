"""MemkvTier, the secondary tier of vLLM's TieringOffloadingSpec, against real memkv servers.

Tiers are made by vLLM's own SecondaryTierFactory from the same tier configs a user writes
(module_path form here, the entry-point form in the second process), over a numpy buffer laid
out like vLLM's primary tier (or vLLM's own, where the TieringOffloadingManager drives it)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest

memkv = pytest.importorskip("memkv")
from memkv.testing import MemkvServer  # noqa: E402
from vllm.v1.kv_offload.base import LookupResult, ReqContext  # noqa: E402
from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory  # noqa: E402
from vllm.v1.kv_offload.tiering.manager import TieringOffloadingManager  # noqa: E402

from memkv_vllm import plugin  # noqa: E402
from memkv_vllm.tier import MemkvTier  # noqa: E402
from tests.tiering import (  # noqa: E402
    STEP,
    fill_random,
    job,
    load_through,
    make_tier,
    module_path_tier,
    offload_keys,
    primary_buffer,
    resolve,
    store_through,
    tiering_spec,
    wait_job,
)

HERE = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def srv():
    with MemkvServer() as s:
        yield s


@pytest.fixture
def tiers():
    """Tiers made in a test, shut down after it (their threads and clients)."""
    made: list[MemkvTier] = []
    yield made
    for t in made:
        t.shutdown()


def new_tier(tiers, tier_config, buffer, **kw) -> MemkvTier:
    t = make_tier(tier_config, buffer, **kw)
    assert isinstance(t, MemkvTier)
    tiers.append(t)
    return t


def store(tier, buffer, keys, rows) -> None:
    j = job(keys, rows, promotion=False)
    tier.submit_store(j)
    result = wait_job(tier, j.job_id)
    assert result.success, result


def test_store_lookup_and_load_into_other_rows_bit_exact(srv, tiers):
    buf = primary_buffer()
    tier = new_tier(tiers, module_path_tier(srv), buf)
    keys = offload_keys(8)
    fill_random(buf, list(range(8)))
    t0 = time.monotonic()
    j = job(keys, list(range(8)), promotion=False)
    tier.submit_store(j)
    assert time.monotonic() - t0 < 0.5  # no I/O on the scheduler's thread (see the frozen test)
    result = wait_job(tier, j.job_id)
    assert result.success and result.transfer_bytes == 8 * buf.shape[1]

    ctx = ReqContext(req_id="a")
    tier.on_new_request(ctx)
    # The first answer comes before memkv is asked: vLLM's scheduler retries the next step.
    assert tier.lookup(keys[0], ctx) is LookupResult.RETRY
    assert all(resolve(tier, k, ctx) is LookupResult.HIT for k in keys)
    assert resolve(tier, offload_keys(1, salt=99)[0], ctx) is LookupResult.MISS
    tier.on_request_finished(ctx)

    targets = list(range(16, 24))
    j = job(keys, targets, promotion=True)
    tier.submit_load(j)
    result = wait_job(tier, j.job_id)
    assert result.success and result.successful_keys is None
    assert result.transfer_bytes == 8 * buf.shape[1]
    assert np.array_equal(buf[16:24], buf[0:8])

    # Already in memkv: stored again without moving a byte.
    j = job(keys, list(range(8)), promotion=False)
    tier.submit_store(j)
    result = wait_job(tier, j.job_id)
    assert result.success and result.transfer_bytes == 0

    # What docs/integrations.md says to look for on the memkv side.
    with urllib.request.urlopen(f"http://{srv.admin}/v1/metrics", timeout=5) as r:
        metrics = r.read().decode()
    for op in ("BatchExists", "TcpPut", "TcpGet"):
        assert f'memkv_ops_total{{op="{op}"' in metrics


def test_other_models_and_layouts_never_see_the_chunks(srv, tiers):
    buf = primary_buffer()
    keys = offload_keys(2, salt=1)
    fill_random(buf, [0, 1], seed=1)
    store(new_tier(tiers, module_path_tier(srv), buf), buf, keys, [0, 1])
    others = [
        new_tier(tiers, module_path_tier(srv), buf, model="other/model"),
        new_tier(tiers, module_path_tier(srv, namespace="tenant-b"), buf),
        new_tier(tiers, module_path_tier(srv, model_id="pinned-name"), buf),
        new_tier(tiers, module_path_tier(srv), primary_buffer()[:, :32768].copy()),  # other size
        # The same model path with fp8 weights, or at another revision: other KV values.
        new_tier(tiers, module_path_tier(srv, quantization="fp8"), buf),
        new_tier(tiers, module_path_tier(srv, revision="v2"), buf),
    ]
    assert len({t.namespace for t in others} | {tiers[0].namespace}) == 7
    ctx = ReqContext(req_id="b")
    for t in others:
        assert [resolve(t, k, ctx) for k in keys] == [LookupResult.MISS] * 2
    # The same model and layout, whatever its tier is called, shares them.
    same = new_tier(tiers, module_path_tier(srv), buf, engine_id="another-engine")
    assert [resolve(same, k, ctx) for k in keys] == [LookupResult.HIT] * 2


def test_an_unknown_weight_quantization_is_refused_not_guessed(srv):
    """vLLM builds the scheduler's tiers outside set_current_vllm_config: the tier cannot see
    --quantization, and keys without it would let differently quantized engines share KV."""
    untold = {k: v for k, v in module_path_tier(srv).items() if k != "quantization"}
    buf = primary_buffer()
    refusal = "cannot tell how the weights of test/llama are quantized.*set 'quantization'"
    with pytest.raises(ValueError, match=refusal):
        make_tier(untold, buf)
    with pytest.raises(ValueError, match=refusal):  # model_id names the model only
        make_tier({**untold, "model_id": "pinned-name"}, buf)
    with pytest.raises(ValueError, match="'quantization': a quantization method must be"):
        make_tier(module_path_tier(srv, quantization=""), buf)


def test_quantization_and_revision_come_from_vllms_config_when_it_is_current(srv, tiers, served):
    from vllm.config import VllmConfig, set_current_vllm_config

    buf = primary_buffer()
    model = served().model  # the spec's model name is vLLM's model path, as in an engine
    untold = {k: v for k, v in module_path_tier(srv).items() if k != "quantization"}
    made = {}
    for name, model_config in [("plain", served()), ("fp8", served(quantization="fp8")),
                               ("v2", served(revision="v2"))]:
        with set_current_vllm_config(VllmConfig(model_config=model_config)):
            made[name] = new_tier(tiers, untold, buf, model=model)
    assert made["fp8"].layout.quantization == "fp8"
    assert made["plain"].layout.quantization == "none"
    assert made["v2"].layout.model == f"{model}@v2"
    assert len({t.namespace for t in made.values()}) == 3
    # Told in the tier's config instead, the same weights get the same keys.
    told = new_tier(tiers, module_path_tier(srv, quantization="fp8"), buf, model=model)
    assert told.namespace == made["fp8"].namespace
    # A setting that contradicts what vLLM serves is refused, not keyed.
    with set_current_vllm_config(VllmConfig(model_config=served(quantization="fp8"))):
        with pytest.raises(ValueError, match="'quantization' is 'none', but vLLM serves"):
            make_tier(module_path_tier(srv), buf, model=model)


def test_keys_carry_namespace_ranks_hash_and_group(srv, tiers):
    tier = new_tier(tiers, module_path_tier(srv), primary_buffer())
    key = offload_keys(1, salt=2)[0]
    assert tier.memkv_key(key) == f"vllm/{tier.namespace}/ranks0-0/{key[:-4].hex()}/g0"


def test_a_value_of_the_wrong_size_fails_only_its_chunk(srv, tiers):
    buf = primary_buffer()
    tier = new_tier(tiers, module_path_tier(srv), buf)
    keys = offload_keys(3, salt=3)
    fill_random(buf, [0, 1, 2], seed=3)
    store(tier, buf, keys, [0, 1, 2])
    with srv.client() as c:  # someone else's value under the middle key, shorter than a chunk
        c.put(tier.memkv_key(keys[1]), b"x" * 100)
    ctx = ReqContext(req_id="c")
    assert resolve(tier, keys[1], ctx) is LookupResult.HIT  # it exists...
    j = job(keys, [10, 11, 12], promotion=True, req="c")
    tier.submit_load(j)
    result = wait_job(tier, j.job_id)
    assert not result.success and set(result.successful_keys) == {keys[0], keys[2]}
    assert np.array_equal(buf[10], buf[0]) and np.array_equal(buf[12], buf[2])
    # ...but after the failed load it is a miss, so vLLM does not promote it again.
    assert tier.lookup(keys[1], ctx) is LookupResult.MISS


def test_a_stopped_server_gives_misses_and_failed_jobs_within_the_deadline(tiers):
    with MemkvServer() as s:
        buf = primary_buffer()
        tier = new_tier(tiers, module_path_tier(s, retry_after_s=30), buf)
        keys = offload_keys(4, salt=4)
        fill_random(buf, list(range(4)), seed=4)
        store(tier, buf, keys, list(range(4)))
        s.stop()

        t0 = time.monotonic()
        j = job(keys, list(range(20, 24)), promotion=True)
        tier.submit_load(j)
        result = wait_job(tier, j.job_id, deadline_s=5)
        assert not result.success and not result.successful_keys
        ctx = ReqContext(req_id="d")
        assert [resolve(tier, k, ctx, deadline_s=5) for k in keys] == [LookupResult.MISS] * 4
        j = job(offload_keys(2, salt=40), [5, 6], promotion=False)
        tier.submit_store(j)
        assert not wait_job(tier, j.job_id, deadline_s=5).success
        assert time.monotonic() - t0 < 5  # one timeout at most, then the back-off answers


def test_a_frozen_server_costs_one_timeout_then_recovers(tiers):
    with MemkvServer() as s:
        buf = primary_buffer()
        tier = new_tier(tiers, module_path_tier(s, timeout_ms=500, retry_after_s=0.5), buf)
        keys = offload_keys(3, salt=5)
        fill_random(buf, list(range(3)), seed=5)
        store(tier, buf, keys, list(range(3)))
        buf[20:23] = 7  # what the rows hold before: a failed load may leave anything there

        s.pause()
        try:
            t0 = time.monotonic()
            j = job(keys, [20, 21, 22], promotion=True)
            tier.submit_load(j)
            ctx = ReqContext(req_id="e")
            assert tier.lookup(keys[0], ctx) is LookupResult.RETRY
            tier.on_schedule_end(STEP)
            # The scheduler's calls return while memkv would take timeout_ms (500 ms) to answer.
            assert time.monotonic() - t0 < 0.25
            assert resolve(tier, keys[0], ctx, deadline_s=5) is LookupResult.MISS
            tier.drain_jobs()  # returns: a stuck transfer is bounded by timeout_ms
            result = wait_job(tier, j.job_id, deadline_s=0.1)
            assert not result.success and not result.successful_keys
            assert time.monotonic() - t0 < 3
        finally:
            s.resume()

        time.sleep(0.6)  # past retry_after_s: the tier reconnects
        j = job(keys, [20, 21, 22], promotion=True)
        tier.submit_load(j)
        assert wait_job(tier, j.job_id).success
        assert np.array_equal(buf[20:23], buf[0:3])


def test_a_lookup_unanswered_past_lookup_timeout_s_is_a_miss(tiers):
    """vLLM holds a request while its tier lookups answer RETRY; a frozen server must not hold
    it for the client's whole deadline (5 s here) but for lookup_timeout_s."""
    with MemkvServer() as s:
        buf = primary_buffer()
        tier = new_tier(tiers, module_path_tier(s, timeout_ms=5000, lookup_timeout_s=0.3), buf)
        keys = offload_keys(2, salt=9)
        fill_random(buf, [0, 1], seed=9)
        store(tier, buf, keys, [0, 1])
        s.pause()
        try:
            ctx = ReqContext(req_id="slow")
            t0 = time.monotonic()
            assert resolve(tier, keys[0], ctx, deadline_s=3) is LookupResult.MISS
            assert 0.3 <= time.monotonic() - t0 < 2
        finally:
            s.resume()
        # Answered again once the server is: the next request finds the chunk.
        assert resolve(tier, keys[1], ReqContext(req_id="later")) is LookupResult.HIT


def test_lookup_timeout_s_bounds_each_requests_wait_not_each_keys(tiers):
    """Requests waiting on one slow key are all released after lookup_timeout_s (a clock
    per key released them one per period), a released request is not held again, and a
    finished one leaves nothing behind (found by a review with a paused server)."""
    with MemkvServer() as s:
        tier = new_tier(tiers, module_path_tier(s, timeout_ms=5000, lookup_timeout_s=0.3),
                        primary_buffer())
        (key,) = offload_keys(1, salt=11)
        ctxs = [ReqContext(req_id=f"r{i}") for i in range(4)]
        s.pause()
        try:
            t0 = time.monotonic()
            released: dict[str, float] = {}
            while len(released) < len(ctxs) and time.monotonic() - t0 < 3:
                for ctx in ctxs:
                    if ctx.req_id not in released and tier.lookup(key, ctx) is LookupResult.MISS:
                        released[ctx.req_id] = time.monotonic() - t0
                tier.on_schedule_end(STEP)
                time.sleep(0.01)
            assert len(released) == 4 and max(released.values()) < 0.6, released
            # Asked again in the next step (not admitted, say): still a miss, not held again.
            assert tier.lookup(key, ctxs[0]) is LookupResult.MISS
            for ctx in ctxs:
                tier.on_request_finished(ctx)
            tier.on_schedule_end(STEP)
            assert not tier._held_since
        finally:
            s.resume()


def test_drain_waits_for_every_job_and_shutdown_is_idempotent(srv, tiers):
    buf = primary_buffer()
    tier = new_tier(tiers, module_path_tier(srv, store_threads=1), buf)
    keys = offload_keys(16, salt=6)
    fill_random(buf, list(range(16)), seed=6)
    ids = []
    for i in range(0, 16, 2):
        j = job(keys[i : i + 2], [i, i + 1], promotion=False)
        tier.submit_store(j)
        ids.append(j.job_id)
    tier.drain_jobs()
    results = {r.job_id: r for r in tier.get_finished_jobs()}
    assert sorted(results) == sorted(ids) and all(r.success for r in results.values())
    tier.shutdown()
    tier.shutdown()


def test_bad_tier_configs_are_named(srv):
    buf = primary_buffer()
    with pytest.raises(ValueError, match="secondary tier 'MemkvTier' 'servers' must be"):
        make_tier(module_path_tier(srv, servers=[]), buf)
    with pytest.raises(ValueError, match="'timeout_ms' must be a positive integer"):
        make_tier(module_path_tier(srv, timeout_ms=0), buf)
    with pytest.raises(TypeError, match="server"):
        make_tier(module_path_tier(srv, server="a:1"), buf)
    with pytest.raises(ValueError, match="'lookup_timeout_s' must be more than 0"):
        make_tier(module_path_tier(srv, lookup_timeout_s=0), buf)


def test_vllm_tiering_manager_cascades_to_memkv_and_promotes_from_it(srv):
    """Engine A's TieringOffloadingManager stores chunks (GPU -> CPU -> memkv); engine B's,
    with an empty CPU tier, finds them in memkv and promotes them into its own buffer."""
    tier = module_path_tier(srv)
    run = uuid.uuid4().hex[:8]
    a = tiering_spec([tier], f"memkv-test-a-{run}").get_manager()
    b = tiering_spec([tier], f"memkv-test-b-{run}").get_manager()
    assert isinstance(a, TieringOffloadingManager) and isinstance(b, TieringOffloadingManager)
    try:
        keys = offload_keys(4, salt=7)
        stored = store_through(a, keys, seed=7)
        assert resolve(b, offload_keys(1, salt=70)[0], ReqContext(req_id="probe")) is LookupResult.MISS
        load_through(b, keys, stored)
    finally:
        a.shutdown()
        b.shutdown()


def test_plugin_registers_the_tier_once_under_its_name():
    ours = [e for e in entry_points(group="vllm.general_plugins") if e.name == "memkv"]
    assert [e.value for e in ours] == ["memkv_vllm.plugin:register"]
    plugin.register()
    plugin.register()  # vLLM loads plug-ins in every process, maybe more than once
    assert SecondaryTierFactory.get_tier_class({"type": "memkv"}) is MemkvTier


def test_another_process_finds_the_chunks_through_the_entry_point_and_env(srv, tiers):
    buf = primary_buffer()
    tier = new_tier(tiers, module_path_tier(srv), buf)
    keys = offload_keys(3, salt=8)
    fill_random(buf, [0, 1, 2], seed=8)
    store(tier, buf, keys, [0, 1, 2])
    missing = offload_keys(1, salt=80)[0]

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMKV_", "VLLM_PLUGINS"))}
    env.update(MEMKV_SERVERS=srv.address, MEMKV_AUTH_KEY=srv.auth_key)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.tier_reader", f"memkv-test-reader-{uuid.uuid4().hex[:8]}",
         *(k.hex() for k in [*keys, missing])],
        cwd=HERE, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    want = {k.hex(): hashlib.sha256(buf[i].tobytes()).hexdigest() for i, k in enumerate(keys)}
    assert got == {**want, missing.hex(): "MISS"}


# The two --kv-transfer-config values docs/integrations.md shows, verbatim.
DOCUMENTED_CONFIGS = [
    """{
  "kv_connector": "OffloadingConnector",
  "kv_role": "kv_both",
  "kv_connector_extra_config": {
    "spec_name": "TieringOffloadingSpec",
    "cpu_bytes_to_use": 17179869184,
    "secondary_tiers": [
      {"type": "MemkvTier", "module_path": "memkv_vllm.tier",
       "servers": ["10.0.0.5:9900", "10.0.0.6:9900"], "quantization": "none"}
    ]
  }
}""",
    """{
  "kv_connector": "OffloadingConnector",
  "kv_role": "kv_both",
  "kv_connector_extra_config": {
    "spec_name": "TieringOffloadingSpec",
    "cpu_bytes_to_use": 17179869184,
    "secondary_tiers": [{"type": "memkv", "servers": ["10.0.0.5:9900", "10.0.0.6:9900"],
                         "quantization": "none"}]
  }
}""",
]


@pytest.mark.parametrize("text", DOCUMENTED_CONFIGS, ids=["module_path", "entry_point"])
def test_the_documented_configs_name_the_tier(text):
    from vllm.config import KVTransferConfig
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

    plugin.register()  # what vLLM's plug-in loader does at start-up
    config = KVTransferConfig(**json.loads(text))
    extra = config.kv_connector_extra_config
    assert OffloadingSpecFactory.get_spec_cls(extra) is TieringOffloadingSpec
    # What vLLM resolves each tier entry to when it builds the spec's metrics and tiers.
    assert [SecondaryTierFactory.get_tier_class(t) for t in extra["secondary_tiers"]] == [MemkvTier]
    TieringOffloadingSpec.build_metric_definitions(dict(extra))
