"""The blocking calls' waiting: Ctrl-C interrupts it, and it works from Python code that
memkv itself runs on its I/O threads (a finalizer run as memkv releases a buffer)."""

import asyncio
import textwrap
import time

import memkv
import pytest
from memkv.testing import MemkvServer

from children import over_paused_server

INTERRUPTED = textwrap.dedent(
    """
    import os, signal, sys, threading
    import memkv

    addr, key, how = sys.argv[1], sys.argv[2], sys.argv[3]
    # An hour: only an interruption can end the call within the test's patience.
    c = memkv.Client(servers=[addr], auth_key=key, transport="tcp", timeout_ms=3_600_000)
    c.put("sig/k", b"v")
    print("ready", flush=True)
    sys.stdin.readline()  # the test has paused the server
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    buf = bytearray(16)
    try:
        try:
            if how == "get":
                c.get("sig/k")
            elif how == "get_into":
                c.get_into("sig/k", buf)
            else:
                c.get_many_into(["sig/k"], [buf])
            print("answered")
        except KeyboardInterrupt:
            print("interrupted")
        except memkv.TimeoutError:
            print("ran to its deadline")
    except KeyboardInterrupt:  # seen only once the call had ended
        print("ran to its deadline, then interrupted")
    buf[:] = bytes(16)  # the buffer is the caller's again
    """
)


@pytest.mark.parametrize("how", ["get", "get_into", "get_many_into"])
def test_ctrl_c_interrupts_a_blocking_call(how: str) -> None:
    """A call waiting on a hung server raises KeyboardInterrupt on SIGINT, as a blocking
    socket call does, rather than waiting out its deadline."""
    with MemkvServer() as srv:
        args = [srv.address, srv.auth_key, how]
        returncode, out, err = over_paused_server(srv, INTERRUPTED, args, timeout=120)
    assert out.strip() == "interrupted", (out, err[-2000:])
    assert returncode == 0, err[-2000:]


async def test_a_blocking_call_from_a_finalizer_on_an_io_thread_works(
    server: MemkvServer,
) -> None:
    """When an AsyncClient operation ends, memkv releases its buffer on an I/O thread; a
    finalizer that runs then (here the buffer's own) may make blocking calls."""
    c = server.client(transport="tcp", timeout_ms=5000)
    c.put("fin/k", b"v")
    seen: list[object] = []

    class Owned(bytearray):
        def __del__(self) -> None:
            try:
                seen.append(c.get("fin/k"))
            except BaseException as e:  # noqa: BLE001 - a panic is a BaseException
                seen.append(e)

    ac = memkv.AsyncClient(servers=[server.address], auth_key=server.auth_key, transport="tcp")
    await ac.put("fin/x", Owned(b"abc"))  # the only reference is memkv's
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    ac.close()
    c.close()
    assert seen == [b"v"], seen


def test_a_finalizer_run_by_a_connector_batch_may_call_and_close(server: MemkvServer) -> None:
    """A connector batch releases its buffers on a memkv thread before it completes: a
    finalizer run then may make blocking calls, and may close the connector itself (which
    cannot wait for the batch running it)."""
    c = server.client(transport="tcp", timeout_ms=5000)
    c.put("fin/c", b"w")
    conn = memkv.MemkvConnector(
        servers=[server.address], auth_key=server.auth_key, transport="tcp", timeout_ms=5000
    )
    seen: list[object] = []

    class Owned(bytearray):
        def __del__(self) -> None:
            try:
                seen.append(c.get("fin/c"))
                conn.close()
                seen.append("closed")
            except BaseException as e:  # noqa: BLE001 - a panic is a BaseException
                seen.append(e)

    conn.submit_batch_set(["fin/set"], [Owned(b"abc")])  # the only reference is memkv's
    deadline = time.monotonic() + 10
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [b"w", "closed"], seen
    with pytest.raises(memkv.Error, match="closed"):
        conn.drain_completions()
    conn.close()
    assert c.get("fin/set") == b"abc"
    c.close()
