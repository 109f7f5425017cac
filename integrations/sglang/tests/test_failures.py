# SPDX-License-Identifier: Apache-2.0
"""A memkv server that goes away mid-run: misses and failed writes, no hang, no wrong bytes."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time

import memkv.testing
import torch
from conftest import TIMEOUT_MS, fill_random, hashes, mha_host_pool, page_bytes
from memkv.testing import MemkvServer

# Every call must come back within a few client deadlines.
DEADLINE_S = 4 * TIMEOUT_MS / 1000


def timed(fn, *args):
    start = time.monotonic()
    result = fn(*args)
    elapsed = time.monotonic() - start
    assert elapsed < DEADLINE_S, f"{fn.__name__} took {elapsed:.1f} s"
    return result


def wait_until_stopped(pid: int) -> None:
    """kill() returns once SIGSTOP is queued; on a loaded machine a server thread may still
    answer a request before it stops. Wait until every thread shows state T."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        if all(state == "T" for state in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"server {pid} did not stop within 5 s")


@contextlib.contextmanager
def servers_sharing_a_key(count: int, monkeypatch):
    """``count`` servers with one auth key, so that one client can use them all.

    MemkvServer draws a random key per server and takes none as an argument; its key
    comes from secrets.token_hex, so that is what is pinned here.
    """
    key = secrets.token_hex(32)
    with monkeypatch.context() as m:
        m.setattr(memkv.testing.secrets, "token_hex", lambda n=32: key)
        started = [MemkvServer(max_size="64 MiB") for _ in range(count)]
    try:
        assert all(s.auth_key == key for s in started)
        yield started
    finally:
        for s in started:
            s.stop()


def test_stopped_server_turns_into_misses(make_backend, monkeypatch):
    with servers_sharing_a_key(1, monkeypatch) as [srv]:
        pool = mha_host_pool()
        conn = dict(servers=[srv.address], auth_key=srv.auth_key)
        v1 = make_backend(host_pool=pool, v1=True, **conn)
        plain = make_backend(**conn)

        src = pool.alloc(2 * pool.page_size)
        fill_random(pool, src, seed=1)
        keys = hashes(2)
        assert v1.batch_set_v1(keys, src) == [True, True]
        page = torch.randn(96).to(torch.bfloat16)
        assert plain.set("p", page)
        assert plain.exists("p") and v1.batch_exists(keys) == 2

        srv.stop()

        assert timed(v1.batch_exists, keys) == 0
        dst = pool.alloc(2 * pool.page_size)
        before = page_bytes(pool, dst)
        assert timed(v1.batch_get_v1, keys, dst) == [False, False]
        assert page_bytes(pool, dst) == before
        assert timed(v1.batch_set_v1, hashes(2), src) == [False, False]
        assert timed(plain.exists, "p") is False
        assert timed(plain.get, "p", torch.zeros_like(page)) is None
        assert timed(plain.batch_get, ["p"], [torch.zeros_like(page)]) == [None]
        assert timed(plain.batch_set, ["q"], [page]) is False


def test_one_of_two_servers_stopped(make_backend, monkeypatch):
    """Pages placed wholly on the live server are stored and load bit-exact; pages that
    touch the stopped one fail on their own."""
    with servers_sharing_a_key(2, monkeypatch) as [live, doomed]:
        pool = mha_host_pool()
        backend = make_backend(
            host_pool=pool,
            v1=True,
            servers=[live.address, doomed.address],
            auth_key=live.auth_key,
        )
        n = 48
        src = pool.alloc(n * pool.page_size)
        fill_random(pool, src, seed=2)
        assert backend.batch_set_v1(hashes(n), src) == [True] * n

        doomed.stop()

        keys = hashes(n)
        ok = timed(backend.batch_set_v1, keys, src)
        # Rendezvous hashing spreads the 96 objects over both servers: a page lands
        # wholly on the live one with odds 1/4, so both outcomes occur (all 48 pages
        # alike has odds under 1e-5).
        assert True in ok and False in ok, ok
        # The existence check counts the leading pages that answered, not 0 for the batch.
        leading = ok.index(False)
        assert timed(backend.batch_exists, keys) == leading, (leading, ok)
        stored = [i for i, good in enumerate(ok) if good]
        ps = pool.page_size
        dst = pool.alloc(len(stored) * ps)
        got = timed(backend.batch_get_v1, [keys[i] for i in stored], dst)
        assert got == [True] * len(stored)
        want = page_bytes(pool, src)
        assert page_bytes(pool, dst) == [want[i] for i in stored]
        # A batch that includes pages on the stopped server still loads the others.
        dst = pool.alloc(n * ps)
        assert timed(backend.batch_get_v1, keys, dst) == ok
        assert [b for b, good in zip(page_bytes(pool, dst), ok) if good] == [want[i] for i in stored]


def test_frozen_server_times_out(make_backend, monkeypatch):
    """A server that stops answering (SIGSTOP: connections stay open, nothing comes back)
    costs the client deadline, then a miss; it does not hang SGLang's threads."""
    with servers_sharing_a_key(1, monkeypatch) as [srv]:
        pool = mha_host_pool()
        backend = make_backend(
            host_pool=pool, v1=True, servers=[srv.address], auth_key=srv.auth_key
        )
        n = 3
        src = pool.alloc(n * pool.page_size)
        fill_random(pool, src, seed=8)
        keys = hashes(n)
        assert backend.batch_set_v1(keys, src) == [True] * n
        # MemkvServer offers stop() only; its process handle is what can be paused.
        pid = srv._proc.pid
        os.kill(pid, signal.SIGSTOP)
        wait_until_stopped(pid)
        try:
            assert timed(backend.batch_exists, keys) == 0
            dst = pool.alloc(n * pool.page_size)
            before = page_bytes(pool, dst)
            assert timed(backend.batch_get_v1, keys, dst) == [False] * n
            assert page_bytes(pool, dst) == before
            assert timed(backend.batch_set_v1, hashes(n), src) == [False] * n
        finally:
            os.kill(pid, signal.SIGCONT)
        # Once it answers again, so does the backend: within moments, as the memkv client's
        # background probe (failing the hung server's calls at once meanwhile) finds it.
        deadline = time.monotonic() + 2
        while backend.batch_exists(keys) != n:
            assert time.monotonic() < deadline, "the server answers again, the backend does not"
            time.sleep(0.01)
