"""Reading one version of a Delta table from the files its log lists, as Arrow or as a Spark DataFrame.

Why not ``DeltaTable.to_pyarrow_table()``: with deltalake 1.6.6 + pyarrow 26 a process that called it
aborts at interpreter exit ("terminate called without an active exception", delta-rs #2184), which would
turn a successful CLI run into exit code 134. pyarrow's own filesystem has no such problem. Spark gets
the same file list so that it uses its native Parquet reader (pruning, pushdown), no Delta jars needed.

Partition columns are not stored in the data files (Delta convention): their values come from the log.
"""

from __future__ import annotations

import datetime as dt_
import decimal
import functools
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as ds

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

# The unit INT96 timestamps are read in, everywhere pyarrow opens a lake file. Spark writes timestamps as
# Parquet INT96 unless told otherwise (``spark.sql.parquet.outputTimestampType``), and pyarrow reads INT96
# in nanoseconds, whose range is 1677-2262: a ``deliver_at`` of 9999-12-31 in an outbound table Spark wrote
# wrapped round to a time in the past and was sent at once. Microseconds hold every time Spark does.
INT96_UNIT = "us"


def parquet_format() -> ds.ParquetFileFormat:
    """The Parquet format every Arrow dataset over lake files is read with (``INT96_UNIT``)."""
    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit=INT96_UNIT))


def table_schema(dt: DeltaTable) -> pa.Schema:
    return pa.schema(dt.schema().to_arrow())


def local_paths(dt: DeltaTable, uris: list[str]) -> list[str]:
    """deltalake's file URIs with the table's root as its real path. deltalake percent-encodes the root
    (``/tmp/a%20b/...``, ``s3://bucket/my%20lake/...``) but not the folders below it, whose names in
    storage are already Hive-escaped (``q=x%20y``); pyarrow and Spark take paths literally. A root with a
    space failed every reader of typed tables, ``erase`` and ``maintain`` on a local lake, and on S3
    every command: the encoded key matched no configured root, so its storage options were not used
    (found by a review)."""
    base = dt.table_uri
    prefix = (base[len("file://") :] if base.startswith("file://") else base).rstrip("/") + "/"
    root = unquote(prefix)
    if root == prefix:
        return uris
    return [root + u[len(prefix) :] if u.startswith(prefix) else u for u in uris]


def data_file_uris(dt: DeltaTable, paths: list[str]) -> list[str]:
    """The log's add-action ``paths`` as pyarrow opens them. A path in the log is a URI relative to the
    table (``p=Sales%20Team/...``) whose decoded text is the folder in storage; a local table's root is
    made a path, not a ``file://`` URI, which pyarrow would decode once more: a Hive-escaped partition
    value (``p=10%3A00``) was opened as ``p=10:00``, and ``maintain`` failed on such tables (a review)."""
    base = dt.table_uri.rstrip("/")
    if base.startswith("file://"):
        base = base[len("file://") :]
    return local_paths(dt, [p if "://" in p else f"{base}/{unquote(p)}" for p in paths])


def files_by_partition(dt: DeltaTable) -> list[tuple[dict[str, str | None], list[str]]]:
    """The data files of the loaded version grouped by partition values ({} when unpartitioned)."""
    partition_by = list(dt.metadata().partition_columns)
    if not partition_by:
        uris = local_paths(dt, dt.file_uris())
        return [({}, uris)] if uris else []
    groups = []
    for values in dt.partitions():
        # '' selects a null partition value (deltalake's convention for file_uris filters).
        predicate = [(col, "=", "" if values.get(col) is None else values[col]) for col in partition_by]
        uris = local_paths(dt, dt.file_uris(file_pruning_predicate=predicate))
        if uris:
            groups.append(({col: values.get(col) for col in partition_by}, uris))
    return groups


def parse_partition_value(text: str | None, type_: pa.DataType) -> Any:
    """A partition value from the log (a string) as a Python value of the column's type."""
    if text is None:
        return None
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return text
    if pa.types.is_boolean(type_):
        return text.lower() == "true"
    if pa.types.is_integer(type_):
        return int(text)
    if pa.types.is_floating(type_):
        return float(text)
    if pa.types.is_decimal(type_):
        return decimal.Decimal(text)
    if pa.types.is_date(type_):
        return dt_.date.fromisoformat(text[:10])
    if pa.types.is_timestamp(type_):
        value = dt_.datetime.fromisoformat(text.replace("Z", "+00:00"))
        return value if value.tzinfo else value.replace(tzinfo=dt_.timezone.utc)
    raise ValueError(f"unsupported partition column type {type_}")


def _filesystem_paths(uris: list[str]) -> tuple[Any, list[str]]:
    """One filesystem for a table's files (with the lake's storage options: object storage) and the
    files' paths inside it."""
    from queuelake.lake.storage import filesystem as storage_filesystem
    from queuelake.lake.storage import path_in

    filesystem, first = storage_filesystem(uris[0])
    return filesystem, [first] + [path_in(u) for u in uris[1:]]


def read_arrow(dt: DeltaTable, columns: list[str] | None = None) -> pa.Table:
    """The loaded version as one Arrow table with the table's schema (columns added later read null)."""
    from queuelake.lake.storage import read_retrying

    schema = table_schema(dt)
    partition_by = list(dt.metadata().partition_columns)
    wanted = list(columns) if columns is not None else schema.names
    unknown = [c for c in wanted if c not in schema.names]
    if unknown:
        raise KeyError(f"no such column(s): {', '.join(unknown)}")
    out_schema = pa.schema([schema.field(c) for c in wanted])
    data_schema = pa.schema([f for f in schema if f.name not in partition_by])
    pieces = []
    for values, uris in files_by_partition(dt):
        filesystem, paths = _filesystem_paths(uris)
        dataset = ds.dataset(paths, schema=data_schema, format=parquet_format(), filesystem=filesystem)
        columns = [c for c in wanted if c not in partition_by]
        data = read_retrying(functools.partial(dataset.to_table, columns=columns), dt.table_uri)
        arrays = []
        for field in out_schema:
            if field.name in partition_by:
                value = parse_partition_value(values[field.name], field.type)
                arrays.append(pa.array([value] * data.num_rows, field.type))
            else:
                arrays.append(data.column(field.name))
        pieces.append(pa.Table.from_arrays(arrays, schema=out_schema))
    if not pieces:
        return out_schema.empty_table()
    return pa.concat_tables(pieces)


def quoted_name(name: str) -> str:
    """A column name as Spark's ``col()`` and SQL take it whatever it holds: backquoted, a backquote
    in it doubled (a body's property named with one failed its type's every increment: a review)."""
    return "`" + name.replace("`", "``") + "`"


def read_spark(spark: SparkSession, dt: DeltaTable) -> DataFrame:
    """The loaded version as a Spark DataFrame over its Parquet files (an empty one when it has none).

    Spark's file reader globs each path: table roots containing ``[]{}*?`` are not supported.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from queuelake.lake.arrow_types import to_spark_schema

    schema = to_spark_schema(table_schema(dt))
    partition_by = list(dt.metadata().partition_columns)
    data_schema = StructType([f for f in schema.fields if f.name not in partition_by])
    frames = []
    for values, uris in files_by_partition(dt):
        frame = spark.read.schema(data_schema).parquet(*uris)
        for f in schema.fields:
            if f.name in partition_by:
                frame = frame.withColumn(f.name, F.lit(values[f.name]).cast(f.dataType))
        frames.append(frame.select(*[F.col(quoted_name(name)) for name in schema.fieldNames()]))
    if not frames:
        return spark.createDataFrame([], schema)
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def read_table(table_uri: str, version: int | None = None, columns: list[str] | None = None) -> pa.Table:
    """A Delta table (or one version) as Arrow, without ``DeltaTable.to_pyarrow_table`` (see above)."""
    from queuelake.lake.storage import delta_table, options_for

    options = options_for(table_uri) or None  # the lake's storage options, when its engine is open
    return read_arrow(delta_table(table_uri, version, options), columns)
