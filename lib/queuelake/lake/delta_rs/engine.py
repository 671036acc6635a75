"""The Rust engine: Delta tables written with ``deltalake`` (delta-rs), read by Spark as Parquet.

Why: a drained batch is already Arrow on the driver; ``write_deltalake`` lands it ~6x faster than a
Spark round trip (design section 5), and no Delta JVM jars are needed. DataFrames (transform outputs)
go through the Python data source in ``delta_spark/datasource.py`` so that executors write the files.

Guarantees the pipelines rely on:

- ``append``/``append_dataframe`` are one Delta commit each, carrying the application transaction
  (app_id, version); they return False and write nothing when app_id already committed >= version.
- Thread-safe: calls for the same (table, app_id) are serialised in this process, so check-then-write is
  atomic here; different app ids append concurrently (deltalake retries blind-append conflicts). Across
  processes a concurrent commit with the same app id makes one side fail its commit; we reload and
  return False when the other side committed our version or later.
- Tables stay at protocol 1/2 (no table features): timestamps are stored tz-aware UTC.

Here: creating and evolving tables, both appends, Spark reads and maintenance. What both engines read
from the log is ``common.py``'s, the drain's staged writes ``staging.py``'s, the commit loop
``commits.py``'s.
"""

from __future__ import annotations

import math
import os
import uuid
from typing import TYPE_CHECKING, Any, Literal, cast

import pyarrow as pa

from queuelake.errors import LakeError
from queuelake.lake import catalogue, deletes, storage
from queuelake.lake.arrow_types import conform, from_spark_schema, lake_field, lake_schema
from queuelake.lake.common import DEFAULT_RETENTION_HOURS, check_unchanged, landed
from queuelake.lake.delta_rs import row_groups
from queuelake.lake.delta_rs.commits import KILL_ENV, WRITE_ID_KEY, exactly_once
from queuelake.lake.delta_rs.log_head import read_table_head
from queuelake.lake.delta_rs.staging import StagedWrites
from queuelake.lake.files import COMPRESSION
from queuelake.lake.marks import check_writable, description_for, engine_of
from queuelake.lake.reading import read_spark
from queuelake.lake.transient import repeated
from queuelake.report import log
from queuelake.stopping import interruptible

if TYPE_CHECKING:
    from deltalake import DeltaTable, WriterProperties
    from pyspark.sql import DataFrame, SparkSession

    from queuelake.lake.deletes import Deleted, Reached, RowFilter

_COMMIT_ATTEMPTS = 20


# Tables this engine creates write a checkpoint every 10 commits, not Delta's default 100. Why:
# deltalake loads a table, and every commit, by replaying the JSON log from the last checkpoint,
# and a drain commits once per batch. Measured (bench/commits.py, 300 commits of one staged file
# each): 50 ms of CPU per commit on average at 100, 17-20 ms at 10, checkpoints included. A drain's
# group commits, which replay nothing, checkpoint every 100 and at the run's end (``append_log``).
CHECKPOINT_INTERVAL = 10
CHECKPOINT_PROPERTY = "delta.checkpointInterval"


# the codec a compaction with its own row-group size writes: the journal's own writes' (deltalake names
# codecs in capitals)
COMPACTED_CODEC = cast(Literal["SNAPPY"], COMPRESSION.upper())
# what deltalake's compaction writes when given no writer properties
DEFAULT_COMPACTED_CODEC: Literal["ZSTD"] = "ZSTD"


class DeltaRsEngine(StagedWrites):
    """LakeEngine over deltalake; ``spark`` is needed only for ``read`` and ``append_dataframe``. The
    basics and Delta log reads are ``common.EngineBase``'s, the staged writes ``staging.StagedWrites``'s."""

    name = "delta-rs"
    deletes_by_keys = True  # a MERGE of the keys (``deletes.delete``)

    def __init__(
        self, root: str, spark: SparkSession | None = None, storage_options: dict[str, str] | None = None
    ) -> None:
        super().__init__(root, spark, storage_options)

    # ------------------------------------------------------------ basics (the rest: common.EngineBase)

    def _spark(self, df: DataFrame | None = None) -> SparkSession:
        if df is not None:
            return df.sparkSession
        if self.spark is not None:
            return self.spark
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is None:
            raise LakeError("reading a lake table as a DataFrame needs a Spark session")
        return active

    # ------------------------------------------------------------ create / evolve

    def create_table(self, table: str, schema: pa.Schema, partition_by: list[str] | None = None) -> None:
        """Create if missing. When it exists: refuse another engine's table or other partitioning.
        Two creators racing is fine: the loser finds the winner's table and checks it the same way."""
        from deltalake import CommitProperties, DeltaTable

        partition_by = list(partition_by or [])
        schema = lake_schema(schema)
        missing = [c for c in partition_by if c not in schema.names]
        if missing:
            raise LakeError(f"lake table {table}: partition column(s) {', '.join(missing)} not in the schema")
        head = read_table_head(self.path(table))
        if head is not None:  # it exists, on the local disk: checked from its log's head, no load
            check_writable(table, self.path(table), engine_of(head.configuration, head.description), self.name)
            self._check_partitioning(table, head.partition_columns, partition_by)
            self.keep_loaded(table, head)
            return
        dt = self._load(table)
        if dt is None:
            try:
                # No commit retries: deltalake 1.6.6 would "resolve" a lost creation race by committing a
                # second CREATE TABLE as version 1 (new table id and schema). Losing must fail instead.
                DeltaTable.create(
                    self.path(table),
                    schema,
                    mode="error",
                    partition_by=partition_by or None,
                    name=table,
                    description=description_for(self.name),
                    configuration={CHECKPOINT_PROPERTY: str(CHECKPOINT_INTERVAL)},
                    storage_options=self._options(),
                    commit_properties=CommitProperties(max_commit_retries=0),
                )
                return
            except Exception as exc:
                dt = self._load(table)
                if dt is None:
                    raise LakeError(f"lake table {table}: cannot create it at {self.path(table)}: {exc}") from exc
        self._check_writable(table, dt)
        self._check_partitioning(table, list(dt.metadata().partition_columns), partition_by)
        self.keep_loaded(table, dt)

    @staticmethod
    def _check_partitioning(table: str, existing: list[str], partition_by: list[str]) -> None:
        if partition_by and existing != partition_by:
            raise LakeError(f"lake table {table} exists partitioned by {existing or 'nothing'}, not by {partition_by}")

    def add_columns(self, table: str, fields: list[pa.Field]) -> None:
        """Add nullable columns; columns already there with the same type are skipped (idempotent)."""
        from deltalake.schema import Field

        dt = self._require(table)
        self._check_writable(table, dt)
        current = {f.name.lower(): f for f in pa.schema(dt.schema().to_arrow())}
        new = []
        for field in fields:
            wanted = lake_field(field, nullable=True)
            have = current.get(wanted.name.lower())
            if have is None:
                new.append(Field.from_arrow(wanted))
            elif not have.type.equals(wanted.type) and not _same_delta_type(have.type, wanted.type):
                raise LakeError(f"lake table {table}: column {wanted.name} exists as {have.type}, not {wanted.type}")
        if new:
            dt.alter.add_columns(new)

    # ------------------------------------------------------------ append

    def append(self, table: str, data: pa.Table, app_id: str, version: int) -> bool:
        """One commit of ``data`` with (app_id, version); False, writing nothing, if already committed."""
        from deltalake import CommitProperties, Transaction, WriterProperties, write_deltalake

        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        group_rows = catalogue.row_group_rows(table)  # as maintain writes the table (``LakeTable.row_group_rows``)
        properties: dict[str, Any] = (
            {"writer_properties": WriterProperties(max_row_group_size=group_rows)} if group_rows else {}
        )

        write_id = uuid.uuid4().hex  # every attempt's: one whose reply was lost is told by it (``exactly_once``)

        def write(dt: DeltaTable, attempt: int) -> None:
            # Conformed on every attempt: a concurrent add_columns changes the target schema. A failed
            # attempt's files stay behind as orphans (vacuum removes them).
            rows = conform(data, pa.schema(dt.schema().to_arrow()), table)
            write_deltalake(
                dt,
                rows,
                mode="append",
                **properties,
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(app_id, version)],
                    custom_metadata={WRITE_ID_KEY: write_id},
                ),
            )

        with self._lock(table, app_id):
            if self._load(table) is None:
                self.create_table(table, lake_schema(data.schema, all_nullable=True))
            try:
                return exactly_once(
                    self.path(table),
                    table,
                    app_id,
                    version,
                    self.name,
                    write,
                    storage_options=self.storage_options,
                    attempts=_COMMIT_ATTEMPTS,
                    write_id=write_id,
                )
            except OSError as exc:  # a store that reset the commit's PUT: one line, a LakeError (a review)
                raise storage.storage_error(exc, f"lake table {table} at {self.path(table)}") from None

    def append_dataframe(self, table: str, df: DataFrame, app_id: str, version: int) -> bool:
        """Executors write Parquet files, one commit (in ``DataSourceWriter.commit``) with (app_id, version).

        The transaction version is checked before the DataFrame is computed, so a batch that already
        landed costs nothing. Always the data-source path: collecting to the driver would break the
        bounded-memory guarantee for large DataFrames and is not faster for small ones (bench/lake.py).
        """
        import json

        from queuelake.lake.delta_spark.datasource import FORMAT, SECRET_OPTIONS_KEY, encode_schema, register

        spark = self._spark(df)
        with self._lock(table, app_id):
            dt = self._load(table)
            if dt is None:
                self.create_table(table, from_spark_schema(df.schema, all_nullable=True))
                dt = self._require(table)
            self._check_writable(table, dt)
            committed = dt.transaction_version(app_id)
            if committed is not None and committed >= version:
                return False
            target = pa.schema(dt.schema().to_arrow())
            # Fail on the driver, before any task runs, when columns do not fit the table.
            conform(from_spark_schema(df.schema, all_nullable=True).empty_table(), target, table)
            register(spark)  # and activates it for this thread: a pool thread's JVM thread may have none
            write_id = uuid.uuid4().hex
            since = dt.version()
            writer = (
                df.write.format(FORMAT)
                .mode("append")
                .option("table_uri", self.path(table))
                .option("table", table)
                .option("schema", encode_schema(target))
                .option("partition_by", json.dumps(list(dt.metadata().partition_columns)))
                .option("app_id", app_id)
                .option("version", str(version))
                .option("write_id", write_id)
                .option("engine", self.name)
            )
            if self.storage_options:
                # executors' Python workers do not share this process's registry. The key says
                # "secret": Spark redacts such options wherever it shows a plan (spark.redaction.regex)
                writer = writer.option(SECRET_OPTIONS_KEY, json.dumps(self.storage_options))
            if os.environ.get(KILL_ENV):
                writer = writer.option("test_kill_pids", str(os.getpid()))
            writer.save()
            return landed(self._require(table), since, WRITE_ID_KEY, write_id)

    def replace_dataframe(self, table: str, df: DataFrame, read_version: int | None = None) -> None:
        """Executors write the rows' Parquet files, as ``append_dataframe``'s do, then the driver makes one
        overwrite commit of those files and the new schema; the table keeps its mark, and its application
        transactions stay in the log. Why not ``toArrow()`` and ``write_deltalake`` on the driver: a
        column's type change on a typed table of 2.4 GB ran the driver's JVM out of heap at every run,
        and every transform reading typed tables failed with it (a review): memory follows a batch."""
        import json

        from queuelake.lake.delta_spark.datasource import FORMAT, SECRET_OPTIONS_KEY, encode_schema, register

        dt = self._require(table)
        self._check_writable(table, dt)
        spark = self._spark(df)
        target = lake_schema(from_spark_schema(df.schema, all_nullable=True), all_nullable=True)
        with self._lock(table, ""):
            register(spark)  # and activates it for this thread (``append_dataframe``)
            writer = (
                df.write.format(FORMAT)
                .mode("overwrite")
                .option("replace", "true")
                .option("table_uri", self.path(table))
                .option("table", table)
                .option("schema", encode_schema(target))
                .option("partition_by", json.dumps(list(dt.metadata().partition_columns)))
                .option("write_id", uuid.uuid4().hex)
                .option("engine", self.name)
            )
            if read_version is not None:
                writer = writer.option("read_version", str(read_version))
            if self.storage_options:
                writer = writer.option(SECRET_OPTIONS_KEY, json.dumps(self.storage_options))
            check_unchanged(table, read_version, dt.version())  # before a whole rewrite is written for nothing
            try:
                writer.save()
            except Exception:
                # the commit's refusal arrives wrapped in Spark's error of the data source: said as itself
                check_unchanged(table, read_version, self._require(table).version())
                raise

    # ------------------------------------------------------------ read

    def read(self, table: str, version: int | None = None) -> DataFrame:
        """Spark reads the Parquet files the Delta log lists for that version with its own reader (column
        pruning, predicate pushdown); partition values come from the log, not from folder names."""
        return read_spark(self._spark(), self._require(table, version))

    # ------------------------------------------------------------ deletes (lake/deletes.py)

    def count_rows(self, table: str, where: RowFilter) -> Reached:
        return deletes.reached(self._load(table), where)

    def matching_rows(self, table: str, where: RowFilter, columns: list[str], version: int | None = None) -> pa.Table:
        return deletes.matching(self._load(table, version), where, columns)

    def delete_rows(self, table: str, where: RowFilter) -> Deleted:
        self._check_writable(table)
        properties = self._rewrite_properties(table, self._require(table))
        metadata = {WRITE_ID_KEY: uuid.uuid4().hex}
        return deletes.delete(lambda: self._require(table), table, where, metadata, properties)

    def purge_removed(self, table: str) -> int:
        dt = self._require(table)
        self._check_writable(table, dt)
        return len(deletes.purge_removed(dt))

    # ------------------------------------------------------------ maintain

    def _rewrite_properties(self, table: str, dt: DeltaTable) -> WriterProperties | None:
        """How a compaction or a delete writes a table's rows anew: its own row groups' rows (fewer where
        the rows are wide: a row group past 2 GiB of one column cannot be read back), and the codec. A
        delete left deltalake's defaults: an erase of 3 ids rewrote three journal files as one row group
        of 404,229 rows (571 MB), and each `find` or replay read of it took 2 GB (a review)."""
        from deltalake import WriterProperties

        own_rows = catalogue.row_group_rows(table)
        rows = row_groups.bounded_rows(dt, own_rows)
        # the codec said too: WriterProperties without one writes UNCOMPRESSED (a review: the journal grew
        # 3.4 times at its first maintain); the journal's own writes' codec (``files.COMPRESSION``), and
        # deltalake's own compaction codec for the tables it sizes itself
        codec = COMPACTED_CODEC if own_rows else DEFAULT_COMPACTED_CODEC
        bounded = own_rows or rows < row_groups.DEFAULT_ROWS
        return WriterProperties(max_row_group_size=rows, compression=codec) if bounded else None

    def maintain(self, table: str, retention_hours: float = DEFAULT_RETENTION_HOURS) -> dict[str, Any]:
        """Compact small files, then vacuum removed files and orphans (files no commit names, e.g. from a
        killed writer) older than ``retention_hours``. Keep the retention longer than the longest write:
        an in-flight write's files are orphans until it commits."""
        dt = self._require(table)
        self._check_writable(table, dt)
        interval_set = repeated(lambda: self._set_checkpoint_interval(table, self._require(table)), table)
        files_before = len(dt.file_uris())
        properties = self._rewrite_properties(table, dt)
        # each from a fresh load, again when the store dropped or throttled it (``transient.repeated``):
        # deltalake retries neither as a whole, and behind S3's bursts a maintain failed here (a review)
        # in a thread the main one waits on (``stopping.interruptible``): a stop signal is taken at once, not
        # when deltalake's native compaction of a big table returns (11.5 s after a SIGTERM on a 1M-row
        # journal, minutes on a larger one: past a scheduler's grace, a review). Left behind, it commits
        # nothing: its files are orphans for the next vacuum, as after a kill
        compacted = repeated(
            lambda: interruptible(
                lambda: self._require(table).optimize.compact(writer_properties=properties),
                still=f"maintain {table}: compacting",
            ),
            f"{table}'s compaction",
        )
        hours = max(0, math.ceil(retention_hours))
        vacuumed = repeated(
            lambda: interruptible(
                lambda: self._require(table).vacuum(
                    retention_hours=hours,
                    dry_run=False,
                    enforce_retention_duration=hours >= DEFAULT_RETENTION_HOURS,
                    full=True,
                ),
                still=f"maintain {table}: vacuuming",
            ),
            f"{table}'s vacuum",
        )
        dt = self._require(table)
        return {
            "table": table,
            "engine": self.name,
            "version": dt.version(),
            "files_before": files_before,
            "files_after": len(dt.file_uris()),
            "files_compacted": int(compacted.get("numFilesRemoved", 0)),
            "files_written": int(compacted.get("numFilesAdded", 0)),
            "files_vacuumed": len(vacuumed),
            "checkpoint_interval": dt.metadata().configuration.get(CHECKPOINT_PROPERTY),
            "checkpoint_interval_set": interval_set,
        }

    def _set_checkpoint_interval(self, table: str, dt: DeltaTable) -> bool:
        """Give a table created before queuelake set ``CHECKPOINT_INTERVAL`` (or by another tool) that
        interval, unless it has one of its own: its commits otherwise replay up to 100 JSON log entries
        each. A metadata commit: concurrent appends see a conflict and retry (``exactly_once``)."""
        if CHECKPOINT_PROPERTY in dt.metadata().configuration:
            return False
        dt.alter.set_table_properties({CHECKPOINT_PROPERTY: str(CHECKPOINT_INTERVAL)}, raise_if_not_exists=False)
        log.info("lake table %s: set %s=%d", table, CHECKPOINT_PROPERTY, CHECKPOINT_INTERVAL)
        return True


def _same_delta_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Arrow types that map to the same Delta type (e.g. map entry names differ between producers)."""
    from deltalake import Schema

    try:
        return Schema.from_arrow(pa.schema([("x", a)])).to_json() == Schema.from_arrow(pa.schema([("x", b)])).to_json()
    except Exception:
        return False
