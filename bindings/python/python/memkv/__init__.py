"""memkv: the Python client for memkv, a distributed KV-cache block store for LLM inference.

``Client`` (blocking, GIL released for all I/O), ``AsyncClient`` (asyncio) and
``MemkvConnector`` (LMCache's native connector contract) wrap the Rust ``memkv-client``: the
same placement, protocol and configuration chain (arguments, then ``MEMKV_*`` variables, then
``MEMKV_CONFIG``, then the local server's key file).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeVar

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

    The native methods return asyncio futures; each is wrapped in a coroutine here, so that
    ``asyncio.create_task`` and ``TaskGroup.create_task`` take them (argument errors are then
    raised when the coroutine runs, as for any coroutine).

    ``get_into`` and ``get_many_into`` write into the caller's buffers, and ``put`` and
    ``put_many`` read from them. Cancelled, they still wait for their transfer to end (its
    deadline at the latest) before the cancellation goes on: until then memkv may write into
    the buffers, or read what the caller writes there next, once it takes them back as free.
    """

    async def put(self, key: Key, value: BufferLike) -> None:
        return await _until_done(super().put(key, value))

    async def get(self, key: Key) -> bytes | None:
        return await super().get(key)

    async def delete(self, key: Key) -> bool:
        return await super().delete(key)

    async def exists(self, key: Key) -> bool:
        return await super().exists(key)

    async def put_many(self, items: Iterable[tuple[Key, BufferLike]]) -> None:
        return await _until_done(super().put_many(items))

    async def get_many(self, keys: Iterable[Key]) -> list[bytes | None]:
        return await super().get_many(keys)

    async def exists_many(self, keys: Iterable[Key]) -> list[bool]:
        return await super().exists_many(keys)

    async def delete_many(self, keys: Iterable[Key]) -> list[bool]:
        return await super().delete_many(keys)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self.close()
        return False

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
