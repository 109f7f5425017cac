"""Failures: wrong key, dead servers, deadlines, bad configuration; never a hang."""

import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import memkv
from memkv.testing import MemkvServer


def test_wrong_auth_key_is_an_authentication_error(server: MemkvServer) -> None:
    c = memkv.Client(servers=[server.address], auth_key="ab" * 32, timeout_ms=3000)
    with pytest.raises(memkv.AuthenticationError, match=server.address):
        c.put("k", b"v")


def test_raw_key_bytes_are_accepted(server: MemkvServer) -> None:
    c = memkv.Client(servers=[server.address], auth_key=bytes.fromhex(server.auth_key))
    c.put("raw-key", b"v")
    assert c.get("raw-key") == b"v"


def test_server_stopped_mid_test() -> None:
    srv = MemkvServer()
    c = srv.client(timeout_ms=2000)
    c.put("k", b"v")
    srv.stop()
    with pytest.raises(memkv.ServerUnavailableError, match=srv.address):
        c.get("k")
    with pytest.raises(memkv.ServerUnavailableError):
        c.put_many([("a", b"1"), ("b", b"2")])


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A listener that accepts and never answers: only the deadline ends a call."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    t = threading.Thread(target=accept)
    t.start()
    host, port = listener.getsockname()
    yield f"{host}:{port}"
    stop.set()
    t.join()
    for s in held:
        s.close()
    listener.close()


def test_deadline_and_gil_released(silent_server: str) -> None:
    c = memkv.Client(servers=[silent_server], auth_key="cd" * 32, timeout_ms=500)
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        with pytest.raises(memkv.TimeoutError, match=silent_server):
            c.get("k")
    finally:
        done.set()
        t.join()
    # The counting thread ran while the call waited: the GIL was released.
    assert ticks > 1000


def test_arguments_win_over_the_environment(
    server: MemkvServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMKV_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("MEMKV_AUTH_KEY", server.auth_key)
    c = memkv.Client(servers=[server.address])
    c.put("env", b"1")
    assert c.get("env") == b"1"


def test_environment_and_config_file(
    server: MemkvServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cfg = tmp_path / "client.yaml"
    cfg.write_text(f"servers: [{server.address}]\nauth_key: {server.auth_key}\ntransport: tcp\n")
    monkeypatch.setenv("MEMKV_CONFIG", str(cfg))
    c = memkv.Client()
    c.put("cfg", b"2")
    assert c.get("cfg") == b"2"
    assert c.transport == "tcp"  # chosen, so no reason follows it
    monkeypatch.delenv("MEMKV_CONFIG")
    monkeypatch.setenv("MEMKV_SERVERS", server.address)
    monkeypatch.setenv("MEMKV_AUTH_KEY", server.auth_key)
    assert memkv.Client().get("cfg") == b"2"
    assert memkv.Client(config=cfg).get("cfg") == b"2"


def test_bad_configuration_names_the_argument() -> None:
    with pytest.raises(memkv.ConfigError, match="auth_key: 5 raw bytes"):
        memkv.Client(servers=["127.0.0.1:1"], auth_key=b"short")
    with pytest.raises(memkv.ConfigError, match="argument auth_key"):
        memkv.Client(servers=["127.0.0.1:1"], auth_key="not hex")
    with pytest.raises(memkv.ConfigError, match="argument transport"):
        memkv.Client(servers=["127.0.0.1:1"], auth_key="ab" * 32, transport="carrier-pigeon")  # type: ignore[arg-type]
    with pytest.raises(memkv.ConfigError, match="servers: the list is empty"):
        memkv.Client(servers=[], auth_key="ab" * 32)
    with pytest.raises(memkv.ConfigError, match="servers: .* holds a comma"):
        memkv.Client(servers=["a:1,b:2"], auth_key="ab" * 32)
    with pytest.raises(memkv.ConfigError, match="timeout_ms"):
        memkv.Client(servers=["127.0.0.1:1"], auth_key="ab" * 32, timeout_ms=0)


def test_a_config_error_is_also_a_value_error() -> None:
    """Bad argument values were ValueErrors before they were ConfigErrors: callers catching
    ValueError still catch them."""
    assert issubclass(memkv.ConfigError, memkv.Error)
    assert issubclass(memkv.ConfigError, ValueError)
    with pytest.raises(ValueError, match="servers: the list is empty"):
        memkv.Client(servers=[], auth_key="ab" * 32)


@pytest.mark.parametrize("timeout_ms", [-1, 2**64, 10**30])
@pytest.mark.parametrize("cls", [memkv.Client, memkv.AsyncClient, memkv.MemkvConnector])
def test_an_out_of_range_timeout_is_a_config_error_naming_it(
    cls: type[memkv.Client | memkv.AsyncClient | memkv.MemkvConnector], timeout_ms: int
) -> None:
    with pytest.raises(memkv.ConfigError, match=r"argument timeout_ms: .*1\.\.=3600000"):
        cls(servers=["127.0.0.1:1"], auth_key="ab" * 32, timeout_ms=timeout_ms)


def test_a_timeout_that_is_not_an_int_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="timeout_ms: expected an int, got float"):
        memkv.Client(servers=["127.0.0.1:1"], auth_key="ab" * 32, timeout_ms=1.5)  # type: ignore[arg-type]
    # A bool is an int to Python; True is a mistake, not a 1 ms deadline.
    with pytest.raises(TypeError, match="timeout_ms: expected an int, got bool"):
        memkv.Client(servers=["127.0.0.1:1"], auth_key="ab" * 32, timeout_ms=True)


def test_strict_rdma_without_devices_is_refused() -> None:
    with pytest.raises((memkv.RdmaUnavailableError, memkv.ConfigError)):
        c = memkv.Client(servers=["127.0.0.1:1"], auth_key="ab" * 32, transport="rdma")
        c.put("k", b"v")


def test_version_is_the_workspace_version() -> None:
    cargo = Path(__file__).resolve().parents[3] / "Cargo.toml"
    if not cargo.exists():
        pytest.skip("not run from a memkv checkout")
    text = cargo.read_text()
    version = text.split("[workspace.package]")[1].split('version = "')[1].split('"')[0]
    assert memkv.__version__ == version


def test_a_paused_server_costs_one_deadline_not_a_hang() -> None:
    """A hung server (SIGSTOP: connections open, nothing answered) costs calls their deadline
    until a fresh connection's ping has gone unanswered too (a second); then calls fail at once
    while the client checks the server in the background, and the server is used again the
    moment it answers."""
    with MemkvServer() as srv:
        c = srv.client(timeout_ms=500)
        c.put("k", b"v")
        srv.pause()
        try:
            with pytest.raises(memkv.TimeoutError, match=srv.address):
                c.get("k")
            confirmed = time.monotonic() + 5
            while True:
                with pytest.raises((memkv.TimeoutError, memkv.ServerUnavailableError)) as e:
                    c.get("k")
                if isinstance(e.value, memkv.ServerUnavailableError):
                    break
                assert time.monotonic() < confirmed, "calls to the hung server still wait"
            started = time.monotonic()
            for _ in range(20):
                with pytest.raises(memkv.ServerUnavailableError, match=srv.address):
                    c.get("k")
            assert time.monotonic() - started < 0.5, "each call waited for the hung server"
        finally:
            srv.resume()
        deadline = time.monotonic() + 2
        while True:
            try:
                assert c.get("k") == b"v"
                break
            except memkv.ServerUnavailableError:
                assert time.monotonic() < deadline, "the server answers, the client does not use it"
                time.sleep(0.01)


def test_a_server_at_its_connection_limit_is_unavailable_and_says_why() -> None:
    """A server at `limits.max_connections` turns a new client away: that is a server that
    cannot be reached now (it used to be a bare memkv.Error)."""
    with MemkvServer(extra_yaml="limits:\n  max_connections: 1\n") as srv:
        first = srv.client(timeout_ms=2000, transport="tcp")
        first.put("k", b"v")
        second = srv.client(timeout_ms=2000, transport="tcp")
        with pytest.raises(memkv.ServerUnavailableError, match=r"limits\.max_connections \(1\)"):
            second.get("k")
        first.close()


def test_servers_of_one_fleet_share_a_key() -> None:
    with MemkvServer() as a, MemkvServer(auth_key=a.auth_key) as b:
        c = memkv.Client(servers=[a.address, b.address], auth_key=a.auth_key)
        keys = [f"fleet/{i}" for i in range(64)]
        c.put_many([(k, k.encode()) for k in keys])
        assert c.get_many(keys) == [k.encode() for k in keys]
        assert {srv.address for srv in (a, b)} == set(c.servers)


def test_a_paused_server_in_a_fleet_fails_only_its_keys_within_one_deadline() -> None:
    """One of three same-host servers hung (SIGSTOP) under a batch of mixed sizes: large values
    move through shared memory and small ones over TCP. The batch returns the other servers'
    items and fails the hung server's with TimeoutError, within one deadline (it took two when
    the small values waited for the shared-memory step of every server first)."""
    timeout_ms = 800
    with (
        MemkvServer() as a,
        MemkvServer(auth_key=a.auth_key) as b,
        MemkvServer(auth_key=a.auth_key) as hung,
    ):
        c = memkv.Client(
            servers=[a.address, b.address, hung.address], auth_key=a.auth_key, timeout_ms=timeout_ms
        )
        keys = [f"fleet/mixed/{i}" for i in range(60)]
        values = [bytes([i]) * (256 << 10 if i % 2 == 0 else 1 << 10) for i in range(60)]
        # Set-up, untimed: the first call starts the attach to each server's arena in the
        # background and goes over TCP itself; the test wants the large values in the arenas.
        c.put_many(list(zip(keys, values)))
        def all_attached() -> bool:
            shm_with = c.transport.split(";")[0]
            return all(s.address in shm_with for s in (a, b, hung))

        deadline = time.monotonic() + 10
        while not all_attached() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all_attached(), c.transport
        hung.pause()
        try:
            started = time.monotonic()
            with pytest.raises(memkv.Error) as put_failed:
                c.put_many(list(zip(keys, values)))
            put_took = time.monotonic() - started
            bufs = [bytearray(len(v) * 2) for v in values]
            started = time.monotonic()
            # Within one deadline, or at once once the server's silence is confirmed.
            with pytest.raises(memkv.Error) as get_failed:
                c.get_many_into(keys, bufs)
            get_took = time.monotonic() - started
        finally:
            hung.resume()
        assert isinstance(put_failed.value, memkv.TimeoutError), put_failed.value
        failed = set(get_failed.value.keys or [])
        assert 0 < len(failed) < len(keys), failed
        assert set(put_failed.value.keys or []) == failed
        results = get_failed.value.results
        assert results is not None
        for key, value, buf, got in zip(keys, values, bufs, results):
            if key.encode() in failed:
                assert isinstance(got, (memkv.TimeoutError, memkv.ServerUnavailableError)), got
                assert hung.address in str(got)
            else:
                assert got == len(value) and bytes(buf[: len(value)]) == value, key
        limit = 1.5 * timeout_ms / 1000
        assert put_took < limit and get_took < limit, (put_took, get_took)
        deadline = time.monotonic() + 2
        while True:
            try:
                assert c.exists_many(keys) == [True] * len(keys)
                break
            except memkv.ServerUnavailableError:
                assert time.monotonic() < deadline, "the server answers, the client does not use it"
                time.sleep(0.01)


FORK = textwrap.dedent(
    """
    import asyncio, os, sys
    import memkv

    addr, key = sys.argv[1], sys.argv[2]
    c = memkv.Client(servers=[addr], auth_key=key, timeout_ms=2000, transport="tcp")
    c.put("k", b"v")  # the I/O runtime's threads start in the parent
    pid = os.fork()
    if pid == 0:
        try:
            fresh = memkv.Client(servers=[addr], auth_key=key, timeout_ms=2000, transport="tcp")
            assert fresh.get("k") == b"v", "a client made in the child works"
            try:
                c.get("k")
                raise AssertionError("the parent's client worked in the child")
            except memkv.Error as e:
                assert "fork" in str(e), e
            c.close()  # leaves the parent's connections registered with the parent
            os._exit(0)
        except BaseException as e:
            print(f"child: {e!r}", file=sys.stderr)
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    assert c.get("k") == b"v", "the parent's client works after the child closed its copy"
    """
)


def test_a_forked_child_makes_its_own_client_and_refuses_the_parents(server: MemkvServer) -> None:
    # multiprocessing's fork start method: the child inherits the I/O runtime without its
    # threads. It used to hang forever on any call, even a new client's.
    p = subprocess.run(
        [sys.executable, "-c", FORK, server.address, server.auth_key],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr


def test_errors_outside_a_batch_have_keys_and_results_of_none(server: MemkvServer) -> None:
    c = server.client(timeout_ms=5000)
    c.close()
    with pytest.raises(memkv.Error) as info:
        c.get("k")
    assert info.value.keys is None and info.value.results is None
