"""Buffers lent to a read: once a call that writes into caller memory returns, raises or is
cancelled, memkv no longer writes into that memory (a read whose caller stopped waiting lets
go of it first). The server is paused (SIGSTOP) half way through a 64 MiB value, so the
reader is caught holding the buffer whatever the timing."""

import asyncio
import select
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import memkv
from memkv.testing import MemkvServer

# The largest value the protocol takes: big enough that a transfer can be caught half way and
# that the rest cannot sit in the kernel's socket buffers once the server is stopped.
N = 64 << 20
FILL = 0xAB


@pytest.fixture
def big_server() -> Iterator[MemkvServer]:
    """A server of its own (the tests pause it) holding one 64 MiB value under "big"."""
    with MemkvServer(max_size="256 MiB") as srv:
        with srv.client(transport="tcp", timeout_ms=20000) as c:
            c.put("big", bytes([FILL]) * N)
        yield srv


def pause_mid_transfer(srv: MemkvServer, buf: bytearray, started: Callable[[], bool]) -> None:
    """Waits until the value has started to land in `buf`, then stops the server (SIGSTOP),
    so the connection's reader is left holding `buf` half way through the value."""
    deadline = time.monotonic() + 10
    while buf[N // 16] == 0:
        assert started(), "setup: the operation ended before its value arrived"
        assert time.monotonic() < deadline, "setup: the value never started to arrive"
    srv.pause()
    assert buf[N - 1] == 0, "setup: the whole value arrived before the server was stopped"


def written_after(srv: MemkvServer, buf: bytearray) -> int:
    """Zeroes `buf` (the caller was told it is free), lets the server go on, and returns how
    many bytes memkv wrote into it afterwards."""
    buf[:] = bytes(N)
    srv.resume()
    time.sleep(1.5)
    return N - buf.count(0)


def test_get_into_past_its_deadline_leaves_the_buffer_alone(big_server: MemkvServer) -> None:
    c = big_server.client(transport="tcp", timeout_ms=1500)
    buf = bytearray(N)
    outcome: list[BaseException | int | None] = []

    def run() -> None:
        try:
            outcome.append(c.get_into("big", buf))
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion below
            outcome.append(e)

    t = threading.Thread(target=run)
    t.start()
    pause_mid_transfer(big_server, buf, t.is_alive)
    t.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], memkv.TimeoutError), outcome
    late = written_after(big_server, buf)
    c.close()
    assert late == 0, f"{late} bytes written into the buffer after get_into raised"


async def test_a_cancelled_async_get_into_leaves_the_buffer_alone(
    big_server: MemkvServer,
) -> None:
    # The cancellation waits for the read to end (here its 3 s deadline, the server stopped).
    c = memkv.AsyncClient(
        servers=[big_server.address],
        auth_key=big_server.auth_key,
        transport="tcp",
        timeout_ms=3000,
    )
    buf = bytearray(N)
    task = asyncio.ensure_future(c.get_into("big", buf))
    deadline = time.monotonic() + 10
    while buf[N // 16] == 0 and not task.done() and time.monotonic() < deadline:
        await asyncio.sleep(0)
    assert buf[N // 16] != 0 and not task.done(), "setup: did not catch the transfer half way"
    big_server.pause()
    assert buf[N - 1] == 0, "setup: the whole value arrived before the server was stopped"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    late = written_after(big_server, buf)
    c.close()
    assert late == 0, f"{late} bytes written into the buffer after the get was cancelled"


@pytest.mark.parametrize("many", [False, True], ids=["put", "put_many"])
async def test_a_cancelled_async_put_has_let_go_of_its_buffer(
    big_server: MemkvServer, many: bool
) -> None:
    """A cancelled put could still read its value for a moment after the cancellation
    returned, so bytes the caller wrote there next could go out under the key."""
    c = memkv.AsyncClient(
        servers=[big_server.address],
        auth_key=big_server.auth_key,
        transport="tcp",
        timeout_ms=3000,
    )
    value = bytearray([FILL]) * N
    big_server.pause()  # the put's bytes go nowhere: it is caught holding the value
    put = c.put_many([("cancelled", value)]) if many else c.put("cancelled", value)
    task = asyncio.ensure_future(put)
    await asyncio.sleep(0.3)
    assert not task.done(), "setup: the put ended against a stopped server"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # A bytearray lent to a buffer export cannot be resized: this fails while memkv holds it.
    value.extend(b"next")
    big_server.resume()
    c.close()


def test_a_connector_completion_comes_after_its_buffers_are_let_go(
    big_server: MemkvServer,
) -> None:
    # docs/python.md: "when you see a completion, the memory is yours", also for a get whose
    # deadline passed while its value was arriving.
    conn = memkv.MemkvConnector(
        servers=[big_server.address],
        auth_key=big_server.auth_key,
        transport="tcp",
        timeout_ms=1500,
    )
    buf = bytearray(N)
    fid = conn.submit_batch_get(["big"], [buf])
    done: list[memkv.Completion] = []

    def completed() -> bool:
        done.extend(conn.drain_completions())
        return not done

    pause_mid_transfer(big_server, buf, completed)
    ready, _, _ = select.select([conn.event_fd()], [], [], 10)
    assert ready, "no completion within 10 s"
    done.extend(conn.drain_completions())
    assert [(c[0], c[1]) for c in done] == [(fid, False)], done
    late = written_after(big_server, buf)
    conn.close()
    assert late == 0, f"{late} bytes written into the buffer after its completion"
