"""The checks every configuration table uses: types, bounds, known keys."""
from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import Any, Literal, overload

DIALECTS = ("openai", "anthropic")


class ConfigError(ValueError):
    pass


# A TOML table as tomllib reads it: its values are checked (types, bounds) as they are taken
Table = dict[str, Any]


@overload
def _num(table: Table, key: str, default: float, where: str, minimum: float = 0.0, *,
         integer: Literal[True], maximum: float | None = None) -> int: ...
@overload
def _num(table: Table, key: str, default: float, where: str, minimum: float = 0.0,
         integer: Literal[False] = False, maximum: float | None = None) -> float: ...
def _num(table: Table, key: str, default: float, where: str, minimum: float = 0.0, integer: bool = False,
         maximum: float | None = None) -> float:
    """A number at ``key`` within [minimum, maximum] (no maximum: unbounded above)."""
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}.{key} must be a number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ConfigError(f"{where}.{key} must be an integer, got {value!r}")
    # TOML has nan and inf: nan passes every bound (request_timeout_s = nan: no deadline at all)
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}.{key} must be a finite number, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{where}.{key} must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{where}.{key} must be <= {maximum:g}, got {value!r}")
    return value


def _bool(table: Table, key: str, default: bool, where: str) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key} must be true or false, got {value!r}")
    return value


def _str(table: Table, key: str, default: str, where: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key} must be a string, got {value!r}")
    return value


def _has_ctl(text: str) -> bool:
    """Control characters (CR, LF, NUL...) would split or corrupt what Sluice writes."""
    return any(c < " " or c == "\x7f" for c in text)


def _check_keys(table: Iterable[str], allowed: Iterable[str], where: str) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown key(s) in {where}: {', '.join(unknown)}")


def _check_table(table: object, allowed: Iterable[str], where: str) -> Table:
    """A sub-table: a table, with none but the ``allowed`` keys (returned as one)."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    _check_keys(table, allowed, where)
    return table


# what Sluice writes on every provider request itself: the framing (host, length), the provider's
# key, what the connection is; a config header beside one would reach the provider as a duplicate
OWN_REQUEST_HEADERS = frozenset(("host", "content-length", "transfer-encoding", "authorization",
                                 "x-api-key", "anthropic-version", "connection", "keep-alive",
                                 "proxy-connection", "te", "trailer", "upgrade", "expect"))


def _extra_headers(table: Table, key: str, where: str) -> dict[str, str]:
    """A table of extra request headers: names and values without control characters, none
    of the headers Sluice writes itself."""
    headers = table.get(key, {})
    if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise ConfigError(f"{where}.{key} must be a table of strings")
    for k, v in headers.items():
        if _has_ctl(k + v) or not k or ":" in k or " " in k:
            raise ConfigError(f"{where}.{key}: invalid header {k!r}")
        if k.lower() in OWN_REQUEST_HEADERS:
            raise ConfigError(f"{where}.{key}: {k!r} is written by Sluice itself (the provider's "
                              f"key goes in api_key or api_key_env, its version in anthropic_version)")
    return headers


def _from_env(table: Table, key: str, where: str) -> str:
    """The value of the environment variable that ``table[key]`` names."""
    env = _str(table, key, "", where)
    if env not in os.environ:
        raise ConfigError(f"{where}.{key}: environment variable {env} is not set")
    return os.environ[env]
