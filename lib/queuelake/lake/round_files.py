"""The reader of round files: the Parquet data files a range of table versions added (what
``LakeEngine.added_files`` names), for the pipelines that consume a table by increments.

Why it exists: publish, replay and transform read exactly the files of a version range (publish's
batch keys follow their row order and row groups; replay names a row by file and row index), so
they cannot read a table through ``LakeEngine.read``. They used to open those files themselves, each
with the lake's storage internals (``storage.filesystem``, ``pyarrow.parquet``, Spark's
``.parquet(...)``). Here is the one place they do it now, so nothing outside ``lake/`` opens a lake
file or knows how object storage is reached (issue 31, "the lake port closed"); a test
(``tests/lake/test_port_closed.py``) keeps it so.

What a caller gets is pyarrow's own (a ``ParquetFile``, a ``Table``, a ``Dataset``) or Spark's
(a ``DataFrame``): the same calls as before, behind this module, so rows, their order and the
row groups are what the files hold, with no copy added.

On Spark executors: a task's Python worker never opened the lake, so it knows no storage options.
The driver resolves them (``access``: the lake root the files are under and its options, picklable)
and ships them with the task, which hands them to ``grant`` before opening any file.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from queuelake.errors import LakeError
from queuelake.lake import storage
from queuelake.lake.arrow_types import plain_table
from queuelake.lake.reading import INT96_UNIT, parquet_format

if TYPE_CHECKING:
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

Access = tuple[str, dict[str, str]]  # (a lake root, its storage options): what a Spark task needs


class LakeFile:
    """One data file opened for reading, its rows in the plain types of the lake's schemas.

    Why not pyarrow's ``ParquetFile`` itself: a file a delta-rs delete rewrote (``erase``, retention)
    declares its text as ``string_view`` in its stored Arrow schema, and most pyarrow kernels the
    pipelines use (``is_in``, ``take``, comparisons with a ``string``) have none for it: readers failed on
    such files until the next compaction (issue 57). Every read here returns ``plain_table``'s types."""

    def __init__(self, parquet: pq.ParquetFile, name: str = "a data file") -> None:
        self._parquet = parquet
        self._name = name  # the file, for a log line about a throttled read

    @property
    def metadata(self) -> pq.FileMetaData:
        return self._parquet.metadata

    def column_bytes(self, column: str) -> int:
        """A top-level column's bytes in the file, uncompressed (after its encoding: repeated values
        count once), from the footer: what the bodies stage sizes its Spark batches and samples by."""
        metadata = self._parquet.metadata
        total = 0
        for group in (metadata.row_group(i) for i in range(metadata.num_row_groups)):
            chunks = (group.column(j) for j in range(group.num_columns))
            total += sum(chunk.total_uncompressed_size for chunk in chunks if chunk.path_in_schema == column)
        return total

    @property
    def schema_arrow(self) -> pa.Schema:
        return plain_table(self._parquet.schema_arrow.empty_table()).schema

    def read(self, columns: list[str] | None = None) -> pa.Table:
        return plain_table(storage.read_retrying(lambda: self._parquet.read(columns=columns), self._name))

    def read_row_group(self, group: int, columns: list[str] | None = None) -> pa.Table:
        read = functools.partial(self._parquet.read_row_group, group, columns=columns)
        return plain_table(storage.read_retrying(read, self._name))

    def row_groups_within(self, column: str, low: Any, high: Any) -> list[int]:
        """The row groups whose statistics of ``column`` meet [low, high] (those without them too): what
        a read of the rows within that range needs."""
        metadata = self._parquet.metadata
        groups = []
        for i in range(metadata.num_row_groups):
            group = metadata.row_group(i)
            chunk = next(
                (group.column(j) for j in range(group.num_columns) if group.column(j).path_in_schema == column), None
            )
            stats = chunk.statistics if chunk is not None else None
            if stats is None or not stats.has_min_max:
                groups.append(i)
            elif _comparable(stats.min) <= high and low <= _comparable(stats.max):
                groups.append(i)
        return groups

    def read_row_groups(self, groups: list[int], columns: list[str] | None = None) -> pa.Table:
        read = functools.partial(self._parquet.read_row_groups, groups, columns=columns)
        return plain_table(storage.read_retrying(read, self._name))

    def iter_batches(self, **options: Any) -> Iterator[pa.RecordBatch]:
        batches = storage.batches_retrying(lambda: self._parquet.iter_batches(**options), self._name)
        for batch in batches:
            plain = plain_table(batch.schema.empty_table()).schema
            yield batch if plain.equals(batch.schema) else batch.cast(plain)


def _comparable(value: Any) -> Any:
    """A statistic as Python compares it with a UTC ``datetime``: a timestamp without a zone is UTC's."""
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value


def open_file(uri: str) -> LakeFile:
    """One data file (as ``added_files`` names it, local or ``s3://``), opened with the lake's storage
    options: its footer (``metadata``: rows, row groups and their statistics; ``schema_arrow``),
    ``iter_batches`` (columns, row groups, batch size), ``read_row_group`` and ``read``."""
    import pyarrow.parquet as pq

    fs, path = storage.filesystem(uri)
    opened = storage.read_retrying(
        lambda: pq.ParquetFile(path, filesystem=fs, coerce_int96_timestamp_unit=INT96_UNIT), uri
    )
    return LakeFile(opened, uri)


def read_error(exc: BaseException, where: str) -> LakeError:
    """A read of round files the store failed past its retries, said in one line as every lake read
    says it (``storage.storage_error``): pyarrow's own error names no table and gives no hint."""
    return storage.storage_error(exc, where)


def rows_in_files(uris: Sequence[str]) -> int:
    """Rows in data files, from their Parquet footers (what a write added: its rows, no Spark job)."""
    return sum(open_file(uri).metadata.num_rows for uri in uris)


def read_table(uri: str, columns: list[str]) -> pa.Table:
    """Some columns of one data file as one Arrow table (``pyarrow.parquet.read_table``)."""
    import pyarrow.parquet as pq

    fs, path = storage.filesystem(uri)
    read = functools.partial(
        pq.read_table, path, columns=columns, filesystem=fs, coerce_int96_timestamp_unit=INT96_UNIT
    )
    return plain_table(storage.read_retrying(read, uri))


def dataset(uris: Sequence[str], schema: pa.Schema) -> ds.Dataset:
    """The files as one Arrow dataset read with ``schema`` (a column a file lacks, one added to the
    table after it was written, reads as nulls, as Delta readers do; INT96 times as microseconds),
    its fragments in the order of ``uris``: to filter by row group statistics before reading any."""
    import pyarrow.dataset as ds

    fs, _ = storage.filesystem(uris[0])  # one filesystem for them all (a round's files share a root)
    paths = [storage.path_in(uri) for uri in uris]
    return ds.dataset(paths, schema=schema, format=parquet_format(), filesystem=fs)


def read_piece(piece: ds.Fragment, schema: pa.Schema, columns: list[str], uri: str) -> pa.Table:
    """One fragment of ``dataset`` (a file, or a row group of it ``split_by_row_group`` cut), its
    ``columns`` read with ``schema``; read again when a throttled store failed the read (``storage``)."""
    return storage.read_retrying(lambda: piece.to_table(schema=schema, columns=columns), uri)


def spark_frame(spark: SparkSession, uris: Sequence[str], schema: StructType) -> DataFrame:
    """The files as a Spark DataFrame with ``schema`` given (never inferred: no job to sample them);
    Spark reaches object storage through the session's S3A settings (``storage.configure_spark``)."""
    return spark.read.schema(schema).parquet(*uris)


def access(uris: Sequence[str]) -> Access | None:
    """On the driver: what a Spark task needs to open ``uris`` (the registered lake root they are
    under and its storage options); None for no files or a root with none registered."""
    return storage.registered(uris[0]) if uris else None


def grant(access: Access | None) -> None:
    """In a Spark task, before opening a file: the storage options the driver resolved (``access``)."""
    if access is not None:
        storage.register(*access)
