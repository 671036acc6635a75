"""Message type names to table names: one table per type name, the version a column.

``Sales.OrderPlaced, Sales.Messages, Version=2.0.0.0, Culture=neutral, PublicKeyToken=null`` is the
type ``Sales.OrderPlaced`` at version ``2.0.0.0``: a contract's versions share one table, so a query
over an order's history does not union tables per release. The table name is derived (prefix, the
type name in lower case, every run of other characters as one ``_``) and validated. Two type names
that derive the same name (``Sales.Order_Placed`` and ``Sales.Order.Placed``) do not share a table:
the type that claimed it first keeps it (claims are recorded in ``body_schema_changes``), the other
gets a suffix from a hash of its name, so the mapping never changes once made.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable, Mapping

from queuelake.errors import ConfigError
from queuelake.nsb.message_types import full_type_name, without_versions

TABLE_NAME = re.compile(r"[a-z][a-z0-9_]{0,127}")
_VERSION = re.compile(r",\s*Version\s*=\s*([^,\]]+)")
_OTHER = re.compile(r"[^a-z0-9]+")
MAX_TABLE = 120


def type_name(message_type: str) -> str:
    """The .NET full name, without the assembly part and version, its generic arguments' versions too
    (``without_versions``): ``Envelope<Order>`` of releases 1.0 and 2.0 is one table."""
    return without_versions(full_type_name(message_type))


def type_version(message_type: str) -> str | None:
    """The assembly version (``Version=2.0.0.0``) of the type itself, not of a generic argument."""
    rest = message_type[len(full_type_name(message_type)) :]
    match = _VERSION.search(rest)
    return match.group(1).strip() if match else None


def derived(prefix: str, name: str) -> str:
    """``prefix`` + the type name in lower case with other characters as ``_``, cut to a safe length
    (a hash keeps cut names apart)."""
    stem = _OTHER.sub("_", name.lower()).strip("_") or "type"
    table = prefix + stem
    if len(table) > MAX_TABLE:
        table = table[: MAX_TABLE - 9] + "_" + _digest(name)
    return table


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]


def check_table(table: str, where: str) -> str:
    if not TABLE_NAME.fullmatch(table):
        raise ConfigError(f"{where}: {table!r} is not a table name (lower-case letters, digits, '_')")
    return table


def check_overrides(overrides: Mapping[str, str], reserved: set[str]) -> None:
    """``bodies.tables`` names table names only, and none of queuelake's own tables (``reserved``): a type
    mapped to ``messages`` had the journal ALTERed with the body's fields, for good, before bodies failed
    (a review)."""
    for name, table in overrides.items():
        check_table(table, f"bodies.tables.{name}")
        if table in reserved:
            raise ConfigError(
                f"bodies.tables.{name}: {table} is one of queuelake's own tables (or a transform's output); "
                "name a table of its own"
            )


def assign(
    names: Iterable[str], claimed: Mapping[str, str], prefix: str, overrides: Mapping[str, str], reserved: set[str]
) -> dict[str, str]:
    """Tables for type names: ``claimed`` (type -> table, from earlier runs) kept; a configured name
    (``overrides``) next; else the derived name, with a hash suffix when another type holds it or it
    is one of queuelake's own tables (``reserved``). Deterministic: new types in sorted order."""
    taken = {table: name for name, table in claimed.items()}
    out: dict[str, str] = {}
    for name in sorted(set(names)):
        if name in claimed:
            out[name] = claimed[name]
            continue
        table = overrides.get(name)
        if table is not None:
            check_overrides({name: table}, reserved)
            if taken.get(table, name) != name:
                raise ConfigError(f"bodies.tables.{name}: {table} already holds the type {taken[table]}")
        else:
            table = derived(prefix, name)
            if table in reserved or taken.get(table, name) != name or table in overrides.values():
                table = f"{table[: MAX_TABLE - 9]}_{_digest(name)}"
        taken[table] = name
        out[name] = table
    return out


def wanted(name: str, patterns: list[str]) -> bool:
    """Is a type name selected by ``bodies.types`` (empty: every type)?"""
    return not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns)
