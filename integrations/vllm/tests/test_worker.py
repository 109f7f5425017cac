"""The worker side against a real memkv server: loads into a paged KV cache (a CPU tensor laid
out as vLLM's CPU build lays it out), in the step or in the background.

The connector is built without vLLM's engine (no __init__); its store, pages and metadata are
the real ones."""

import threading
import time

import pytest

pytest.importorskip("vllm")
memkv = pytest.importorskip("memkv")
import torch  # noqa: E402
from memkv.testing import MemkvServer  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402

from memkv_vllm import keys as K  # noqa: E402
from memkv_vllm.connector import MemkvConnector, MemkvConnectorMetadata, Transfer  # noqa: E402
from memkv_vllm.inflight import LoadJob, Loads, Saves  # noqa: E402
from memkv_vllm.pages import LayerPages  # noqa: E402
from memkv_vllm.settings import parse  # noqa: E402
from memkv_vllm.store import Store  # noqa: E402

BLOCKS, PAGE, LAYERS = 16, 32 << 10, ["layer.0", "layer.1"]
HASHES = [f"h{i}" for i in range(4)]


def worker(srv: MemkvServer, timeout_ms: int = 2000) -> MemkvConnector:
    c = object.__new__(MemkvConnector)
    c._role = KVConnectorRole.WORKER
    c._store = Store(parse({"servers": [srv.address], "auth_key": srv.auth_key,
                            "timeout_ms": timeout_ms, "transport": "tcp"}, {}), "test")
    c._namespace, c._rank, c._block_size, c._page_bytes = "ns", 0, 16, PAGE
    c._layer_names = LAYERS
    c._kv = {name: torch.zeros(BLOCKS, PAGE, dtype=torch.uint8) for name in LAYERS}
    c._pages = {name: LayerPages(name, c._kv[name], BLOCKS, PAGE) for name in LAYERS}
    c._failed_blocks = set()
    c._drop_saves_for, c._steps_behind = 0, 1
    c._loads = Loads(c._fetch)
    c._saves = Saves(c._put)
    c._save_async = True
    c.stats = {"loaded_chunks": 0, "loaded_bytes": 0, "failed_chunks": 0,
               "saved_chunks": 0, "saved_bytes": 0, "save_failures": 0, "dropped_saves": 0}
    return c


def page(h: str, layer: str) -> bytes:
    return (f"{h}/{layer}/".encode() * (PAGE // 8))[:PAGE]


def store_chunks(srv: MemkvServer) -> None:
    with memkv.Client(servers=[srv.address], auth_key=srv.auth_key) as client:
        client.put_many([(K.chunk_key("ns", 0, h, layer), page(h, layer))
                         for h in HASHES for layer in LAYERS])


def load(c: MemkvConnector, transfers: list[Transfer]) -> float:
    """Runs one step's start_load_kv; its duration in seconds."""
    c.bind_connector_metadata(MemkvConnectorMetadata(loads=transfers))
    t0 = time.monotonic()
    c.start_load_kv(None)
    return time.monotonic() - t0


def wait_loaded(c: MemkvConnector, req_id: str, within: float) -> float:
    t0 = time.monotonic()
    while True:
        _, loaded = c.get_finished(set())
        if loaded:
            assert loaded == {req_id}
            return time.monotonic() - t0
        assert time.monotonic() - t0 < within, "the background load was never reported"
        time.sleep(0.005)


def test_a_load_in_the_step_fills_the_pages_before_it_returns():
    with MemkvServer() as srv:
        store_chunks(srv)
        c = worker(srv)
        load(c, [Transfer("r1", HASHES, [3, 4, 5, 6])])
        for h, block in zip(HASHES, [3, 4, 5, 6]):
            for layer in LAYERS:
                assert bytes(c._kv[layer][block].numpy()) == page(h, layer)
        assert c.get_finished(set()) == (None, None)
        assert c.get_block_ids_with_load_errors() == set()
        c.shutdown()


def test_a_steps_saves_are_dropped_when_a_load_in_that_step_failed():
    """The forward pass after a failed load read the failed blocks' stale bytes, so what it
    computed after them (in any request sharing them) is wrong until vLLM recomputes it."""
    with MemkvServer() as srv:
        store_chunks(srv)
        c = worker(srv)
        c._save_async = False
        for block in (12, 13):
            for layer in LAYERS:
                c._kv[layer][block].fill_(7)
        c.bind_connector_metadata(MemkvConnectorMetadata(
            loads=[Transfer("r1", ["missing"], [3])], saves=[Transfer("r2", ["n1", "n2"], [12, 13])]))
        c.start_load_kv(None)
        c.wait_for_save()
        assert c.stats["dropped_saves"] == 2 and c.stats["saved_chunks"] == 0
        # The next step's load worked: its saves go out.
        c.bind_connector_metadata(MemkvConnectorMetadata(
            loads=[Transfer("r1", HASHES[:1], [3])], saves=[Transfer("r2", ["n1", "n2"], [12, 13])]))
        c.start_load_kv(None)
        c.wait_for_save()
        assert c.stats["saved_chunks"] == 2
        with memkv.Client(servers=[srv.address], auth_key=srv.auth_key) as client:
            assert client.exists_many([K.chunk_key("ns", 0, "n2", LAYERS[1])]) == [True]
        c.shutdown()


def test_under_async_scheduling_the_next_steps_saves_are_dropped_too():
    """vLLM plans the step after a failed one before it hears of the failure, and that
    step's forward pass reads the failed blocks as well."""
    with MemkvServer() as srv:
        c = worker(srv)
        c._save_async, c._steps_behind = False, 2
        saves = [Transfer("r2", ["n1"], [12])]
        steps = [[Transfer("r1", ["missing"], [3])], [], []]
        for loads in steps:
            c.bind_connector_metadata(MemkvConnectorMetadata(loads=loads, saves=saves))
            c.start_load_kv(None)
            c.wait_for_save()
        assert (c.stats["dropped_saves"], c.stats["saved_chunks"]) == (2, 1)
        c.shutdown()


def test_a_background_load_is_reported_once_its_pages_are_filled():
    with MemkvServer() as srv:
        store_chunks(srv)
        c = worker(srv)
        load(c, [Transfer("r1", HASHES[:3] + ["missing"], [8, 9, 10, 11], background=True)])
        wait_loaded(c, "r1", within=10)
        for h, block in zip(HASHES[:3], [8, 9, 10]):
            for layer in LAYERS:
                assert bytes(c._kv[layer][block].numpy()) == page(h, layer)
        # The missing chunk's block goes to vLLM to recompute, in the same step.
        assert c.get_block_ids_with_load_errors() == {11}
        assert (c.stats["loaded_chunks"], c.stats["failed_chunks"]) == (3, 1)
        assert c.get_finished(set()) == (None, None)  # reported once
        c.shutdown()


def test_a_stalled_server_holds_no_step_and_its_load_is_recomputed():
    """A load from a server that stopped answering runs out its deadline in the background;
    the steps meanwhile return at once. Loaded in the step, it held the whole batch's step for
    the deadline."""
    with MemkvServer() as srv:
        store_chunks(srv)
        c = worker(srv, timeout_ms=1500)
        srv.pause()
        try:
            assert load(c, [Transfer("r1", HASHES, [1, 2, 3, 4], background=True)]) < 0.5
            steps = []
            for _ in range(5):
                steps.append(load(c, []))
                assert c.get_finished(set()) == (None, None)
            assert max(steps) < 0.1, steps
            waited = wait_loaded(c, "r1", within=10)
        finally:
            srv.resume()
        assert waited > 0.5  # it did wait for memkv, off the step
        assert c.get_block_ids_with_load_errors() == {1, 2, 3, 4}
        c.shutdown()


def test_shutdown_waits_for_a_background_load_writing_into_the_cache():
    with MemkvServer() as srv:
        store_chunks(srv)
        c = worker(srv, timeout_ms=1000)
        srv.pause()
        try:
            load(c, [Transfer("r1", HASHES, [1, 2, 3, 4], background=True)])
            t0 = time.monotonic()
            c.shutdown()
            assert time.monotonic() - t0 > 0.5  # the load's deadline ran out first
        finally:
            srv.resume()


def save(c: MemkvConnector, transfers: list[Transfer]) -> float:
    """Runs one step's wait_for_save; its duration in seconds."""
    c.bind_connector_metadata(MemkvConnectorMetadata(saves=transfers))
    t0 = time.monotonic()
    c.wait_for_save()
    return time.monotonic() - t0


def fill(c: MemkvConnector, blocks: list[int]) -> None:
    for h, block in zip(HASHES, blocks):
        for layer in LAYERS:
            c._kv[layer][block] = torch.frombuffer(bytearray(page(h, layer)), dtype=torch.uint8)


def test_a_background_save_stores_the_pages_and_then_releases_the_finished_request():
    with MemkvServer() as srv:
        c = worker(srv)
        fill(c, [5, 6, 7, 8])
        save(c, [Transfer("r1", HASHES, [5, 6, 7, 8])])
        # vLLM names r1 finished once, in the next step, then asks again each step.
        released = c.get_finished({"r1"})[0]
        deadline = time.monotonic() + 10
        while not released:
            assert time.monotonic() < deadline, "r1's blocks were never released"
            time.sleep(0.005)
            released = c.get_finished(set())[0]
        assert released == {"r1"}
        with memkv.Client(servers=[srv.address], auth_key=srv.auth_key) as client:
            for h in HASHES:
                for layer in LAYERS:
                    assert client.get(K.chunk_key("ns", 0, h, layer)) == page(h, layer)
        assert c.stats["saved_chunks"] == 4
        # A request that saved nothing was never held: it is not reported.
        assert c.get_finished({"r2"}) == (None, None)
        c.shutdown()


def test_a_stalled_server_holds_no_step_but_holds_the_finished_requests_blocks():
    """A save to a server that stopped answering runs out its deadline in the background; the
    step returns at once, and vLLM gets the request's blocks back only after the save ended.
    Saved in the step, it held the whole batch's step for the deadline."""
    with MemkvServer() as srv:
        c = worker(srv, timeout_ms=1500)
        fill(c, [5, 6, 7, 8])
        srv.pause()
        try:
            assert save(c, [Transfer("r1", HASHES, [5, 6, 7, 8])]) < 0.5
            assert c.get_finished({"r1"}) == (None, None)  # finished, its pages still read
            t0 = time.monotonic()
            while c.get_finished(set())[0] != {"r1"}:
                assert time.monotonic() - t0 < 10, "r1's blocks were never released"
                time.sleep(0.005)
        finally:
            srv.resume()
        assert c.stats["save_failures"] == 4
        c.shutdown()


def test_a_preempted_requests_saves_end_before_its_blocks_are_reused():
    with MemkvServer() as srv:
        c = worker(srv, timeout_ms=1000)
        fill(c, [5, 6, 7, 8])
        srv.pause()
        try:
            save(c, [Transfer("r1", HASHES, [5, 6, 7, 8])])
            t0 = time.monotonic()
            c.handle_preemptions(MemkvConnectorMetadata(preempted={"other"}))
            assert time.monotonic() - t0 < 0.1  # no save of its own to wait for
            c.handle_preemptions(MemkvConnectorMetadata(preempted={"r1"}))
            assert time.monotonic() - t0 > 0.5  # waited for r1's save to end
            assert c._saves.finished(set()) == set()  # preempted, not finished: nothing to report
        finally:
            srv.resume()
        c.shutdown()


def test_a_load_stuck_on_a_stalled_server_does_not_hold_up_the_next():
    """Each step's loads are one job; one waiting out its deadline (a stalled server) used to
    hold every later job behind it, on the one loader thread. (The memkv call is a test double
    here: a function that blocks for the first job.)"""
    stuck = threading.Event()

    def fetch(job):
        if job.req_ids == ["stuck"]:
            stuck.wait(10)
        return [None] * len(job.keys)

    loads = Loads(fetch)
    loads.submit(LoadJob(["stuck"], True))
    loads.submit(LoadJob(["next"], True))
    deadline = time.monotonic() + 5
    done = []
    while not done:
        assert time.monotonic() < deadline, "the second load waited for the first"
        done = loads.finished()
        time.sleep(0.005)
    assert [j.req_ids for j in done] == [["next"]]
    stuck.set()
    loads.close()
