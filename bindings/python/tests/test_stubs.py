"""The type stubs say what the runtime does: mypy --strict refuses what would fail."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import memkv

SUBCLASSES = textwrap.dedent(
    """
    import memkv

    class Traced(memkv.Client):
        pass

    class TracedConnector(memkv.MemkvConnector):
        pass
    """
)


def test_classes_that_cannot_be_subclassed_are_final(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        exec(SUBCLASSES, {})
    script = tmp_path / "subclass.py"
    script.write_text(SUBCLASSES)
    p = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MYPY_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert p.returncode != 0, p.stdout
    assert p.stdout.count('Cannot inherit from final class') == 2, p.stdout


def test_the_classes_the_stubs_leave_open_can_be_subclassed() -> None:
    class Traced(memkv.AsyncClient):
        pass

    class AppError(memkv.Error):
        pass

    assert issubclass(Traced, memkv.AsyncClient) and issubclass(AppError, Exception)
