"""The client wrapper against a real memkv server: round trips, misses, a server that stops."""

import time

import pytest

memkv = pytest.importorskip("memkv")
from memkv.testing import MemkvServer  # noqa: E402

from memkv_vllm.settings import parse  # noqa: E402
import memkv_vllm.store as store_module  # noqa: E402
from memkv_vllm.store import Store, StoreUnavailable, item_results  # noqa: E402


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
        with pytest.raises(StoreUnavailable):
            st.call("exists_many", ["a"])
        assert time.monotonic() - t0 < 0.1  # the client backs off its dials: no new wait


def test_an_unreachable_server_is_unavailable_not_an_exception_leak():
    with MemkvServer() as srv:
        address, key = srv.address, srv.auth_key
    st = Store(parse({"servers": [address], "auth_key": key, "timeout_ms": 1000}, {}), "test")
    with pytest.raises(StoreUnavailable):
        st.call("exists_many", ["a"])


def test_one_stopped_server_of_two_fails_only_its_keys_and_the_client_stays():
    """A server that stops fails its own keys; the other server's keep their answers, on this
    call and the next. The store used to close its client on such a failure and answer
    "unavailable" for every key for ``retry_after_s``."""
    with MemkvServer() as a, MemkvServer(auth_key=a.auth_key) as b:
        cfg = {"servers": [a.address, b.address], "auth_key": a.auth_key, "timeout_ms": 2000,
               "retry_after_s": 30}
        st = Store(parse(cfg, {}), "test")
        keys = [f"two/{i}" for i in range(32)]
        st.call("put_many", [(k, b"v") for k in keys])
        b.stop()
        answers = []
        for _ in range(2):
            with pytest.raises(StoreUnavailable) as failed:
                st.call("exists_many", keys)
            answers.append([r is True for r in item_results(failed.value, len(keys))])
        assert 0 < sum(answers[0]) < len(keys), answers[0]
        assert answers[1] == answers[0]


def test_a_registration_that_fails_keeps_the_client(monkeypatch):
    """Registering the KV cache for RDMA can fail (a memlock limit); the client still moves
    values, copying them. It used to be thrown away, and memkv was not used at all."""

    real_client = memkv.Client

    class NoRegistration:
        """A memkv client whose registrations fail, as under a low memlock limit."""

        def __init__(self, **kwargs):
            self._client = real_client(**kwargs)

        def register(self, buffer):
            raise memkv.RdmaUnavailableError("ibv_reg_mr: Cannot allocate memory")

        def __getattr__(self, name):
            return getattr(self._client, name)

    monkeypatch.setattr(store_module, "_registers", lambda client: True)
    monkeypatch.setattr(store_module.memkv, "Client", NoRegistration)
    with MemkvServer() as srv:
        st = store_for(srv)
        page = bytearray(4096)
        st.register([memoryview(page)])
        assert st.call("exists_many", ["a"]) == [False]
        st.call("put_many", [("a", memoryview(page))])
        assert st.call("exists_many", ["a"]) == [True]
        st.close()
