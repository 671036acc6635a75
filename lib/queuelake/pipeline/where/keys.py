"""A business key (a typed body field and a value) to the messages that carry it.

Why through the typed tables: the journal holds bodies as bytes; ``queuelake bodies`` writes one table
per message type with the body's fields as typed columns (``body_<type>``, listed by
``body_schema_changes``: ``pipeline/store/typed.py``). A field is searched in every typed table that
has it, the value cast to the column's type (``--value 4711`` is an integer in one table and text in
another); each typed row names its message (``message_id``). What cannot be searched is said, never
guessed: no typed tables yet, no table with that field, a value that is not of the column's type, and
how far the typed tables cover the journal (messages drained after the last ``bodies`` run are not in
them; their queue copies are still found by their bodies, ``body_matches``).

The same field in a body still waiting in a queue (no typed row yet) is checked by ``body_matches``:
the body is parsed (JSON, or XML by element name) and the field's value compared as text, numbers
as numbers.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from queuelake.errors import ArgumentError
from queuelake.lake import stage_tables
from queuelake.lake.deletes import RowFilter
from queuelake.lake.engines import table_engine
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.store.typed import body_tables

IDENTITY = ["message_id", "conversation_id", "message_type", "queue"]


@dataclass
class KeyResult:
    """The message ids found for a field and value, and what was (not) searched."""

    message_ids: list[str] = field(default_factory=list)
    tables_searched: dict[str, int] = field(default_factory=dict)  # table: rows matching
    tables_without_field: int = 0
    not_searchable: list[str] = field(default_factory=list)  # why a table (or all) could not be searched
    journal_version_typed: int | None = None  # the journal version the typed tables were brought up to
    truncated: bool = False


def field_path(name: str) -> list[str]:
    """``Lines.Product``-style names: a dotted path into a struct column (a top-level name usually)."""
    parts = name.split(".")
    if not name or any(not p for p in parts):
        raise ArgumentError(f"--field {name!r}: a body field's name, or a dotted path (Address.City)")
    return parts


def _named(names: list[str], wanted: str) -> int:
    """The index of ``wanted`` among ``names``: spelled so, else the one name equal to it in any case (a
    typed column is spelled as the bodies first were: ``OrderId`` also for ``orderId`` senders); -1."""
    if wanted in names:
        return names.index(wanted)
    folded = [i for i, name in enumerate(names) if name.lower() == wanted.lower()]
    return folded[0] if len(folded) == 1 else -1


@dataclass(frozen=True)
class _Column:
    """Where a field's values are in a typed table: their type (a list's items), the path as the table
    spells it, and whether it goes through a list (``Lines.Sku`` of a list of structs, ``Tags`` a list)."""

    typ: pa.DataType
    spelled: list[str]
    through_lists: bool


def _is_list(typ: pa.DataType) -> bool:
    return bool(pa.types.is_list(typ) or pa.types.is_large_list(typ))


def _field_type(schema: pa.Schema, path: list[str]) -> _Column | None:
    """The column at ``path``, through lists as a body's JSON goes through arrays (``body_matches``
    does the same for the bodies still in the queues); None: no such column. Why: ``Lines.Sku`` of an
    order's list of lines found nothing in the typed tables, and the same order waiting in its queue."""
    index = _named(schema.names, path[0])
    if index < 0:
        return None
    typ = schema.field(index).type
    spelled = [schema.names[index]]
    lists = False
    for part in path[1:]:
        while _is_list(typ):
            typ, lists = typ.value_type, True
        if not pa.types.is_struct(typ):
            return None
        index = _named([typ.field(i).name for i in range(typ.num_fields)], part)
        if index < 0:
            return None
        spelled.append(typ.field(index).name)
        typ = typ.field(index).type
    while _is_list(typ):
        typ, lists = typ.value_type, True
    return _Column(typ, spelled, lists)


def _unnested(values: pa.Array, rows: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """A list column's items, each with the row it came from (a null list holds none)."""
    while _is_list(values.type):
        parents = pc.list_parent_indices(values).to_numpy(zero_copy_only=False)
        values, rows = pc.list_flatten(values), rows[parents]
    return values, rows


def holding(table: pa.Table, column: str, path: list[str], scalar: pa.Scalar) -> pa.Table:
    """The ``message_id`` of each row of ``table`` whose ``column`` holds ``scalar`` at ``path`` (the
    struct fields below the column) in any item of the lists on the way: once per row."""
    values: pa.Array = table.column(column).combine_chunks()
    rows = np.arange(len(values))
    for name in path:
        values, rows = _unnested(values, rows)
        values = pc.struct_field(values, name)
    values, rows = _unnested(values, rows)
    equal = pc.fill_null(pc.equal(values, scalar), False).to_numpy(zero_copy_only=False)
    return table.select(["message_id"]).take(pa.array(np.unique(rows[equal]), pa.int64()))


def typed_value(text: str, typ: pa.DataType) -> Any:
    """``text`` as a value of the column type ``typ``; ValueError when it is not one."""
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return text
    if pa.types.is_boolean(typ):
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError(f"{text!r} is not true or false")
        return lowered == "true"
    if pa.types.is_integer(typ):
        return int(text)
    if pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        return float(text)
    if pa.types.is_timestamp(typ):
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    if pa.types.is_date(typ):
        return dt.date.fromisoformat(text.strip())
    raise ValueError(f"a column of type {typ} is not searched by value")


def typed_scalar(text: str, typ: pa.DataType) -> pa.Scalar:
    """``typed_value`` as an Arrow scalar of ``typ``; ValueError when it is not one, an integer past the
    column's range too (it failed the command with OverflowError: a review)."""
    value = typed_value(text, typ)
    try:
        return pa.scalar(value, typ)
    except (OverflowError, pa.ArrowInvalid) as exc:
        raise ValueError(f"out of the range of {typ}") from exc


def typed_tables_version(lake: LakeEngine) -> int | None:
    """The journal version the last ``bodies`` increment reached (``body_increments``), None without one."""
    increments = stage_tables.BODY_INCREMENTS.name
    if not lake.exists(increments):
        return None
    versions = lake.read_arrow(increments, columns=["journal_version"]).column("journal_version")
    top = pc.max(versions).as_py() if len(versions) else None
    return None if top is None else int(top)


def find_key(lake: LakeEngine, name: str, value: str, max_messages: int) -> KeyResult:
    """The messages whose typed body field ``name`` equals ``value``, in every typed table that has it."""
    path = field_path(name)
    out = KeyResult(journal_version_typed=typed_tables_version(lake))
    tables = body_tables(lake)
    if not tables:
        out.not_searchable.append(
            "no typed body tables in this lake (run queuelake bodies): the field was searched only in the "
            "bodies still waiting in the queues"
        )
        return out
    found: dict[str, None] = {}
    for table in tables:
        engine = table_engine(lake, table)
        found_type = _field_type(engine.schema(table), path)
        if found_type is None:
            out.tables_without_field += 1
            continue
        typ, spelled = found_type.typ, found_type.spelled
        try:
            scalar = typed_scalar(value, typ)
        except (ValueError, TypeError) as exc:
            out.not_searchable.append(f"{table}.{name} ({typ}): {value!r} is not a value of it ({exc})")
            continue
        if found_type.through_lists:  # each batch's lists unnested in Arrow: a filter cannot reach into them
            where = RowFilter(f"{name} = {value!r}", ds.field(spelled[0]).is_valid(), (spelled[0],))
            look = functools.partial(holding, column=spelled[0], path=spelled[1:], scalar=scalar)
            rows = engine.matching_reduced(table, where, ["message_id", spelled[0]], look)
        else:
            where = RowFilter(f"{name} = {value!r}", ds.field(*spelled) == scalar, (spelled[0],))
            rows = engine.matching_rows(table, where, ["message_id"])
        ids = [i for i in rows.column("message_id").to_pylist() if i]
        out.tables_searched[table] = len(ids)
        for message_id in ids:
            found.setdefault(message_id, None)
    if not out.tables_searched and not out.not_searchable:
        out.not_searchable.append(
            f"no typed body table has a field {name!r} ({len(tables)} typed table(s)): the field was searched "
            "only in the bodies still waiting in the queues"
        )
    ids = list(found)
    out.truncated = len(ids) > max_messages
    out.message_ids = ids[:max_messages]
    return out


# ------------------------------------------------------------------------- bodies in the queues


def _equal(found: Any, value: str) -> bool:
    if isinstance(found, bool):
        return str(found).lower() == value.strip().lower()
    if isinstance(found, (int, float)):
        try:
            return float(found) == float(value)
        except ValueError:
            return False
    if isinstance(found, str):
        return found == value
    return False


def _json_values(data: Any, path: list[str]) -> list[Any]:
    """The values at ``path`` (through lists, as a typed table's arrays would hold them)."""
    if isinstance(data, list):
        return [v for item in data for v in _json_values(item, path)]
    if not path:
        return [data]
    if isinstance(data, dict):
        index = _named(list(data), path[0])  # a camelCase sender's body too, as its typed column
        if index >= 0:
            return _json_values(data[list(data)[index]], path[1:])
    return []


def body_matches(body: bytes | None, name: str, value: str) -> bool:
    """Does this body (JSON, or XML) hold ``value`` in its field ``name`` (a dotted path)?"""
    if not body:
        return False
    path = field_path(name)
    text = body[3:] if body.startswith(b"\xef\xbb\xbf") else body
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _xml_matches(text, path, value)
    return any(_equal(v, value) for v in _json_values(data, path))


def _xml_matches(text: bytes, path: list[str], value: str) -> bool:
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return False

    def local(tag: str) -> str:
        return tag.rsplit("}", 1)[-1]

    level = [root]
    for part in path:
        level = [child for element in level for child in element.iter() if local(child.tag) == part]
    return any((element.text or "").strip() == value.strip() for element in level)
