"""Child processes that start memkv work against a server, then wait while the test pauses that
server (SIGSTOP, a hung host) before they go on."""

import subprocess
import sys

from memkv.testing import MemkvServer


def over_paused_server(
    server: MemkvServer, code: str, args: list[str], timeout: float
) -> tuple[int, str, str]:
    """Runs `code` with `args`: once it prints "ready" the server is paused and the child told
    to go on; returns its exit status, stdout and stderr. A child still running after `timeout`
    seconds fails the test (a hang); the server is resumed either way."""
    p = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdin is not None and p.stdout is not None
    try:
        assert p.stdout.readline().strip() == "ready"
        server.pause()
        p.stdin.write("go\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=timeout)
    finally:
        server.resume()
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out, err
