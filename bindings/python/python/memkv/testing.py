"""Real memkv servers for tests: ``MemkvServer`` starts ``memkv start`` on an ephemeral loopback
port with a fresh auth key, and stops it on exit.

The binary is ``binary`` if given, else ``$MEMKV_BIN``, else ``memkv`` on ``PATH``, else the
``target/release`` or ``target/debug`` build of the memkv checkout this package was installed
from or is run in.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from ._memkv import Client

_SERVING = re.compile(r"memkv serving.*?data=(\S+).*?admin=(\S+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def find_binary(binary: str | os.PathLike[str] | None = None) -> str:
    """The memkv server binary to run, or an error saying where it was looked for."""
    if binary is not None:
        return os.fspath(binary)
    if env := os.environ.get("MEMKV_BIN"):
        return env
    if on_path := shutil.which("memkv"):
        return on_path
    looked = []
    for root in (Path.cwd(), *Path.cwd().parents, *Path(__file__).resolve().parents):
        for profile in ("release", "debug"):
            candidate = root / "target" / profile / "memkv"
            looked.append(str(candidate))
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    raise FileNotFoundError(
        "no memkv server binary: set MEMKV_BIN, put memkv on PATH, or build it with "
        "`cargo build --release -p memkv` in the checkout"
    )


class MemkvServer:
    """One ``memkv start`` process in memory mode on ``127.0.0.1:0``."""

    def __init__(
        self,
        binary: str | os.PathLike[str] | None = None,
        max_size: str = "256 MiB",
        extra_yaml: str = "",
        start_timeout: float = 30.0,
        auth_key: str | None = None,
    ) -> None:
        self.binary = find_binary(binary)
        # Several servers of one fleet share a key: pass the same one to each.
        self.auth_key = auth_key or secrets.token_hex(32)
        self._dir = tempfile.TemporaryDirectory(prefix="memkv-test-")
        config = Path(self._dir.name) / "config.yaml"
        config.write_text(
            "network:\n"
            "  address: 127.0.0.1:0\n"
            f"  auth_key: {self.auth_key}\n"
            "memory:\n"
            f"  max_size: {max_size}\n"
            "  prefault: false\n" + extra_yaml
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMKV_")}
        env.setdefault("RUST_LOG", "info")
        env["NO_COLOR"] = "1"
        self._log: list[str] = []
        self._proc = subprocess.Popen(
            [self.binary, "start", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.address, self.admin = self._wait_serving(start_timeout)
        # Keep reading the log so the server never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _wait_serving(self, timeout: float) -> tuple[str, str]:
        assert self._proc.stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self._proc.stderr.readline()
            if not line:
                break
            self._log.append(line)
            if m := _SERVING.search(_ANSI.sub("", line)):
                return m.group(1), m.group(2)
        self.stop()
        raise RuntimeError(
            f"memkv server {self.binary} did not start within {timeout} s:\n" + "".join(self._log)
        )

    def _drain(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self._log.append(line)

    @property
    def log(self) -> str:
        """What the server wrote to stderr so far."""
        return "".join(self._log)

    def client(self, **kwargs: Any) -> Client:
        """A ``memkv.Client`` of this server (keyword arguments as ``Client``'s)."""
        kwargs.setdefault("servers", [self.address])
        kwargs.setdefault("auth_key", self.auth_key)
        return Client(**kwargs)

    def status(self) -> str:
        """The admin API's ``/v1/status`` JSON text."""
        with urllib.request.urlopen(f"http://{self.admin}/v1/status", timeout=5) as r:
            body: bytes = r.read()
            return body.decode()

    def running(self) -> bool:
        return self._proc.poll() is None

    @property
    def pid(self) -> int:
        return self._proc.pid

    def pause(self, timeout: float = 5.0) -> None:
        """SIGSTOP: the server keeps its connections but answers nothing (a hung host).

        Returns once every thread of the server is stopped: the signal is delivered to each
        thread on its own, and a thread still running could answer a request sent right after.
        """
        self._proc.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self._proc.pid}/task")
        deadline = time.monotonic() + timeout
        while not _all_stopped(tasks):
            if time.monotonic() > deadline:
                raise RuntimeError(f"memkv server {self._proc.pid} did not stop within {timeout} s")
            time.sleep(0.001)

    def resume(self) -> None:
        """SIGCONT after ``pause``."""
        self._proc.send_signal(signal.SIGCONT)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``; idempotent."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._dir.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _all_stopped(tasks: Path) -> bool:
    """Whether every thread under /proc/<pid>/task is stopped (state T or t)."""
    for stat in tasks.glob("*/stat"):
        try:
            text = stat.read_text()
        except FileNotFoundError:
            continue  # the thread exited meanwhile
        # The state follows the command name, which is in parentheses and may hold spaces.
        if text[text.rindex(")") + 2] not in "Tt":
            return False
    return True
