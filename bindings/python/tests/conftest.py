"""Fixtures: real memkv servers on loopback (memkv.testing), one per test module."""

from collections.abc import Iterator

import pytest

import memkv
from memkv.testing import MemkvServer


@pytest.fixture(scope="module")
def server() -> Iterator[MemkvServer]:
    with MemkvServer() as srv:
        yield srv


@pytest.fixture
def client(server: MemkvServer) -> Iterator[memkv.Client]:
    with server.client(timeout_ms=5000) as c:
        yield c
