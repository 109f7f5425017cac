"""Runs e2e.py: four fresh vLLM CPU engines against a real memkv server (about four minutes on
two cores); the ExampleConnector comparison is left to the benchmark (e2e.py without
--no-files). Skipped where vLLM is not installed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("memkv")

E2E = Path(__file__).resolve().parents[1] / "e2e.py"


def test_vllm_serves_a_repeated_prompt_from_memkv(tmp_path):
    tokens = os.environ.get("MEMKV_VLLM_E2E_TOKENS", "4000")
    proc = subprocess.run(
        [sys.executable, str(E2E), "--tokens", tokens, "--no-files", "--json", str(tmp_path / "e2e.json")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert "e2e: OK" in proc.stdout
