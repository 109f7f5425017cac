# SPDX-License-Identifier: Apache-2.0
"""How LMCache-side settings become memkv client arguments."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memkv_lmcache import client_kwargs


def test_servers_as_list_or_comma_separated():
    assert client_kwargs({"servers": ["a:1", " b:2 "]}) == {"servers": ["a:1", "b:2"]}
    assert client_kwargs({"servers": "a:1, b:2,"}) == {"servers": ["a:1", "b:2"]}
    with pytest.raises(ValueError, match="servers is empty"):
        client_kwargs({"servers": " , "})


def test_nothing_given_means_environment():
    assert client_kwargs({}) == {}
    assert client_kwargs({"servers": None, "timeout_ms": None}) == {}


def test_auth_key_file(tmp_path):
    path = tmp_path / "key"
    path.write_text("ab" * 32 + "\n")
    assert client_kwargs({"auth_key_file": str(path)}) == {"auth_key": "ab" * 32}
    with pytest.raises(ValueError, match="cannot be read"):
        client_kwargs({"auth_key_file": str(tmp_path / "missing")})
    with pytest.raises(ValueError, match="either"):
        client_kwargs({"auth_key": "ab" * 32, "auth_key_file": str(path)})


def test_bad_values_name_the_setting():
    with pytest.raises(ValueError, match=r"^x\.timeout_ms must be > 0"):
        client_kwargs({"timeout_ms": 0}, where="x.")
    with pytest.raises(ValueError, match="timeout_ms must be a whole number"):
        client_kwargs({"timeout_ms": "soon"})
    with pytest.raises(ValueError, match="transport must be one of auto, tcp, rdma, shm"):
        client_kwargs({"transport": "ib"})
    with pytest.raises(TypeError, match=r"unknown memkv setting\(s\) x\.host"):
        client_kwargs({"host": "a"}, where="x.")
    # The same-host transport only, as memkv.Client takes it (it was refused here).
    assert client_kwargs({"transport": "shm"}) == {"transport": "shm"}
    assert client_kwargs({"transport": "RDMA", "timeout_ms": "250"}) == {
        "transport": "rdma",
        "timeout_ms": 250,
    }


def test_package_import_leaves_lmcache_out():
    # An LMCache server imports memkv_lmcache (or memkv_lmcache.l2) itself; the package root
    # must not pull lmcache and torch into processes that only want the connector.
    code = "import sys, memkv_lmcache; print(sorted(m for m in ('lmcache', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
