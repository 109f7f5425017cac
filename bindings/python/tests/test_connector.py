"""memkv.MemkvConnector, LMCache's native connector contract, driven as LMCache drives it:
submit without blocking, wait on the eventfd from an event loop, drain completions."""

import asyncio
import os
import selectors
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import memkv
from memkv.testing import MemkvServer


def connector(server: MemkvServer, timeout_ms: int = 5000) -> memkv.MemkvConnector:
    return memkv.MemkvConnector(
        servers=[server.address], auth_key=server.auth_key, timeout_ms=timeout_ms
    )


def wait_for(conn: memkv.MemkvConnector, ids: set[int], timeout: float = 30.0) -> dict[int, memkv.Completion]:
    """Blocks on the eventfd (selectors) until every future in `ids` completed."""
    done: dict[int, memkv.Completion] = {}
    sel = selectors.DefaultSelector()
    sel.register(conn.event_fd(), selectors.EVENT_READ)
    try:
        while not ids <= done.keys():
            assert sel.select(timeout), f"no completion within {timeout} s"
            for c in conn.drain_completions():
                done[c[0]] = c
    finally:
        sel.close()
    return done


def test_set_exists_get_delete(server: MemkvServer) -> None:
    conn = connector(server)
    keys = [f"model@1@0@{i:x}" for i in range(8)]
    values = [bytes([i]) * 100_000 for i in range(8)]
    f_set = conn.submit_batch_set(keys, [memoryview(v) for v in values])
    assert wait_for(conn, {f_set})[f_set][1:] == (True, "", None)

    f_ex = conn.submit_batch_exists(keys + ["model@1@0@missing"])
    _, ok, err, per_key = wait_for(conn, {f_ex})[f_ex]
    assert ok and err == "" and per_key == [True] * 8 + [False]

    bufs = [bytearray(100_000) for _ in keys]
    f_get = conn.submit_batch_get(keys, [memoryview(b) for b in bufs])
    _, ok, err, per_key = wait_for(conn, {f_get})[f_get]
    assert ok, err
    assert per_key == [True] * 8
    assert [bytes(b) for b in bufs] == values

    f_del = conn.submit_batch_delete(keys[:3])
    assert wait_for(conn, {f_del})[f_del][3] == [True, True, True]
    conn.close()


def test_a_miss_fails_the_get_and_says_which(server: MemkvServer) -> None:
    conn = connector(server)
    f = conn.submit_batch_set(["hit"], [memoryview(b"abc")])
    wait_for(conn, {f})
    bufs = [bytearray(3), bytearray(3)]
    f = conn.submit_batch_get(["hit", "gone"], [memoryview(b) for b in bufs])
    _, ok, err, per_key = wait_for(conn, {f})[f]
    assert not ok
    assert "1 of 2 keys not found" in err and '"gone"' in err
    assert per_key == [True, False]
    assert bytes(bufs[0]) == b"abc"


def test_many_batches_in_flight_one_eventfd(server: MemkvServer) -> None:
    conn = connector(server)
    ids = {
        conn.submit_batch_set([f"many/{i}/{j}" for j in range(4)], [memoryview(b"v" * 4096)] * 4)
        for i in range(32)
    }
    done = wait_for(conn, ids)
    assert all(done[i][1] for i in ids)
    f = conn.submit_batch_exists([f"many/{i}/3" for i in range(32)])
    assert wait_for(conn, {f})[f][3] == [True] * 32


async def test_driven_from_an_asyncio_loop(server: MemkvServer) -> None:
    """As LMCache's ConnectorClientBase does: loop.add_reader on the eventfd."""
    conn = connector(server)
    loop = asyncio.get_running_loop()
    waiting: dict[int, asyncio.Future[memkv.Completion]] = {}

    def on_ready() -> None:
        for c in conn.drain_completions():
            waiting.pop(c[0]).set_result(c)

    loop.add_reader(conn.event_fd(), on_ready)
    try:
        async def submit(fid: int) -> memkv.Completion:
            fut = loop.create_future()
            waiting[fid] = fut
            result: memkv.Completion = await fut
            return result

        # Registered before any completion can be drained: submits return at once.
        ids = [conn.submit_batch_set([f"aio/{i}"], [memoryview(bytes(1000))]) for i in range(10)]
        results = await asyncio.gather(*(submit(i) for i in ids))
        assert all(ok for _, ok, _, _ in results)
    finally:
        loop.remove_reader(conn.event_fd())
        conn.close()


def test_drain_resets_the_eventfd(server: MemkvServer) -> None:
    """LMCache polls the fd and drains without reading it: drain must clear it."""
    conn = connector(server)
    f = conn.submit_batch_exists(["x"])
    wait_for(conn, {f})
    sel = selectors.DefaultSelector()
    sel.register(conn.event_fd(), selectors.EVENT_READ)
    assert sel.select(0) == []
    assert conn.drain_completions() == []
    f = conn.submit_batch_exists(["y"])
    assert sel.select(30), "a completion makes the fd readable again"
    assert [c[0] for c in conn.drain_completions()] == [f]
    assert sel.select(0) == []
    sel.close()


def test_close_closes_the_eventfd(server: MemkvServer) -> None:
    """LMCache closes connectors and makes new ones: an fd left to the garbage collector
    leaks one per connector (and a reference cycle may keep it for good)."""
    conn = connector(server)
    fd = conn.event_fd()
    assert os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]"
    f = conn.submit_batch_exists(["x"])
    conn.close()
    # close() waited for the batch; its completion goes with the connector.
    assert not os.path.exists(f"/proc/self/fd/{fd}")
    with pytest.raises(memkv.Error, match="the connector is closed"):
        conn.event_fd()
    with pytest.raises(memkv.Error, match="the connector is closed"):
        conn.drain_completions()
    with pytest.raises(memkv.Error, match="closed"):
        conn.submit_batch_exists(["x"])
    conn.close()  # a second close is harmless
    assert f


def test_submit_batch_get_refuses_overlapping_buffers(server: MemkvServer) -> None:
    conn = connector(server)
    pool = bytearray(64)
    view = memoryview(pool)
    with pytest.raises(ValueError, match=r"buffers\[0\] and buffers\[2\] overlap"):
        conn.submit_batch_get(["a", "b", "c"], [view[0:16], view[16:32], view[8:24]])
    # Values to store are only read: one buffer may serve several keys.
    f = conn.submit_batch_set(["ov/a", "ov/b"], [view[0:16], view[8:24]])
    assert wait_for(conn, {f})[f][1]
    conn.close()


def test_server_down_completes_with_an_error_not_a_hang() -> None:
    srv = MemkvServer()
    conn = connector(srv, timeout_ms=2000)
    srv.stop()
    buf = bytearray(10)
    f = conn.submit_batch_get(["k"], [memoryview(buf)])
    _, ok, err, _ = wait_for(conn, {f})[f]
    assert not ok and srv.address in err
    f = conn.submit_batch_exists(["k"])
    _, ok, err, per_key = wait_for(conn, {f})[f]
    assert not ok and per_key == [False]


def test_buffers_are_checked_at_submit(server: MemkvServer) -> None:
    conn = connector(server)
    with pytest.raises(BufferError, match=r"buffers\[0\]: expected a writable"):
        conn.submit_batch_get(["k"], [memoryview(b"read-only")])
    with pytest.raises(ValueError, match="2 keys but 1 buffers"):
        conn.submit_batch_set(["a", "b"], [memoryview(b"x")])


FORKED_CONNECTOR = textwrap.dedent(
    """
    import os, signal, sys, time
    import memkv

    addr, key = sys.argv[1], sys.argv[2]
    conn = memkv.MemkvConnector(servers=[addr], auth_key=key, transport="tcp", timeout_ms=3000)
    conn.submit_batch_get(["fork/k"], [bytearray(1 << 20)])  # in flight: the server is paused
    pid = os.fork()
    if pid == 0:
        status = 0
        for name in ("event_fd", "drain_completions"):
            try:
                getattr(conn, name)()
                print(f"child: {name} worked on the parent's eventfd", flush=True)
                status = 1
            except memkv.Error as e:
                if "fork" not in str(e):
                    print(f"child: {name}: {e}", flush=True)
                    status = 1
        conn.close()  # the parent's batch is the parent's: not waited for here
        os._exit(status)
    deadline = time.monotonic() + 20  # several times the batch's own deadline
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print("child exit", os.waitstatus_to_exitcode(status))
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print("child hung in close()")
    conn.close()
    """
)


def test_a_connector_inherited_by_a_fork_refuses_there_and_closes_without_waiting() -> None:
    """A forked child (multiprocessing's fork) inherits the parent's connector: its eventfd
    is the parent's (draining it would take the parent's wake-ups) and its batches run on
    the parent's threads, which the child does not have. The child's copy refuses, and
    closing it leaves the parent's batches alone instead of waiting for them forever."""
    with MemkvServer() as srv:
        srv.client(transport="tcp").put("fork/k", bytes(1 << 20))
        srv.pause()
        try:
            p = subprocess.run(
                [sys.executable, "-c", FORKED_CONNECTOR, srv.address, srv.auth_key],
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            srv.resume()
    assert "child exit 0" in p.stdout, (p.stdout, p.stderr[-2000:])


def test_a_batch_submitted_while_close_waits_is_not_left_running() -> None:
    """close() releases the GIL while it waits for the batches in flight, so another thread
    may submit meanwhile. That batch must be waited for too (or refused): left running, it
    wrote into its buffer after close() had returned, and its completion, the only word that
    the memory is free again, was dropped with the closed connector."""
    with MemkvServer() as srv:
        value = bytes([0xAB]) * (1 << 20)
        with srv.client(transport="tcp") as c:
            c.put("close/k", value)
        conn = memkv.MemkvConnector(
            servers=[srv.address], auth_key=srv.auth_key, transport="tcp", timeout_ms=4000
        )
        late = bytearray(len(value))
        srv.pause()
        try:
            # Waits out its 4 s deadline: the server answers nothing.
            conn.submit_batch_get(["close/k"], [bytearray(len(value))])
            closer = threading.Thread(target=conn.close)
            closer.start()
            time.sleep(1.0)
            assert closer.is_alive(), "setup: close() did not wait for the batch in flight"
            try:
                conn.submit_batch_get(["close/k"], [late])
            except memkv.Error as e:
                assert "closed" in str(e), e
            closer.join(30)
            assert not closer.is_alive(), "close() did not return"
        finally:
            srv.resume()
        # close() returned: nothing may write into `late` any more, though the server now
        # answers the get.
        time.sleep(1.5)
        written = len(late) - late.count(0)
        assert written == 0, f"{written} bytes written into a buffer after close() returned"
