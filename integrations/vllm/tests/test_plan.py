"""The scheduler side's arithmetic: what is claimed, loaded and saved, step by step.

The connector is built without vLLM's engine (no __init__), with memkv's answer faked by
``held``: the number of leading chunks the lookup finds (a test double of the memkv call; the
lookup still runs on the connector's lookup thread)."""

import threading
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")
import memkv_vllm.connector as connector_module  # noqa: E402
from memkv_vllm.connector import MemkvConnector, MemkvConnectorMetadata  # noqa: E402
from memkv_vllm.inflight import Lookups  # noqa: E402

BS = 128


def scheduler(held: int, may_load=True, may_save=True, load_async=False, save_async=False,
              lookup=None, wait_s=1.0, timeout_s=1.0) -> MemkvConnector:
    c = object.__new__(MemkvConnector)
    c._block_size = BS
    c._requests = {}
    c._may_load, c._may_save = may_load, may_save
    c._load_async = load_async
    c._save_async = save_async
    c._background_loads = []
    c._lookup = lookup or (lambda hashes: min(held, len(hashes)))
    c._lookups = Lookups(c._lookup)
    c._lookup_wait_s = c._wait_left = wait_s
    c._lookup_timeout_s = timeout_s
    return c


def request(n_tokens: int, rid="r1"):
    return SimpleNamespace(request_id=rid, prompt_token_ids=list(range(n_tokens)), mm_features=[],
                           prompt_embeds=None, lora_request=None, cache_salt=None)


def step(c, req, computed_before, scheduled, blocks):
    out = SimpleNamespace(
        scheduled_new_reqs=[SimpleNamespace(req_id=req.request_id, block_ids=(blocks,),
                                            num_computed_tokens=computed_before)],
        scheduled_cached_reqs=SimpleNamespace(req_ids=[], resumed_req_ids=set(), new_block_ids=[],
                                              num_computed_tokens=[]),
        num_scheduled_tokens={req.request_id: scheduled}, preempted_req_ids=None,
    )
    return c.build_connector_meta(out)


def cached_step(c, req, computed_before, scheduled, new_blocks):
    out = SimpleNamespace(
        scheduled_new_reqs=[],
        scheduled_cached_reqs=SimpleNamespace(req_ids=[req.request_id], resumed_req_ids=set(),
                                              new_block_ids=[(new_blocks,)],
                                              num_computed_tokens=[computed_before]),
        num_scheduled_tokens={req.request_id: scheduled}, preempted_req_ids=None,
    )
    return c.build_connector_meta(out)


def test_a_full_hit_claims_all_but_the_last_token_and_saves_nothing():
    c, req = scheduler(held=31), request(4000)
    assert c.get_num_new_matched_tokens(req, 0) == (31 * BS, False)
    c.update_state_after_alloc(req, None, 31 * BS)
    meta = step(c, req, 31 * BS, 4000 - 31 * BS, list(range(100, 132)))
    assert isinstance(meta, MemkvConnectorMetadata)
    (load,) = meta.loads
    assert load.block_ids == list(range(100, 131)) and len(load.hashes) == 31
    assert meta.saves == []


def test_a_prompt_of_whole_chunks_keeps_its_last_chunk_to_compute():
    c, req = scheduler(held=8), request(8 * BS)
    assert c.get_num_new_matched_tokens(req, 0) == (7 * BS, False)


def test_a_partial_hit_loads_the_prefix_and_saves_the_rest():
    c, req = scheduler(held=15), request(4000)
    assert c.get_num_new_matched_tokens(req, 0) == (15 * BS, False)
    c.update_state_after_alloc(req, None, 15 * BS)
    meta = step(c, req, 15 * BS, 4000 - 15 * BS, list(range(32)))
    assert [t.block_ids for t in meta.loads] == [list(range(15))]
    assert [t.block_ids for t in meta.saves] == [list(range(15, 31))]


def test_chunked_prefill_saves_each_steps_chunks_once():
    c, req = scheduler(held=0), request(8000)
    assert c.get_num_new_matched_tokens(req, 0) == (0, False)
    c.update_state_after_alloc(req, None, 0)
    first = step(c, req, 0, 4096, list(range(32)))
    assert first.loads == [] and [t.block_ids for t in first.saves] == [list(range(32))]
    second = cached_step(c, req, 4096, 8000 - 4096, list(range(32, 63)))
    assert [t.block_ids for t in second.saves] == [list(range(32, 62))]
    third = cached_step(c, req, 8000, 1, [])  # decoding: nothing new to save
    assert third.saves == [] and third.loads == []


def test_chunks_vllm_already_has_are_not_loaded_but_saved_if_memkv_lacks_them():
    c, req = scheduler(held=5), request(4000)
    # vLLM's own prefix cache holds 10 chunks, memkv only 5: nothing to load.
    assert c.get_num_new_matched_tokens(req, 10 * BS) == (0, False)
    c.update_state_after_alloc(req, None, 0)
    meta = step(c, req, 10 * BS, 4000 - 10 * BS, list(range(32)))
    assert meta.loads == [] and [t.block_ids for t in meta.saves] == [list(range(5, 31))]


def test_roles_limit_what_is_done():
    consumer, req = scheduler(held=0, may_save=False), request(1000)
    consumer.get_num_new_matched_tokens(req, 0)
    assert step(consumer, req, 0, 1000, list(range(8))).saves == []
    producer = scheduler(held=7, may_load=False)
    assert producer.get_num_new_matched_tokens(request(1000), 0) == (0, False)


def test_images_and_embeddings_are_not_cached():
    c = scheduler(held=31)
    req = request(4000)
    req.mm_features = [object()]
    assert c.get_num_new_matched_tokens(req, 0) == (0, False)
    assert c._requests == {}


def test_finished_requests_are_forgotten():
    c, req = scheduler(held=3), request(1000)
    c.get_num_new_matched_tokens(req, 0)
    assert c.request_finished(req, []) == (False, None)
    assert c._requests == {}


def test_with_async_saves_a_request_that_saved_keeps_its_blocks_until_the_workers_release_them():
    c, req = scheduler(held=0, save_async=True), request(1000)
    c.get_num_new_matched_tokens(req, 0)
    c.update_state_after_alloc(req, None, 0)
    assert [t.block_ids for t in step(c, req, 0, 1000, list(range(8))).saves] == [list(range(7))]
    assert c.request_finished(req, []) == (True, None)
    assert c._requests == {}
    # One that saved nothing (all of it already in memkv) frees its blocks at once.
    c, req = scheduler(held=7, save_async=True), request(1000)
    c.get_num_new_matched_tokens(req, 0)
    c.update_state_after_alloc(req, None, 0)
    assert step(c, req, 0, 1000, list(range(8))).saves == []
    assert c.request_finished(req, []) == (False, None)


def test_with_async_saves_the_workers_hear_of_preempted_requests():
    c, req = scheduler(held=0, save_async=True), request(1000)
    out = SimpleNamespace(
        scheduled_new_reqs=[],
        scheduled_cached_reqs=SimpleNamespace(req_ids=[], resumed_req_ids=set(), new_block_ids=[],
                                              num_computed_tokens=[]),
        num_scheduled_tokens={}, preempted_req_ids={"r7"},
    )
    assert c.build_connector_meta(out).preempted == {"r7"}


class Blocks:
    """vLLM's KVCacheBlocks as the connector uses it: one block-id list per KV cache group."""

    def __init__(self, ids):
        self.ids = ids

    def get_block_ids(self):
        return (self.ids,)


def test_an_async_hit_is_loaded_outside_the_steps_batch_then_the_rest_is_saved():
    c, req = scheduler(held=15, load_async=True), request(4000)
    assert c.get_num_new_matched_tokens(req, 0) == (15 * BS, True)
    c.update_state_after_alloc(req, Blocks(list(range(200, 232))), 15 * BS)
    # vLLM holds the request back (WAITING_FOR_REMOTE_KVS): it is in no scheduled list.
    meta = step_without(c)
    (load,) = meta.loads
    assert load.background and load.req_id == "r1"
    assert load.block_ids == list(range(200, 215)) and len(load.hashes) == 15
    assert step_without(c).loads == []  # planned once
    # Loaded: vLLM schedules it as a new request with the loaded tokens computed.
    c.update_state_after_alloc(req, Blocks(list(range(200, 232))), 0)
    meta = step(c, req, 15 * BS, 4000 - 15 * BS, list(range(200, 232)))
    assert meta.loads == []
    assert [t.block_ids for t in meta.saves] == [list(range(215, 231))]


def test_an_async_connector_loads_nothing_in_the_background_when_nothing_is_claimed():
    c, req = scheduler(held=0, load_async=True), request(4000)
    assert c.get_num_new_matched_tokens(req, 0) == (0, False)


def step_without(c):
    out = SimpleNamespace(
        scheduled_new_reqs=[],
        scheduled_cached_reqs=SimpleNamespace(req_ids=[], resumed_req_ids=set(), new_block_ids=[],
                                              num_computed_tokens=[]),
        num_scheduled_tokens={}, preempted_req_ids=None,
    )
    return c.build_connector_meta(out)


def test_a_slow_lookup_answers_ask_again_and_holds_no_step():
    release = threading.Event()
    calls = []

    def slow(hashes):
        calls.append(len(hashes))
        release.wait(10)
        return 7

    c, req = scheduler(held=0, lookup=slow, wait_s=0.05), request(4000)
    t0 = time.monotonic()
    assert c.get_num_new_matched_tokens(req, 0) == (None, False)
    assert time.monotonic() - t0 < 1.0  # waited lookup_wait_ms, not for memkv
    t0 = time.monotonic()
    for _ in range(5):  # later steps only poll
        assert c.get_num_new_matched_tokens(req, 0) == (None, False)
    assert time.monotonic() - t0 < 0.04
    release.set()
    deadline = time.monotonic() + 5
    while (answer := c.get_num_new_matched_tokens(req, 0)) == (None, False):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert answer == (7 * BS, False)
    assert calls == [31]  # one lookup for all those steps


def test_an_answer_is_reused_until_the_request_is_admitted():
    calls = []

    def counting(hashes):
        calls.append(1)
        return 3

    c, req = scheduler(held=0, lookup=counting), request(1000)
    for _ in range(3):  # vLLM could not allocate the blocks: asked again each step
        assert c.get_num_new_matched_tokens(req, 0) == (3 * BS, False)
    assert len(calls) == 1
    c.update_state_after_alloc(req, None, 3 * BS)
    # Preempted later and back in the queue: memkv is asked afresh.
    c.get_num_new_matched_tokens(req, 0)
    assert len(calls) == 2


def test_a_stale_answer_is_not_reused(monkeypatch):
    calls = []
    c, req = scheduler(held=0, lookup=lambda hashes: calls.append(1) or 2), request(1000)
    c.get_num_new_matched_tokens(req, 0)
    monkeypatch.setattr(connector_module, "LOOKUP_FRESH_S", 0.0)
    c.get_num_new_matched_tokens(req, 0)
    assert len(calls) == 2


def test_a_lookup_that_raises_claims_nothing():
    def broken(hashes):
        raise RuntimeError("a bug")

    c, req = scheduler(held=0, lookup=broken), request(1000)
    assert c.get_num_new_matched_tokens(req, 0) == (0, False)


def test_an_async_load_that_failed_at_its_first_chunk_is_not_claimed_again():
    """vLLM sends a request whose asynchronous load failed at its first block back to be
    looked up, unscheduled. Claiming the same chunks again failed again, for ever (found by a
    review against vLLM's scheduler: the request stayed WAITING_FOR_REMOTE_KVS)."""
    c, req = scheduler(held=15, load_async=True), request(4000)
    assert c.get_num_new_matched_tokens(req, 0) == (15 * BS, True)
    c.update_state_after_alloc(req, Blocks(list(range(200, 232))), 15 * BS)
    assert len(step_without(c).loads) == 1
    # The load failed at block 200: vLLM frees the blocks and asks again.
    for _ in range(3):
        assert c.get_num_new_matched_tokens(req, 0) == (0, False)
    c.update_state_after_alloc(req, Blocks(list(range(300, 332))), 0)
    meta = step(c, req, 0, 4000, list(range(300, 332)))
    # Computed this time, and saved over the chunks memkv could not give.
    assert meta.loads == [] and [t.block_ids for t in meta.saves] == [list(range(300, 331))]


def test_chunks_recomputed_after_a_partly_failed_async_load_are_saved_again():
    c, req = scheduler(held=15, load_async=True), request(4000)
    c.get_num_new_matched_tokens(req, 0)
    c.update_state_after_alloc(req, Blocks(list(range(200, 232))), 15 * BS)
    step_without(c)
    # Chunks 0-5 loaded, chunk 6 failed: vLLM computes from chunk 6 on.
    c.update_state_after_alloc(req, Blocks(list(range(200, 232))), 0)
    meta = step(c, req, 6 * BS, 4000 - 6 * BS, list(range(200, 232)))
    assert [t.block_ids for t in meta.saves] == [list(range(206, 231))]


def test_chunks_recomputed_after_a_failed_load_in_the_step_are_saved_again():
    """vLLM moves a request whose load in the step failed back to the failed block and
    recomputes from there; those chunks used to stay unsaved, so a bad value failed every
    later engine too."""
    c, req = scheduler(held=15), request(4000)
    c.get_num_new_matched_tokens(req, 0)
    c.update_state_after_alloc(req, None, 15 * BS)
    first = step(c, req, 15 * BS, 1000, list(range(32)))
    assert [t.block_ids for t in first.loads] == [list(range(15))]
    # Chunk 6 failed: vLLM's next step computes from chunk 6 on.
    meta = cached_step(c, req, 6 * BS, 4000 - 6 * BS, [])
    assert [t.block_ids for t in meta.saves] == [list(range(6, 31))]


def test_a_failed_load_in_the_step_is_found_a_step_late_under_async_scheduling():
    c, req = scheduler(held=15), request(4000)
    c.get_num_new_matched_tokens(req, 0)
    c.update_state_after_alloc(req, None, 15 * BS)
    first = step(c, req, 15 * BS, 512, list(range(32)))
    assert [t.block_ids for t in first.saves] == [list(range(15, 19))]
    # Planned before vLLM heard of the failure: computed tokens as if the load had worked.
    ahead = cached_step(c, req, 15 * BS + 512, 512, [])
    assert [t.block_ids for t in ahead.saves] == [list(range(19, 23))]
    behind = cached_step(c, req, 6 * BS, 1024, [])
    assert [t.block_ids for t in behind.saves] == [list(range(6, 14))]


def test_a_request_sharing_a_failed_block_saves_again_what_it_recomputes():
    """B, admitted in the step whose load (A's) failed, had the failed block as a local prefix
    hit and saved chunks computed over it; vLLM sends B back to where it was before the step,
    and B's chunks from there are saved again (found by a review against vLLM's
    _update_requests_with_invalid_blocks)."""
    c = scheduler(held=0)
    b = request(4000, rid="b")
    c.get_num_new_matched_tokens(b, 10 * BS)  # vLLM's prefix cache holds 10 chunks of B
    c.update_state_after_alloc(b, None, 0)
    first = step(c, b, 10 * BS, 1024, list(range(100, 132)))
    assert [t.block_ids for t in first.saves] == [list(range(100, 118))]
    # The failed block was among B's ten: vLLM puts B back at 10 * BS, to compute again.
    again = cached_step(c, b, 10 * BS, 1024, [])
    assert [t.block_ids for t in again.saves] == [list(range(110, 118))]


def test_a_load_in_the_step_that_worked_saves_only_what_was_computed():
    c, req = scheduler(held=15), request(4000)
    c.get_num_new_matched_tokens(req, 0)
    c.update_state_after_alloc(req, None, 15 * BS)
    step(c, req, 15 * BS, 512, list(range(32)))
    for computed in (15 * BS + 512, 15 * BS + 1024):
        meta = cached_step(c, req, computed, 512, [])
        assert all(t.block_ids[0] >= 15 for t in meta.saves)


def test_one_steps_lookups_share_one_wait():
    """vLLM asks about every waiting request in one step; each new one used to wait
    lookup_wait_ms, so 100 new requests held the step for 100 waits."""
    release = threading.Event()
    c = scheduler(held=0, lookup=lambda hashes: release.wait(10) and 1, wait_s=0.05)
    t0 = time.monotonic()
    for i in range(20):
        assert c.get_num_new_matched_tokens(request(1000, rid=f"r{i}"), 0) == (None, False)
    assert time.monotonic() - t0 < 0.5  # one 50 ms budget, not 20 of them
    step_without(c)  # the next step has a budget of its own
    t0 = time.monotonic()
    c.get_num_new_matched_tokens(request(1000, rid="r0"), 0)
    assert time.monotonic() - t0 >= 0.04
    release.set()


def test_a_lookup_started_on_arrival_is_answered_when_vllm_gets_to_the_request():
    calls = []
    c, req = scheduler(held=0, lookup=lambda hashes: calls.append(1) or 4, wait_s=0.0), request(1000)
    c.on_new_request(req)
    time.sleep(0.2)  # the request waits in vLLM's queue
    assert c.get_num_new_matched_tokens(req, 0) == (4 * BS, False)  # no wait, no second ask
    assert len(calls) == 1


def test_a_lookup_pending_too_long_claims_nothing():
    release = threading.Event()
    c = scheduler(held=0, lookup=lambda hashes: release.wait(10) and 5, wait_s=0.0, timeout_s=0.05)
    req = request(1000)
    assert c.get_num_new_matched_tokens(req, 0) == (None, False)
    time.sleep(0.1)
    assert c.get_num_new_matched_tokens(req, 0) == (0, False)  # computed, not held back
    release.set()


def test_a_stale_answer_serves_while_it_is_refreshed(monkeypatch):
    refreshing = threading.Event()
    calls = []

    def lookup(hashes):
        calls.append(1)
        if len(calls) > 1:  # the refresh, held until released
            refreshing.wait(10)
            return 6
        return 2

    c, req = scheduler(held=0, lookup=lookup, wait_s=0.05), request(1000)
    assert c.get_num_new_matched_tokens(req, 0) == (2 * BS, False)
    monkeypatch.setattr(connector_module, "LOOKUP_FRESH_S", 0.0)
    step_without(c)  # a new step, a new wait budget
    # The refresh is held: the old answer serves meanwhile, no "ask again".
    assert c.get_num_new_matched_tokens(req, 0) == (2 * BS, False)
    refreshing.set()
    deadline = time.monotonic() + 5
    while c.get_num_new_matched_tokens(req, 0) != (6 * BS, False):
        assert time.monotonic() < deadline, "the refreshed answer never came"
        time.sleep(0.005)
    assert len(calls) == 2


def test_a_finished_request_cancels_its_queued_lookup():
    release = threading.Event()
    c = scheduler(held=0, lookup=lambda hashes: release.wait(10) and 1, wait_s=0.0)
    for i in range(6):  # four run, two wait in the queue
        c.on_new_request(request(1000, rid=f"r{i}"))
    queued = c._requests["r5"].lookup
    c.request_finished(request(1000, rid="r5"), [])
    assert queued.cancelled()
    release.set()


def test_kv_caches_whose_blocks_vllm_frees_while_requests_run_are_refused():
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec, SlidingWindowSpec

    from memkv_vllm.connector import refuse_unsupported_group

    shape = dict(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    refuse_unsupported_group(KVCacheGroupSpec(["l0"], FullAttentionSpec(**shape)))
    # Sliding-window layers folded into full attention (vLLM's hybrid manager off) keep blocks.
    refuse_unsupported_group(KVCacheGroupSpec(["l0"], FullAttentionSpec(**shape, sliding_window=64)))
    with pytest.raises(ValueError, match="SlidingWindowSpec"):
        refuse_unsupported_group(KVCacheGroupSpec(["l0"], SlidingWindowSpec(**shape, sliding_window=64)))
