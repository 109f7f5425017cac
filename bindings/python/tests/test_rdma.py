"""The Python package over real RDMA verbs, inside the Soft-RoCE VM (testing/rxe-vm): the server
serves its arena on the first rxe device, the client uses the last one as its rail. Outside the
VM every test here is skipped (testing/rxe-vm/run-python-tests runs them there)."""

import os
from collections.abc import Iterator

import numpy as np
import pytest

import memkv
from memkv.testing import MemkvServer

pytestmark = pytest.mark.skipif(
    "MEMKV_IN_RXE_VM" not in os.environ,
    reason="no RDMA device (testing/rxe-vm/run-python-tests runs these in the Soft-RoCE VM)",
)


@pytest.fixture(scope="module")
def rxe() -> tuple[str, str]:
    devices = os.environ["MEMKV_RXE_DEVICES"].split(",")
    return devices[0], devices[-1]


@pytest.fixture(scope="module")
def rdma_server(rxe: tuple[str, str]) -> Iterator[MemkvServer]:
    with MemkvServer(extra_yaml=f"rdma:\n  device: {rxe[0]}\n", max_size="128 MiB") as srv:
        yield srv


@pytest.fixture
def rdma_client(
    rdma_server: MemkvServer, rxe: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[memkv.Client]:
    monkeypatch.setenv("MEMKV_RDMA_DEVICES", rxe[1])
    with rdma_server.client(transport="rdma", timeout_ms=30000) as c:
        yield c


def pattern(n: int, seed: int) -> np.ndarray:
    return (np.arange(n, dtype=np.uint64) * 2654435761 >> 11).astype(np.uint8) ^ np.uint8(seed)


def test_transport_is_rdma(rdma_client: memkv.Client, rxe: tuple[str, str]) -> None:
    assert rdma_client.transport == f"rdma over {rxe[1]}"


def test_single_and_batch_operations_bit_exact(rdma_client: memkv.Client) -> None:
    values = {f"rdma/py/{n}": pattern(n, i) for i, n in enumerate([1, 4096, 1 << 20, 4 << 20])}
    for k, v in values.items():
        rdma_client.put(k, v)
        assert rdma_client.get(k) == v.tobytes()
    out = np.zeros(4 << 20, dtype=np.uint8)
    assert rdma_client.get_into("rdma/py/1048576", out) == 1 << 20
    assert np.array_equal(out[: 1 << 20], values["rdma/py/1048576"])
    rdma_client.put_many([(f"rdma/py/b{i}", pattern(65536, i)) for i in range(8)])
    bufs = [np.empty(65536, dtype=np.uint8) for _ in range(8)]
    assert rdma_client.get_many_into([f"rdma/py/b{i}" for i in range(8)], bufs) == [65536] * 8
    assert all(np.array_equal(b, pattern(65536, i)) for i, b in enumerate(bufs))
    assert rdma_client.exists_many(["rdma/py/b0", "rdma/py/none"]) == [True, False]
    assert rdma_client.get("rdma/py/none") is None
    with pytest.raises(memkv.TooLargeError, match="buffer of 10 bytes"):
        rdma_client.get_into("rdma/py/4096", bytearray(10))


def test_registered_pool_moves_without_copies(
    rdma_client: memkv.Client, rdma_server: MemkvServer
) -> None:
    """An engine's host KV pool: registered once, then pages go out of and into it."""
    page = 256 << 10
    pool = np.zeros(32 * page, dtype=np.uint8)
    rdma_client.register(pool)
    for i in range(8):
        pool[i * page : (i + 1) * page] = pattern(page, 100 + i)
    keys = [f"rdma/pool/{i}" for i in range(8)]
    rdma_client.put_many([(k, pool[i * page : (i + 1) * page]) for i, k in enumerate(keys)])
    # Into other pages of the same pool, and through a single-key get.
    dests = [pool[(16 + i) * page : (17 + i) * page] for i in range(8)]
    assert rdma_client.get_many_into(keys, dests) == [page] * 8
    for i in range(8):
        assert np.array_equal(pool[(16 + i) * page : (17 + i) * page], pattern(page, 100 + i))
    assert rdma_client.get_into(keys[3], pool[31 * page :]) == page
    assert np.array_equal(pool[31 * page :], pattern(page, 103))
    # A value longer than its page is refused by name, and nothing past the page is written.
    rdma_client.put("rdma/pool/big", pattern(2 * page, 9))
    pool[30 * page : 31 * page] = 0
    with pytest.raises(memkv.TooLargeError, match=f"{2 * page} bytes"):
        rdma_client.get_many_into(["rdma/pool/big"], [pool[29 * page : 30 * page]])
    assert not pool[30 * page : 31 * page].any()
    # A TCP client sees what the pool sent.
    with rdma_server.client(transport="tcp") as tcp:
        assert tcp.get(keys[0]) == pattern(page, 100).tobytes()
    # A single put from the pool fails as any single put does: its own error, no batch keys.
    with pytest.raises(memkv.TooLargeError, match="key of 2000 bytes") as info:
        rdma_client.put("k" * 2000, pool[:page])
    assert info.value.keys is None and info.value.results is None


def test_connector_over_rdma_with_a_registered_arena(
    rdma_server: MemkvServer, rxe: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import selectors

    monkeypatch.setenv("MEMKV_RDMA_DEVICES", rxe[1])
    conn = memkv.MemkvConnector(
        servers=[rdma_server.address], auth_key=rdma_server.auth_key, transport="rdma"
    )
    arena = np.zeros(16 << 20, dtype=np.uint8)
    conn.register(arena)
    chunk = 1 << 20
    arena[: 4 * chunk] = np.tile(pattern(chunk, 5), 4)
    views = [arena[i * chunk : (i + 1) * chunk].data for i in range(4)]
    keys = [f"conn/rdma/{i}" for i in range(4)]
    sel = selectors.DefaultSelector()
    sel.register(conn.event_fd(), selectors.EVENT_READ)

    def wait(fid: int) -> memkv.Completion:
        while True:
            assert sel.select(60)
            for c in conn.drain_completions():
                if c[0] == fid:
                    return c

    assert wait(conn.submit_batch_set(keys, views))[1]
    outs = [arena[(8 + i) * chunk : (9 + i) * chunk].data for i in range(4)]
    done = wait(conn.submit_batch_get(keys, outs))
    assert done[1], done[2]
    assert np.array_equal(arena[8 * chunk : 12 * chunk], arena[: 4 * chunk])
    sel.close()
    conn.close()


def test_batches_on_one_registered_pool_run_side_by_side(
    rxe: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch waiting on a hung server holds none of the pool: another thread's batch on other
    pages of it, from a server that answers, ends at once (it used to wait the deadline out)."""
    import threading
    import time

    monkeypatch.setenv("MEMKV_RDMA_DEVICES", rxe[1])
    yaml = f"rdma:\n  device: {rxe[0]}\n"
    with (
        MemkvServer(extra_yaml=yaml, max_size="64 MiB") as live,
        MemkvServer(extra_yaml=yaml, max_size="64 MiB", auth_key=live.auth_key) as hung,
        memkv.Client(
            servers=[live.address, hung.address],
            auth_key=live.auth_key,
            transport="rdma",
            timeout_ms=3000,
        ) as client,
        live.client(transport="tcp") as only_live,
    ):
        page = 64 << 10
        pool = np.zeros(64 * page, dtype=np.uint8)
        client.register(pool)
        keys = [f"rdma/side/{i}" for i in range(16)]
        for i in range(16):
            pool[i * page : (i + 1) * page] = pattern(page, i)
        client.put_many([(k, pool[i * page : (i + 1) * page]) for i, k in enumerate(keys)])
        on_live = [k for k, here in zip(keys, only_live.exists_many(keys)) if here]
        on_hung = [k for k in keys if k not in on_live]
        assert on_live and on_hung, "16 keys over two servers"
        hung.pause()
        try:
            stuck: list[BaseException] = []

            def wait_on_hung() -> None:
                dests = [pool[(32 + i) * page : (33 + i) * page] for i in range(len(on_hung))]
                try:
                    client.get_many_into(on_hung, dests)
                except memkv.Error as e:
                    stuck.append(e)

            waiting = threading.Thread(target=wait_on_hung)
            waiting.start()
            time.sleep(0.3)
            dests = [pool[(48 + i) * page : (49 + i) * page] for i in range(len(on_live))]
            started = time.monotonic()
            assert client.get_many_into(on_live, dests) == [page] * len(on_live)
            took = time.monotonic() - started
            waiting.join(10)
        finally:
            hung.resume()
        assert took < 1.5, f"a batch on other pages waited {took:.2f} s behind the hung one"
        for i, k in enumerate(on_live):
            assert np.array_equal(dests[i], pattern(page, keys.index(k)))
        assert stuck and isinstance(stuck[0], memkv.TimeoutError), stuck
