"""One strict reader for the harness's TOML files (gateway.toml, suite files, topology files).

Each file format is a `Table` declaring its keys and their types; a key it does not declare, a
value of the wrong type or a missing required key is a problem naming the file, the table and
the key, e.g. ``gateways/x/gateway.toml: [start] timout_s: unknown key; allowed: command, env``.
The loaders add their own checks of meaning (known hosts, placeholders, ...) afterwards.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Union

from harness.model.errors import UserError


class TomlSchemaError(UserError, ValueError):
    """A TOML file that cannot be read or does not match its format; one line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class Kind:
    """A leaf value: what it must be, in words, and the test."""
    what: str
    accepts: Callable[[Any], bool]


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


STR = Kind("a string", lambda v: isinstance(v, str))
INT = Kind("a whole number", lambda v: isinstance(v, int) and not isinstance(v, bool))
NUMBER = Kind("a number", _is_number)
BOOL = Kind("true or false", lambda v: isinstance(v, bool))
STRINGS = Kind("a list of strings", lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v))
ANY = Kind("a value", lambda v: True)


@dataclass(frozen=True)
class Table:
    """A table with the declared `keys`; or, with `each`, any keys whose values are all `each`
    ([hosts.NAME], env = {...}). `required` keys must be present."""
    keys: Mapping[str, "Schema"] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    each: "Schema | None" = None


@dataclass(frozen=True)
class Tables:
    """A list of tables: [[name]] sections or an inline list of {...}."""
    table: Table


Schema = Union[Kind, Table, Tables]


def _label(where: str) -> str:
    return f"[{where}] " if where else ""


def problems(data: Any, schema: Schema, path: Path | str, where: str = "", key: str = "") -> list[str]:
    """Every way `data` departs from `schema`, one line each ([] when it matches)."""
    name = f"{path}: {_label(where)}{key}".rstrip()
    inner = f"{where}.{key}" if where and key else (where or key)
    if isinstance(schema, Kind):
        return [] if schema.accepts(data) else [f"{name}: expected {schema.what}, got {data!r}"]
    if isinstance(schema, Tables):
        if not isinstance(data, list):
            return [f"{name}: expected a list of tables, got {data!r}"]
        return [p for i, item in enumerate(data)
                for p in problems(item, schema.table, path, f"{inner}[{i}]")]
    if not isinstance(data, dict):
        return [f"{name}: expected a table, got {data!r}"]
    found = []
    for k in schema.required:
        if k not in data:
            found.append(f"{path}: {_label(inner)}{k}: missing (required)")
    for k, value in data.items():
        sub = schema.each if schema.each is not None else schema.keys.get(k)
        if sub is None:
            allowed = ", ".join(schema.keys) or "none"
            found.append(f"{path}: {_label(inner)}{k}: unknown key; allowed: {allowed}")
        else:
            found += problems(value, sub, path, inner, k)
    return found


def read(path: Path) -> tuple[dict, bytes]:
    """The file's data and raw bytes; TomlSchemaError when it cannot be read or parsed."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TomlSchemaError([f"{path}: cannot read it ({exc.strerror or exc})"]) from None
    try:
        return tomllib.loads(raw.decode()), raw
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TomlSchemaError([f"{path}: not valid TOML: {exc}"]) from None


def load(path: Path, schema: Table) -> tuple[dict, bytes]:
    """read(), then checked against `schema`; TomlSchemaError lists every problem."""
    data, raw = read(path)
    found = problems(data, schema, path)
    if found:
        raise TomlSchemaError(found)
    return data, raw
