# SPDX-License-Identifier: Apache-2.0
"""Turn LMCache-side settings (adapter_params, extra_config) into memkv client kwargs.

Every setting is optional: whatever is left out comes from MEMKV_CONFIG /
MEMKV_SERVERS / MEMKV_AUTH_KEY / MEMKV_TRANSPORT / MEMKV_TIMEOUT_MS and the local
key file, exactly as for any memkv client, so a deployment can configure memkv by
environment alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

# Names accepted from LMCache configuration, mapped to memkv.Client arguments.
CLIENT_PARAMS = ("servers", "auth_key", "auth_key_file", "transport", "timeout_ms", "config")
TRANSPORTS = ("auto", "tcp", "rdma", "shm")


def _servers(value: Any, where: str) -> list[str]:
    # JSON gives a list; YAML extra_config and environment-style settings often give
    # "host:port,host:port".
    if isinstance(value, str):
        items = [s.strip() for s in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = [str(s).strip() for s in value]
    else:
        raise TypeError(
            f"{where}servers must be a list of host:port strings or a comma-separated string, "
            f"got {type(value).__name__}"
        )
    items = [s for s in items if s]
    if not items:
        raise ValueError(
            f"{where}servers is empty; give at least one host:port or leave it out to use MEMKV_SERVERS"
        )
    return items


def client_kwargs(params: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """Validate memkv connection settings and return kwargs for memkv.Client / MemkvConnector.

    ``where`` prefixes error messages with the configuration path the values came from
    (for example ``"extra_config storage_plugin.memkv."``) so the operator knows what to fix.
    Unknown names raise TypeError listing the accepted ones.
    """
    unknown = sorted(set(params) - set(CLIENT_PARAMS))
    if unknown:
        raise TypeError(
            f"unknown memkv setting(s) {', '.join(where + u for u in unknown)}; "
            f"accepted: {', '.join(CLIENT_PARAMS)}"
        )
    out: dict[str, Any] = {}
    if params.get("servers") is not None:
        out["servers"] = _servers(params["servers"], where)
    if params.get("auth_key") is not None and params.get("auth_key_file") is not None:
        raise ValueError(f"give either {where}auth_key or {where}auth_key_file, not both")
    if params.get("auth_key") is not None:
        out["auth_key"] = str(params["auth_key"]).strip()
    if params.get("auth_key_file") is not None:
        path = Path(str(params["auth_key_file"])).expanduser()
        try:
            out["auth_key"] = path.read_text().strip()
        except OSError as e:
            raise ValueError(f"{where}auth_key_file {str(path)!r} cannot be read: {e.strerror}") from e
    if params.get("transport") is not None:
        transport = str(params["transport"]).lower()
        if transport not in TRANSPORTS:
            raise ValueError(
                f"{where}transport must be one of {', '.join(TRANSPORTS)}, got {params['transport']!r}"
            )
        out["transport"] = transport
    if params.get("timeout_ms") is not None:
        try:
            timeout_ms = int(params["timeout_ms"])
        except (TypeError, ValueError):
            raise ValueError(
                f"{where}timeout_ms must be a whole number of milliseconds, got {params['timeout_ms']!r}"
            ) from None
        if timeout_ms <= 0:
            raise ValueError(f"{where}timeout_ms must be > 0, got {timeout_ms}")
        out["timeout_ms"] = timeout_ms
    if params.get("config") is not None:
        out["config"] = str(Path(str(params["config"])).expanduser())
    return out


def plugin_prefix(config: Any, class_name: str) -> str:
    """The ``storage_plugin.<name>.`` prefix an in-process plugin was configured under.

    LMCache does not tell a plugin its name, so find the entry of ``storage_plugins``
    whose module_path/class_name point at this package; operators may name it anything.
    """
    extra = getattr(config, "extra_config", None) or {}
    for name in getattr(config, "storage_plugins", None) or []:
        prefix = f"storage_plugin.{name}."
        module = str(extra.get(prefix + "module_path", ""))
        if extra.get(prefix + "class_name") == class_name and module.startswith("memkv_lmcache"):
            return prefix
    return "storage_plugin.memkv."


def plugin_settings(config: Any, prefix: str, own_params: tuple[str, ...]) -> dict[str, Any]:
    """The extra_config entries under ``prefix`` (minus module_path / class_name); an
    unknown one raises TypeError naming it and listing what is accepted."""
    extra = getattr(config, "extra_config", None) or {}
    settings = {k[len(prefix) :]: v for k, v in extra.items() if isinstance(k, str) and k.startswith(prefix)}
    settings.pop("module_path", None)
    settings.pop("class_name", None)
    unknown = sorted(set(settings) - set(CLIENT_PARAMS) - set(own_params))
    if unknown:
        raise TypeError(
            f"unknown extra_config key(s) {', '.join(prefix + u for u in unknown)}; "
            f"accepted after {prefix}: module_path, class_name, {', '.join(CLIENT_PARAMS + own_params)}"
        )
    return settings


def as_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
        return value.lower() in ("true", "1", "yes")
    raise ValueError(f"{name} must be true or false, got {value!r}")
