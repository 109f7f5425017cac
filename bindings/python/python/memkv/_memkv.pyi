"""Type stubs of the native extension ``memkv._memkv``."""

import os
from collections.abc import Awaitable, Iterable, Sequence
from types import TracebackType
from typing import Any, Literal, Protocol, Self, final

from typing_extensions import Buffer

__version__: str

class _ArrayInterface(Protocol):
    """numpy arrays before Python 3.12, whose stubs declare no ``__buffer__`` there."""

    @property
    def __array_interface__(self) -> dict[str, Any]: ...

BufferLike = Buffer | _ArrayInterface
"""Any C-contiguous buffer-protocol object: bytes, bytearray, memoryview, numpy array."""

Key = str | bytes
"""A key: ``str`` (encoded as UTF-8) or ``bytes``; 1 to 1024 bytes."""

Servers = Sequence[str] | str
"""``["host:port", ...]``, or one ``"host:port,host:port"`` string."""

Transport = Literal["auto", "tcp", "rdma", "shm"]

class Error(Exception):
    """Any memkv failure. A failed batch call also carries ``keys`` (the keys that failed) and
    ``results`` (every item's outcome in order: its value, or the ``Error`` of its failure);
    both are ``None`` on any other failure."""

    keys: list[bytes] | None
    results: list[object] | None

class TimeoutError(Error): ...
class AuthenticationError(Error): ...
class TooLargeError(Error): ...
class ServerUnavailableError(Error): ...
class RdmaUnavailableError(Error): ...
class ConfigError(Error, ValueError):
    """Bad client configuration; also a ``ValueError``."""

@final
class Client:
    """A blocking client. Thread-safe; every call releases the GIL while it waits, and Ctrl-C
    (``KeyboardInterrupt``) interrupts it."""

    def __init__(
        self,
        servers: Servers | None = None,
        auth_key: str | bytes | None = None,
        transport: Transport | None = None,
        timeout_ms: int | None = None,
        config: str | os.PathLike[str] | None = None,
    ) -> None: ...
    def put(self, key: Key, value: BufferLike) -> None: ...
    def get(self, key: Key) -> bytes | None: ...
    def get_into(self, key: Key, buffer: BufferLike) -> int | None: ...
    def delete(self, key: Key) -> bool: ...
    def exists(self, key: Key) -> bool: ...
    def put_many(self, items: Iterable[tuple[Key, BufferLike]]) -> None:
        """Stores every item; a key named twice keeps its later value."""
    def get_many(self, keys: Iterable[Key]) -> list[bytes | None]: ...
    def get_many_into(self, keys: Iterable[Key], buffers: Iterable[BufferLike]) -> list[int | None]:
        """Reads each key's value into its buffer. Raises ``ValueError`` when two buffers share
        a byte (they are written at the same time)."""
    def exists_many(self, keys: Iterable[Key]) -> list[bool]: ...
    def delete_many(self, keys: Iterable[Key]) -> list[bool]: ...
    def register(self, buffer: BufferLike) -> None: ...
    @property
    def transport(self) -> str: ...
    @property
    def servers(self) -> list[str]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

class AsyncClient:
    """``Client``'s operations, each returning an asyncio future. ``memkv.AsyncClient``
    wraps each in a coroutine: use that."""

    def __init__(
        self,
        servers: Servers | None = None,
        auth_key: str | bytes | None = None,
        transport: Transport | None = None,
        timeout_ms: int | None = None,
        config: str | os.PathLike[str] | None = None,
    ) -> None: ...
    def put(self, key: Key, value: BufferLike) -> Awaitable[None]: ...
    def get(self, key: Key) -> Awaitable[bytes | None]: ...
    def get_into(self, key: Key, buffer: BufferLike) -> Awaitable[int | None]: ...
    def delete(self, key: Key) -> Awaitable[bool]: ...
    def exists(self, key: Key) -> Awaitable[bool]: ...
    def put_many(self, items: Iterable[tuple[Key, BufferLike]]) -> Awaitable[None]: ...
    def get_many(self, keys: Iterable[Key]) -> Awaitable[list[bytes | None]]: ...
    def get_many_into(
        self, keys: Iterable[Key], buffers: Iterable[BufferLike]
    ) -> Awaitable[list[int | None]]:
        """As ``Client.get_many_into``: overlapping buffers raise ``ValueError``."""
    def exists_many(self, keys: Iterable[Key]) -> Awaitable[list[bool]]: ...
    def delete_many(self, keys: Iterable[Key]) -> Awaitable[list[bool]]: ...
    def register(self, buffer: BufferLike) -> None: ...
    @property
    def transport(self) -> str: ...
    @property
    def servers(self) -> list[str]: ...
    def close(self) -> None: ...

Completion = tuple[int, bool, str, list[bool] | None]
"""``(future id, ok, error message, per-key results)``."""

@final
class MemkvConnector:
    """LMCache's native connector contract: non-blocking submits, one eventfd, drained
    completions."""

    def __init__(
        self,
        servers: Servers | None = None,
        auth_key: str | bytes | None = None,
        transport: Transport | None = None,
        timeout_ms: int | None = None,
        config: str | os.PathLike[str] | None = None,
    ) -> None: ...
    def event_fd(self) -> int:
        """The eventfd written once per completed batch. Raises ``Error`` after ``close()``,
        which closes it, and in a forked child (the eventfd is the parent's)."""
    def submit_batch_get(self, keys: Sequence[Key], buffers: Sequence[BufferLike]) -> int:
        """Raises ``ValueError`` when two buffers share a byte (they are written at the same
        time)."""
    def submit_batch_set(self, keys: Sequence[Key], buffers: Sequence[BufferLike]) -> int: ...
    def submit_batch_exists(self, keys: Sequence[Key]) -> int: ...
    def submit_batch_delete(self, keys: Sequence[Key]) -> int: ...
    def drain_completions(self) -> list[Completion]:
        """The batches completed since the last call, oldest first; resets the eventfd. Raises
        ``Error`` after ``close()``, and in a forked child."""
    def register(self, buffer: BufferLike) -> None: ...
    @property
    def transport(self) -> str: ...
    def close(self) -> None:
        """Waits for the batches in flight (also those other threads submit meanwhile), then
        closes the client and the eventfd; completions not drained are dropped. Every other method raises ``Error`` afterwards. In a forked
        child, or from a finalizer memkv runs on its own thread, it waits for no batch."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

