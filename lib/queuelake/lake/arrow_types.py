"""Arrow types a lake table may hold, and conforming incoming data to a table's schema.

Why this exists: a Delta table's protocol follows its types. A naive timestamp column makes delta-rs
(and Spark) add the ``timestampNtz`` feature, which lifts the table to protocol 3/7 and locks out older
readers. So every timestamp is stored as ``timestamp('us', tz='UTC')``; naive timestamps are taken as UTC
(the queue databases store UTC wall clocks: ``Expires``, ``Due``, header times) and converted, never
stored naive. Types Delta has no equivalent for are refused with the column's name.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.errors import LakeError

UTC_TIMESTAMP = pa.timestamp("us", tz="UTC")

_UNSIGNED = {
    pa.uint8(): pa.int16(),
    pa.uint16(): pa.int32(),
    pa.uint32(): pa.int64(),
    pa.uint64(): pa.int64(),  # a safe cast refuses values past int64
}


def lake_type(t: pa.DataType, where: str) -> pa.DataType:
    """The Delta-compatible Arrow type for ``t`` (recursively); raises LakeError naming ``where``."""
    if pa.types.is_timestamp(t) or pa.types.is_date64(t):
        return UTC_TIMESTAMP if pa.types.is_timestamp(t) else pa.date32()
    if pa.types.is_dictionary(t):
        return lake_type(t.value_type, where)
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if t in _UNSIGNED:
        return _UNSIGNED[t]
    if pa.types.is_map(t):
        return pa.map_(lake_type(t.key_type, f"{where} key"), lake_type(t.item_type, f"{where} value"))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or _is_list_view(t):
        return pa.list_(pa.field("element", lake_type(t.value_type, f"{where} element"), nullable=True))
    if pa.types.is_struct(t):
        return pa.struct([lake_field(t.field(i), f"{where}.") for i in range(t.num_fields)])
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise LakeError(f"column {where}: decimal precision {t.precision} exceeds Delta's 38")
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_null(t):
        raise LakeError(f"column {where} has no type (only nulls); give it one, e.g. pa.array([None], pa.string())")
    if (
        pa.types.is_time(t)
        or pa.types.is_duration(t)
        or pa.types.is_interval(t)
        or pa.types.is_float16(t)
        or pa.types.is_union(t)
    ):
        raise LakeError(f"column {where}: Arrow type {t} has no Delta equivalent")
    return t


def as_string(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Text ``values`` as plain ``string``, what every comparison of ours is written against. Why: a
    file a delta-rs delete rewrote (``erase``, retention) stores text as ``string_view``, and pyarrow has
    no ``is_in`` or ``equal`` kernel between ``string_view`` and ``string`` (``find`` failed on such
    files until the next compaction). Other types are returned as they are."""
    if pa.types.is_string_view(values.type) or pa.types.is_large_string(values.type):
        return values.cast(pa.string())
    return values


def plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with view and large variants replaced by the plain types the lake's schemas declare
    (``string_view`` -> ``string``, ``binary_view`` -> ``binary``, list views -> ``list``), at any depth;
    every other type, times included, as it is. Why: see ``as_string``; a rewritten file may hold
    ``map<string_view, string_view>`` headers too."""
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_map(t):
        return pa.map_(plain_type(t.key_type), pa.field(t.item_field.name, plain_type(t.item_type)))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or _is_list_view(t):
        return pa.list_(t.value_field.with_type(plain_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(plain_type(t.field(i).type)) for i in range(t.num_fields)])
    return t


def plain_table(data: pa.Table) -> pa.Table:
    """``data`` with ``plain_type`` columns (no copy when there is nothing to change)."""
    schema = pa.schema([f.with_type(plain_type(f.type)) for f in data.schema], metadata=data.schema.metadata)
    return data if schema.equals(data.schema) else data.cast(schema)


def _is_list_view(t: pa.DataType) -> bool:
    checks = [getattr(pa.types, "is_list_view", None), getattr(pa.types, "is_large_list_view", None)]
    return any(check is not None and check(t) for check in checks)


def lake_field(field: pa.Field, prefix: str = "", nullable: bool | None = None) -> pa.Field:
    """``field`` with a lake type; ``nullable`` overrides the field's own flag when given."""
    return pa.field(
        field.name,
        lake_type(field.type, prefix + field.name),
        nullable=field.nullable if nullable is None else nullable,
    )


def lake_schema(schema: pa.Schema, all_nullable: bool = False) -> pa.Schema:
    """The schema a new table gets. ``all_nullable`` for tables created from data: a later batch that
    happens to hold a null must not be refused because the first batch had none."""
    seen: set[str] = set()
    for name in schema.names:
        if name.lower() in seen:
            raise LakeError(f"column {name!r} appears twice (Delta column names are case-insensitive)")
        seen.add(name.lower())
    return pa.schema([lake_field(f, nullable=True if all_nullable else None) for f in schema])


def conform(data: pa.Table, target: pa.Schema, table: str) -> pa.Table:
    """``data`` cast to the table's schema, in the table's column order.

    Missing nullable columns are filled with nulls (rows written before ``add_columns`` and producers
    that lag behind a schema change both stay valid); unknown columns are refused, because silently
    dropping data is worse than failing the batch.
    """
    by_lower = {name.lower(): name for name in data.column_names}
    unknown = sorted(set(by_lower) - {f.name.lower() for f in target})
    if unknown:
        raise LakeError(
            f"table {table}: column(s) {', '.join(by_lower[u] for u in unknown)} are not in the table; "
            "add them first with add_columns"
        )
    columns = []
    for field in target:
        name = by_lower.get(field.name.lower())
        if name is None:
            if not field.nullable:
                raise LakeError(f"table {table}: required column {field.name} is missing from the data")
            columns.append(pa.nulls(data.num_rows, field.type))
            continue
        column = data.column(name)
        if not column.type.equals(field.type):
            column = _cast(column, field.type, table, field.name)
        if not field.nullable and column.null_count:
            raise LakeError(f"table {table}: column {field.name} is not nullable but the data holds nulls")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=target)


def _cast(column: pa.ChunkedArray, to: pa.DataType, table: str, name: str) -> pa.ChunkedArray:
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    try:
        # A naive timestamp cast to tz=UTC keeps its value: the wall clock is read as UTC, as documented.
        return pc.cast(column, to, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise LakeError(f"table {table}: column {name} of type {column.type} cannot be stored as {to}: {exc}") from None


def naive_timestamp_columns(schema: pa.Schema) -> list[str]:
    """Top-level columns holding naive timestamps (converted to UTC on write); for log messages."""
    return [f.name for f in schema if pa.types.is_timestamp(f.type) and f.type.tz is None]


def to_spark_schema(schema: pa.Schema):  # -> pyspark.sql.types.StructType
    """The Spark schema of a lake table: tz-aware timestamps become Spark's TimestampType."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def from_spark_schema(spark_schema, all_nullable: bool = True) -> pa.Schema:
    """The lake schema for a Spark DataFrame's schema; TimestampNTZ becomes tz-aware UTC."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return lake_schema(to_arrow_schema(spark_schema), all_nullable=all_nullable)
