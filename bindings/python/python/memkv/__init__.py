"""memkv: the Python client for memkv, a distributed KV-cache block store for LLM inference.

``Client`` (blocking, GIL released for all I/O), ``AsyncClient`` (asyncio) and
``MemkvConnector`` (LMCache's native connector contract) wrap the Rust ``memkv-client``: the
same placement, protocol and configuration chain (arguments, then ``MEMKV_*`` variables, then
``MEMKV_CONFIG``, then the local server's key file).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, TypeVar

from . import _memkv
from ._memkv import (
    AuthenticationError,
    Client,
    ConfigError,
    Error,
    MemkvConnector,
    RdmaUnavailableError,
    ServerUnavailableError,
    TimeoutError,
    TooLargeError,
    __version__,
)

if TYPE_CHECKING:
    from ._memkv import BufferLike, Key

_T = TypeVar("_T")


class AsyncClient(_memkv.AsyncClient):
    """``Client``'s operations as asyncio coroutines.

    ``get_into`` and ``get_many_into`` write into the caller's buffers. Cancelled, they still
    wait for their read to end (its deadline at the latest) before the cancellation goes on:
    until then the read may write into the buffers, which the caller would take back as free.
    """

    async def get_into(self, key: Key, buffer: BufferLike) -> int | None:
        return await _until_done(super().get_into(key, buffer))

    async def get_many_into(
        self, keys: Iterable[Key], buffers: Iterable[BufferLike]
    ) -> list[int | None]:
        return await _until_done(super().get_many_into(keys, buffers))


async def _until_done(operation: Awaitable[_T]) -> _T:
    task = asyncio.ensure_future(operation)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                pass  # cancelled again: the buffers are still lent
        if not task.cancelled():
            task.exception()  # seen, so asyncio does not log it as never retrieved
        raise


Completion = tuple[int, bool, str, list[bool] | None]
"""One finished ``MemkvConnector`` batch: ``(future id, ok, error message, per-key results)``."""

__all__ = [
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "Completion",
    "ConfigError",
    "Error",
    "MemkvConnector",
    "RdmaUnavailableError",
    "ServerUnavailableError",
    "TimeoutError",
    "TooLargeError",
    "__version__",
]
