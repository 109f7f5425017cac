"""memkv: the Python client for memkv, a distributed KV-cache block store for LLM inference.

``Client`` (blocking, GIL released for all I/O), ``AsyncClient`` (asyncio) and
``MemkvConnector`` (LMCache's native connector contract) wrap the Rust ``memkv-client``: the
same placement, protocol and configuration chain (arguments, then ``MEMKV_*`` variables, then
``MEMKV_CONFIG``, then the local server's key file).
"""

from ._memkv import (
    AsyncClient,
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
