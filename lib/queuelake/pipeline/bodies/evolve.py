"""A typed table's schema from one increment's samples, and the change applied to the table.

The sampled schemas of each version (oldest first) are merged into the table's body columns
(``infer.merge``): each change is tagged with the version whose bodies showed it, so ``body_schema_changes``
says "``Discount`` added in 2.0.0.0". Applying: a new table is created; new top-level columns are
added (``add_columns``, a metadata commit); anything else (a field added inside a struct, a long
widened to double, a column made a string by a conflict) rewrites the table once with each old value
converted (numbers cast, structs and lists to their JSON text): Delta at protocol 1/2 cannot change a
column's type in place, and type widening would lift the protocol for every reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.types import ArrayType, DataType, MapType, NullType, StringType, StructType

from queuelake.lake.arrow_types import from_spark_schema, to_spark_schema
from queuelake.lake.port import LakeEngine
from queuelake.lake.reading import quoted_name
from queuelake.lake.stage_tables import BODY_IDENTITY
from queuelake.pipeline.bodies import parse
from queuelake.pipeline.bodies.infer import Change, finish, merge, repeated_as_arrays, wrapper_field

if TYPE_CHECKING:
    from pyspark.sql import Column


@dataclass
class Evolution:
    table: str
    schema: StructType  # the body's fields after this increment (names as in the bodies)
    existed: bool
    changes: list[tuple[str | None, Change]] = field(default_factory=list)  # (version, change)
    # a lower-case name -> its spellings the samples showed (``spelled``)
    spellings: dict[str, list[str]] = field(default_factory=dict)

    @property
    def created(self) -> bool:
        return not self.existed

    @property
    def rewrite(self) -> bool:
        return self.existed and any(c.kind != "added" or "." in c.column or "[]" in c.column for _, c in self.changes)

    @property
    def added(self) -> list[str]:
        return [c.column for _, c in self.changes if c.kind == "added" and "." not in c.column and "[]" not in c.column]


def version_key(version: str | None) -> tuple:
    if version is None:
        return (0,)
    return (1, *[(int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"[.\-]", version)])


def body_columns(lake: LakeEngine, table: str) -> StructType | None:
    """The table's body columns (after the identity columns) in the bodies' names; None: no table."""
    if not lake.exists(table):
        return None
    schema = to_spark_schema(lake.schema(table))
    return parse.to_keys(StructType([f for f in schema.fields if f.name not in BODY_IDENTITY.names]))


def plan(
    table: str, existing: StructType | None, samples: dict[str | None, tuple[StructType, list[Change]]], xml: bool
) -> Evolution:
    """``samples``: per version, the inferred schema and the conflicts among its sampled bodies."""
    schema: DataType = existing if existing is not None else StructType([])
    out = Evolution(table, StructType([]), existed=existing is not None)
    for version in sorted(samples, key=version_key):
        found, conflicts = samples[version]
        out.changes += [(version, c) for c in conflicts]
        changes: list[Change] = []
        if xml:
            found = repeated_as_arrays(found, schema)  # type: ignore[assignment]
            listed = repeated_as_arrays(schema, found)
            _listed(schema, listed, "", changes)  # the table's values become lists: a rewrite
            schema = listed
        schema = merge(schema, found, "", changes)
        if existing is not None or version != min(samples, key=version_key):
            out.changes += [(version, c) for c in changes]
    final = finish(schema)
    out.schema = final if isinstance(final, StructType) else StructType([])
    return out


def spelled(spellings: dict[str, set[str]]) -> dict[str, list[str]]:
    """The sampled bodies' names (``spellings``: a lower-case name -> the spellings seen), each with its
    spellings: one spelling alone may differ from the table's column (a camelCase increment after a
    PascalCase one). Why: a type sent in PascalCase (Newtonsoft) and camelCase
    (System.Text.Json's web defaults) has one column per name, spelled as first seen, and Spark's
    ``from_json`` matches names exactly: every camelCase row was written with its fields null, silently.
    The parse reads a field under each of its spellings (``parse.parsed``); a dictionary's keys, never
    among ``spellings`` (``infer.key_spellings``), are read as they are."""
    return {lower: sorted(seen) for lower, seen in sorted(spellings.items())}


def _names(t: DataType, into: dict[str, set[str]]) -> None:
    if isinstance(t, StructType):
        for f in t.fields:
            into.setdefault(f.name.lower(), set()).add(f.name)
            _names(f.dataType, into)
    elif isinstance(t, ArrayType):
        _names(t.elementType, into)
    elif isinstance(t, MapType):
        _names(t.valueType, into)


def _listed(old: DataType, new: DataType, path: str, changes: list[Change]) -> None:
    """A change for each field ``repeated_as_arrays`` made a list (an XML column that showed one
    element, or an XmlSerializer wrapper of one item, before a sample showed the list)."""
    if isinstance(old, StructType) and isinstance(new, StructType):
        olds = {f.name.lower(): f for f in old.fields}
        for f in new.fields:
            o = olds.get(f.name.lower())
            if o is not None:
                _listed(o.dataType, f.dataType, f"{path}.{f.name}" if path else f.name, changes)
    elif isinstance(old, ArrayType) and isinstance(new, ArrayType):
        _listed(old.elementType, new.elementType, path + "[]", changes)
    elif isinstance(new, ArrayType) and not isinstance(old, NullType):
        changes.append(Change(path, "widened", old.simpleString(), new.simpleString()))


def arrow_schema(body: StructType) -> pa.Schema:
    columns = from_spark_schema(parse.to_columns(body), all_nullable=True)
    return pa.schema([*BODY_IDENTITY, *columns])


def convert(col: Column, old: DataType, new: DataType) -> Column:
    """An old value as the new type: structs field by field (new fields null), arrays element by
    element, maps value by value (a struct to a map: its non-null fields), numbers cast, anything else
    to text (structs, lists and maps as their JSON)."""
    from pyspark.sql import functions as F

    if old == new:
        return col
    if isinstance(new, StructType) and isinstance(old, StructType):
        olds = {f.name.lower(): f for f in old.fields}
        members = []
        for f in new.fields:
            o = olds.get(f.name.lower())
            value = convert(col.getField(o.name), o.dataType, f.dataType) if o else F.lit(None).cast(f.dataType)
            members.append(value.alias(f.name))
        return F.when(col.isNull(), F.lit(None).cast(new)).otherwise(F.struct(*members))
    if isinstance(new, ArrayType) and isinstance(old, ArrayType):
        return F.transform(col, lambda x: convert(x, old.elementType, new.elementType))
    if isinstance(new, MapType) and isinstance(old, MapType):
        return F.transform_values(col, lambda _, v: convert(v, old.valueType, new.valueType))
    if isinstance(new, MapType) and isinstance(old, StructType):  # a dictionary seen as a struct before
        entries = F.array(
            *[
                F.struct(
                    F.lit(f.name).alias("key"), convert(col.getField(f.name), f.dataType, new.valueType).alias("value")
                )
                for f in old.fields
            ]
        )
        present = F.map_from_entries(F.filter(entries, lambda e: e.getField("value").isNotNull()))
        return F.when(col.isNull(), F.lit(None).cast(new)).otherwise(present)
    if isinstance(new, ArrayType) and not isinstance(old, StringType):  # one XML element: a list now
        wrapper = wrapper_field(old, new.elementType)
        if wrapper is not None:  # XmlSerializer's wrapper of one item: its item, or its items
            return convert(col.getField(wrapper.name), wrapper.dataType, new)
        return F.when(col.isNull(), F.lit(None).cast(new)).otherwise(F.array(convert(col, old, new.elementType)))
    if isinstance(new, StringType) and isinstance(old, (StructType, ArrayType, MapType)):
        return F.to_json(col)
    return col.cast(new)


def apply(lake: LakeEngine, evolution: Evolution) -> None:
    """Make the table hold ``evolution.schema`` (created, columns added, or rewritten)."""
    from pyspark.sql import functions as F

    table = evolution.table
    if evolution.created:
        lake.create_table(table, arrow_schema(evolution.schema))
        return
    if evolution.rewrite:
        version = lake.table_version(table)
        current = lake.read(table, version)
        old = to_spark_schema(lake.schema(table))
        olds = {f.name.lower(): f for f in old.fields}
        wanted = to_spark_schema(arrow_schema(evolution.schema))
        columns = []
        for f in wanted.fields:
            o = olds.get(f.name.lower())
            value = convert(F.col(quoted_name(o.name)), o.dataType, f.dataType) if o else F.lit(None).cast(f.dataType)
            columns.append(value.alias(f.name))
        lake.replace_dataframe(table, current.select(*columns), read_version=version)
        return
    if evolution.added:
        wanted_arrow = arrow_schema(evolution.schema)
        added = {parse.column_of(c).lower() for c in evolution.added}
        lake.add_columns(table, [f for f in wanted_arrow if f.name.lower() in added])
