# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: real memkv servers on loopback (memkv.testing) and byte helpers."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import time

import pytest
from memkv.testing import MemkvServer

# Every memkv call in these tests has this deadline, so a dead server turns into an
# error within it; tests assert that nothing waits much longer.
TIMEOUT_MS = 1500


@pytest.fixture
def server():
    if not os.environ.get("MEMKV_BIN"):
        pytest.fail("MEMKV_BIN is not set (run integrations/lmcache/run-tests)")
    with MemkvServer(max_size="64 MiB") as srv:
        yield srv


@contextlib.contextmanager
def frozen(srv):
    """SIGSTOP the server: connections stay open but nothing answers, so only the
    client's deadline (TIMEOUT_MS) can end a call."""
    proc = getattr(srv, "_proc", None)  # memkv.testing keeps its Popen here
    if proc is None:
        pytest.fail("memkv.testing.MemkvServer no longer exposes its process; update frozen()")
    os.kill(proc.pid, signal.SIGSTOP)
    # kill() returns once the signal is queued; wait until every server thread has stopped,
    # so no request sent from here on is answered.
    deadline = time.monotonic() + 5
    while not all(
        open(f"/proc/{proc.pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0] == "T"
        for t in os.listdir(f"/proc/{proc.pid}/task")
    ):
        if time.monotonic() > deadline:
            pytest.fail(f"server {proc.pid} did not stop within 5 s")
        time.sleep(0.01)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        # A memkv client fails a hung server's calls at once until its background probe (a
        # dial waiting on the stopped server) is answered: moments after the server resumes.
        time.sleep(0.5)


def pattern(seed: str, n: int) -> bytes:
    """Deterministic bytes, so another process can check what it loaded."""
    out = bytearray()
    block = hashlib.sha256(seed.encode()).digest()
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n])


@pytest.fixture(autouse=True)
def _quiet_lmcache():
    # LMCache logs every adapter and backend step at INFO; keep failures readable.
    logging.getLogger("lmcache").setLevel(logging.WARNING)
    yield
