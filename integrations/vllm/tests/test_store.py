"""The client wrapper against a real memkv server: round trips, misses, a server that stops."""

import time

import pytest

memkv = pytest.importorskip("memkv")
from memkv.testing import MemkvServer  # noqa: E402

from memkv_vllm.settings import parse  # noqa: E402
from memkv_vllm.store import Store, StoreUnavailable  # noqa: E402


def store_for(srv, **extra):
    cfg = {"servers": [srv.address], "auth_key": srv.auth_key, "timeout_ms": 2000}
    cfg.update(extra)
    return Store(parse(cfg, {}), "test")


def test_batches_move_bytes_in_place():
    with MemkvServer() as srv:
        st = store_for(srv)
        page = bytearray(range(256)) * 512  # 128 KiB, one CPU KV page
        st.register([memoryview(page)])
        st.call("put_many", [("k1", memoryview(page)), ("k2", memoryview(page))])
        assert st.call("exists_many", ["k1", "k2", "k3"]) == [True, True, False]
        out = [bytearray(len(page)) for _ in range(3)]
        assert st.call("get_many_into", ["k1", "k3", "k2"], [memoryview(b) for b in out]) == [
            len(page), None, len(page)]
        assert out[0] == page and out[2] == page and not any(out[1])
        st.close()


def test_a_stopped_server_fails_fast_then_backs_off():
    with MemkvServer() as srv:
        st = store_for(srv, retry_after_s=30)
        assert st.call("exists_many", ["a"]) == [False]
        srv.stop()
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailable):
            st.call("exists_many", ["a"])
        assert time.monotonic() - t0 < 2.5  # within timeout_ms, plus slack
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailable, match="backing off"):
            st.call("exists_many", ["a"])
        assert time.monotonic() - t0 < 0.1  # no new attempt while backing off


def test_an_unreachable_server_is_unavailable_not_an_exception_leak():
    with MemkvServer() as srv:
        address, key = srv.address, srv.auth_key
    st = Store(parse({"servers": [address], "auth_key": key, "timeout_ms": 1000}, {}), "test")
    with pytest.raises(StoreUnavailable):
        st.call("exists_many", ["a"])
