"""Settings of the connector (``kv_connector_extra_config``) and of the offloading tier (its
entry in ``secondary_tiers``).

memkv's own client settings (``servers``, ``auth_key``, ``transport``, ``timeout_ms``,
``config``) left out here are taken by the memkv client from ``MEMKV_SERVERS``,
``MEMKV_AUTH_KEY``, ``MEMKV_TRANSPORT``, ``MEMKV_TIMEOUT_MS``, ``MEMKV_CONFIG`` and the local
key file, exactly as every other memkv client does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Used when neither the extra config nor MEMKV_TIMEOUT_MS sets one: a KV load sits on the
# request's critical path, so a stuck server must cost seconds at most, then recomputation.
DEFAULT_TIMEOUT_MS = 5000
DEFAULT_RETRY_AFTER_S = 10.0
# A healthy lookup (one exists_many) answers well within this, so the scheduler gets its answer
# in the same step; a slower one is asked about again in later steps instead of holding the step.
DEFAULT_LOOKUP_WAIT_MS = 5.0
MAX_LOOKUP_WAIT_MS = 1000.0
# A request whose lookup is unanswered this long is computed without memkv: it waits over
# later steps, not inside one, so this bounds a request's delay, never the engine's.
# MemKV's own vLLM integration calls this knob lookup_timeout_s; the name is kept.
DEFAULT_LOOKUP_TIMEOUT_S = 1.0
MAX_LOOKUP_TIMEOUT_S = 60.0

_CLIENT_KEYS = ("servers", "auth_key", "transport", "timeout_ms", "config")
_OWN_KEYS = ("namespace", "model_id", "retry_after_s", "recompute_on_load_failure", "load_async",
             "save_async", "lookup_wait_ms", "lookup_timeout_s")

# Extra configs often come from templated JSON or the command line, where a flag arrives as
# text: bool("false") would be True, so text is read by its words, not its truthiness.
_TRUE_WORDS = ("true", "1", "yes")
_FALSE_WORDS = ("false", "0", "no")


def _flag(value: Any, name: str, source: str) -> bool:
    """A true/false setting: a bool, 0 or 1, or one of true/false/yes/no/1/0 as text."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    raise ValueError(
        f"memkv_vllm: {source} {name!r} must be true or false (a bool, or one of "
        f"{'/'.join(_TRUE_WORDS + _FALSE_WORDS)}), got {value!r}"
    )


def _number(
    value: Any, name: str, source: str, convert: Callable[[Any], Any], minimum: float, must: str
) -> Any:
    """``convert(value)`` (int or float) when it is at least ``minimum``; else an error
    naming the setting and what it ``must`` be."""
    number = None
    # A bool would pass as 0 or 1 (a 1 ms timeout, a 1 s back-off): surely not what was meant.
    if not isinstance(value, bool):
        try:
            number = convert(value)
        except (TypeError, ValueError, OverflowError):
            pass
    # "not >=" also refuses NaN, which compares false with everything.
    if number is None or not number >= minimum:
        raise ValueError(f"memkv_vllm: {source} {name!r} must be {must}, got {value!r}")
    return number


@dataclass(frozen=True)
class Settings:
    client_kwargs: dict[str, Any] = field(default_factory=dict)
    namespace: str = ""
    model_id: str | None = None
    retry_after_s: float = DEFAULT_RETRY_AFTER_S
    recompute_on_load_failure: bool = True
    load_async: bool = True
    save_async: bool = True
    lookup_wait_ms: float = DEFAULT_LOOKUP_WAIT_MS
    lookup_timeout_s: float = DEFAULT_LOOKUP_TIMEOUT_S


def parse(
    extra: Mapping[str, Any] | None,
    environ: Mapping[str, str],
    source: str = "kv_connector_extra_config",
) -> Settings:
    """Settings from the extra config; unknown keys are an error naming the accepted ones.

    ``source`` names where the settings came from in error messages (the connector's
    ``kv_connector_extra_config``, or a secondary tier's entry in ``secondary_tiers``).
    """
    extra = dict(extra or {})
    unknown = sorted(set(extra) - set(_CLIENT_KEYS) - set(_OWN_KEYS))
    if unknown:
        raise ValueError(
            f"memkv_vllm: unknown {source} key(s) {unknown}; accepted: "
            f"{sorted(_CLIENT_KEYS + _OWN_KEYS)}"
        )
    kwargs: dict[str, Any] = {}
    servers = extra.get("servers")
    if servers is not None:
        if isinstance(servers, str):
            servers = [s.strip() for s in servers.split(",") if s.strip()]
        if not isinstance(servers, list) or not servers or not all(isinstance(s, str) for s in servers):
            raise ValueError(
                f"memkv_vllm: {source} 'servers' must be a non-empty list of "
                f"'host:port' strings or one comma-separated string, got {extra['servers']!r}"
            )
        kwargs["servers"] = servers
    for name in ("auth_key", "transport", "config"):
        if extra.get(name) is not None:
            kwargs[name] = str(extra[name])
    timeout = extra.get("timeout_ms")
    if timeout is None and not environ.get("MEMKV_TIMEOUT_MS"):
        timeout = DEFAULT_TIMEOUT_MS
    if timeout is not None:
        kwargs["timeout_ms"] = _number(
            timeout, "timeout_ms", source, int, 1, "a positive integer (milliseconds)"
        )
    retry = _number(
        extra.get("retry_after_s", DEFAULT_RETRY_AFTER_S),
        "retry_after_s", source, float, 0.0, ">= 0 (a number of seconds)",
    )
    must = f"from 0 to {MAX_LOOKUP_WAIT_MS:.0f} (milliseconds)"
    lookup_wait = _number(
        extra.get("lookup_wait_ms", DEFAULT_LOOKUP_WAIT_MS), "lookup_wait_ms", source, float, 0.0, must
    )
    # The wait holds vLLM's scheduler: a large one would bring back the stall it exists to end.
    if lookup_wait > MAX_LOOKUP_WAIT_MS:
        raise ValueError(f"memkv_vllm: {source} 'lookup_wait_ms' must be {must}, got {lookup_wait!r}")
    must = f"more than 0 and at most {MAX_LOOKUP_TIMEOUT_S:.0f} (seconds)"
    lookup_timeout = _number(
        extra.get("lookup_timeout_s", DEFAULT_LOOKUP_TIMEOUT_S),
        "lookup_timeout_s", source, float, 0.0, must,
    )
    if not 0 < lookup_timeout <= MAX_LOOKUP_TIMEOUT_S:
        raise ValueError(
            f"memkv_vllm: {source} 'lookup_timeout_s' must be {must}, got {lookup_timeout!r}"
        )
    return Settings(
        client_kwargs=kwargs,
        namespace=str(extra.get("namespace", "")),
        model_id=extra.get("model_id"),
        retry_after_s=retry,
        recompute_on_load_failure=_flag(
            extra.get("recompute_on_load_failure", True), "recompute_on_load_failure", source
        ),
        load_async=_flag(extra.get("load_async", True), "load_async", source),
        save_async=_flag(extra.get("save_async", True), "save_async", source),
        lookup_wait_ms=lookup_wait,
        lookup_timeout_s=lookup_timeout,
    )
