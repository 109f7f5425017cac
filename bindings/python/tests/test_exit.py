"""A program that exits with memkv operations in flight exits cleanly: its own exit status, no
Rust panic, no crash, no hang.

Each case runs in a child process against a paused server (SIGSTOP), so that what the child
started is still waiting for its deadline when the child exits. Where the deadline passes while
the interpreter is finalizing (a teardown that takes a while, as large frameworks' do), memkv's
threads used to attach to the finalizing interpreter: PyO3 panicked (twice for a batch of two
buffers, which aborted), or a thread ended inside Python code crashed the process.
"""

import textwrap

import pytest
from memkv.testing import MemkvServer

from children import over_paused_server

TIMEOUT_MS = 300

# An object whose finalizer outlasts the deadline, held by a module of its own: it runs once
# the interpreter is finalizing, as it clears the modules. Not held by __main__, whose globals a
# thread still inside a call keeps alive (its function's); for the same reason the buffers
# memkv holds are plain bytearrays, not instances of a class defined here.
PRELUDE = textwrap.dedent(
    f"""
    import asyncio, os, sys, threading, time, types
    import memkv

    addr, key, case, how, teardown = sys.argv[1:6]
    DEADLINE_MS = {TIMEOUT_MS}

    class SlowTeardown:
        def __del__(self, write=os.write, sleep=time.sleep):
            write(2, b"teardown\\n")
            sleep(DEADLINE_MS / 1000 + 1)

    if teardown == "slow":
        sys.modules["slow_teardown"] = types.ModuleType("slow_teardown")
        sys.modules["slow_teardown"].held = SlowTeardown()
    print("ready", flush=True)
    sys.stdin.readline()  # the server is paused now
    """
)

CASES = textwrap.dedent(
    """
    def connector(op):
        conn = memkv.MemkvConnector(
            servers=[addr], auth_key=key, transport="tcp", timeout_ms=DEADLINE_MS
        )
        bufs = [bytearray(4096), bytearray(4096)]
        if op == "get":
            conn.submit_batch_get(["x/a", "x/b"], bufs)
        else:
            conn.submit_batch_set(["x/a", "x/b"], bufs)
        return conn  # kept: closing it would wait for the batch

    def blocking_thread():
        c = memkv.Client(servers=[addr], auth_key=key, transport="tcp", timeout_ms=DEADLINE_MS)
        started = threading.Event()

        def read():
            started.set()
            c.get_many_into(["x/a", "x/b"], [bytearray(4096), bytearray(4096)])

        threading.Thread(target=read, daemon=True).start()
        started.wait()
        time.sleep(0.05)  # inside get_many_into

    async def start_reads():
        c = memkv.AsyncClient(
            servers=[addr], auth_key=key, transport="tcp", timeout_ms=DEADLINE_MS
        )
        tasks = [asyncio.ensure_future(c.get("x/a"))]
        for i in range(16):
            bufs = [bytearray(4096), bytearray(4096)]
            tasks.append(asyncio.ensure_future(c.get_many_into([f"x/{i}", f"y/{i}"], bufs)))
        await asyncio.sleep(0.05)
        return tasks

    if case.startswith("connector"):
        kept = connector(case.split("-")[1])
    elif case == "blocking-thread":
        blocking_thread()
    elif case == "asyncio-run":
        # asyncio.run cancels the tasks and waits for the reads to end (their deadline).
        asyncio.run(start_reads())
    elif case == "loop-closed":
        loop = asyncio.new_event_loop()
        loop.run_until_complete(start_reads())
        loop.close()  # the reads are still running: nobody will hear of them

    if how == "exit":
        sys.exit(3)
    if how == "raise":
        raise RuntimeError("the program failed")
    """
)

EXIT_STATUS = {"return": 0, "exit": 3, "raise": 1}


def exit_in_flight(server: MemkvServer, case: str, how: str, teardown: str) -> str:
    """Runs the child until it exits, checks it exited cleanly; returns its stderr."""
    args = [server.address, server.auth_key, case, how, teardown]
    # The deadline and the teardown, with room to spare; a hang fails here.
    returncode, _, err = over_paused_server(server, PRELUDE + CASES, args, timeout=30)
    assert returncode == EXIT_STATUS[how], err[-3000:]
    assert "panicked" not in err, err[-3000:]
    assert "Fatal Python error" not in err, err[-3000:]
    if teardown == "slow":
        assert "teardown" in err, "the slow teardown did not run: the case tests nothing"
    return err


@pytest.mark.parametrize("how", ["return", "exit", "raise"])
@pytest.mark.parametrize("op", ["get", "set"])
def test_a_connector_batch_ending_during_teardown(server: MemkvServer, op: str, how: str) -> None:
    """The batch's buffers are released on a memkv thread once the interpreter is finalizing:
    they are left exported (the process is ending) instead of aborting it."""
    err = exit_in_flight(server, f"connector-{op}", how, "slow")
    if how == "raise":
        assert "RuntimeError: the program failed" in err


@pytest.mark.parametrize("op", ["get", "set"])
def test_a_connector_batch_in_flight_at_exit(server: MemkvServer, op: str) -> None:
    exit_in_flight(server, f"connector-{op}", "return", "quick")


@pytest.mark.parametrize("teardown", ["quick", "slow"])
def test_a_daemon_thread_inside_a_blocking_call_at_exit(server: MemkvServer, teardown: str) -> None:
    exit_in_flight(server, "blocking-thread", "return", teardown)


def test_asyncio_run_ending_with_reads_in_flight(server: MemkvServer) -> None:
    """asyncio.run waits for the cancelled reads (they hold the caller's buffers) and returns as
    the last ones complete: their completions raced the interpreter's finalization, which
    crashed the process in about one run in three."""
    for _ in range(4):
        exit_in_flight(server, "asyncio-run", "return", "quick")


def test_a_closed_loop_with_reads_ending_during_teardown(server: MemkvServer) -> None:
    """Reads of a loop closed under them complete while the interpreter is finalizing: nothing is
    told (nobody is listening) and the process exits."""
    exit_in_flight(server, "loop-closed", "return", "slow")
