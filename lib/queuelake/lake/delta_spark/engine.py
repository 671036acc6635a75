"""The JVM engine: Spark's own ``delta`` format (delta-spark), for clusters that ship the Delta jars
(Databricks, spark-submit with ``--packages``, see ``queuelake spark-packages``; locally the jars that
``bash jvm/fetch-jars.sh`` fetched). Thin on purpose: Delta Spark writes, compacts and vacuums.

Needs a session with the Delta jars on the classpath and, for the SQL/DeltaTable calls,
``spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension`` and
``spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog``. We never download
jars at run time.

Idempotency: Delta's ``txnAppId``/``txnVersion`` writer options skip a write whose version was already
committed for that app id; we check first (to return False cheaply) and tag each write with
``userMetadata`` to tell whether our commit landed. Read-only metadata (the last committed version of an
app id, which delta-spark has no API for; the table's version, marks, partition columns and history) is
read from the log with deltalake: no Spark job per check. Those reads are ``common.EngineBase``'s,
shared with the Rust engine.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from queuelake.errors import LakeError
from queuelake.lake.arrow_types import conform, from_spark_schema, lake_field, lake_schema, to_spark_schema
from queuelake.lake.common import DEFAULT_RETENTION_HOURS, EngineBase, check_unchanged, landed
from queuelake.lake.marks import ENGINE_PROPERTY, description_for
from queuelake.lake.reading import quoted_name
from queuelake.lake.storage import StoredFile, configure_spark, data_file_count, delete_stored, stored_files
from queuelake.report import log

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from queuelake.lake.deletes import Deleted, Reached, RowFilter


_ATTEMPTS = 20


def spark_condition(sql: str) -> str:
    """A ``RowFilter``'s SQL (DataFusion's dialect, as PostgreSQL: double-quoted identifiers) in Spark
    SQL, where double quotes would make text literals: identifiers in backticks, literals re-escaped."""
    import sqlglot

    return str(sqlglot.transpile(sql, read="postgres", write="spark")[0])


class DeltaSparkEngine(EngineBase):
    """LakeEngine over delta-spark; same contract and thread-safety as ``DeltaRsEngine``."""

    name = "delta-spark"
    _spark: SparkSession | None = None

    def __init__(
        self,
        root: str,
        spark: SparkSession | None,
        storage_options: dict[str, str] | None = None,
        start_spark: Callable[[], SparkSession] | None = None,
    ) -> None:
        # object storage (lake.storage_options): s3a settings on the session for Delta Spark, and the
        # same options for the deltalake metadata reads and for pyarrow readers of the root
        if spark is None and start_spark is None:
            raise LakeError("lake.engine delta-spark needs a Spark session")
        self._start_spark = start_spark
        self._starting = threading.Lock()
        super().__init__(root, spark, storage_options)

    @property
    def spark(self) -> SparkSession:
        """The session, started on first use when the engine was given a way to start one: what reads the
        log and lists files (deltalake, pyarrow) needs none, and a command whose tables need no Spark work
        starts none."""
        if self._spark is None:
            with self._starting:
                if self._spark is None and self._start_spark is not None:
                    spark = self._start_spark()
                    configure_spark(spark, self.storage_options)
                    self._spark = spark
        if self._spark is None:
            raise LakeError("lake.engine delta-spark needs a Spark session")
        return self._spark

    @spark.setter
    def spark(self, session: SparkSession | None) -> None:
        self._spark = session

    @property
    def started_spark(self) -> SparkSession | None:
        return self._spark

    # ------------------------------------------------------------ basics (the rest: common.EngineBase)

    def _delta(self, table: str):  # -> delta.tables.DeltaTable
        from delta.tables import DeltaTable

        if not self.exists(table):
            raise LakeError(f"lake table {table!r} does not exist at {self.path(table)}")
        return DeltaTable.forPath(self.spark, self.path(table))

    # ------------------------------------------------------------ create / evolve

    def create_table(self, table: str, schema: pa.Schema, partition_by: list[str] | None = None) -> None:
        from delta.tables import DeltaTable

        partition_by = list(partition_by or [])
        with self._lock(table, ""):
            if not self.exists(table):
                builder = (
                    DeltaTable.createIfNotExists(self.spark)
                    .location(self.path(table))
                    .addColumns(to_spark_schema(lake_schema(schema)))
                    .property(ENGINE_PROPERTY, self.name)
                    .comment(description_for(self.name))
                )
                if partition_by:
                    builder = builder.partitionedBy(*partition_by)
                try:
                    builder.execute()
                except Exception:
                    if not self.exists(table):  # else another process created it first: checked below
                        raise
        self._check_writable(table)
        existing = self._require(table).metadata().partition_columns
        if partition_by and list(existing) != partition_by:
            raise LakeError(f"lake table {table} exists partitioned by {existing or 'nothing'}, not by {partition_by}")

    def add_columns(self, table: str, fields: list[pa.Field]) -> None:
        self._check_writable(table)
        current = {f.name.lower() for f in self.spark.read.format("delta").load(self.path(table)).schema.fields}
        new = [lake_field(f, nullable=True) for f in fields if f.name.lower() not in current]
        if not new:
            return
        columns = ", ".join(
            f"{quoted_name(f.name)} {f.dataType.simpleString()}" for f in to_spark_schema(pa.schema(new)).fields
        )
        self.spark.sql(f"ALTER TABLE delta.{quoted_name(self.path(table))} ADD COLUMNS ({columns})")

    # ------------------------------------------------------------ append

    def append(self, table: str, data: pa.Table, app_id: str, version: int) -> bool:
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        with self._lock(table, app_id):
            if not self.exists(table):
                self.create_table(table, lake_schema(data.schema, all_nullable=True))
            if self._already(table, app_id, version):
                return False
            current = self.spark.read.format("delta").load(self.path(table)).schema
            target = from_spark_schema(current, all_nullable=False)
            # One file per batch, as delta-rs writes it (createDataFrame slices by default parallelism).
            df = self.spark.createDataFrame(conform(data, target, table)).coalesce(1)
            return self._write(table, df, app_id, version)

    def append_dataframe(self, table: str, df: DataFrame, app_id: str, version: int) -> bool:
        with self._lock(table, app_id):
            if not self.exists(table):
                self.create_table(table, from_spark_schema(df.schema, all_nullable=True))
            if self._already(table, app_id, version):
                return False
            return self._write(table, _utc_timestamps(df), app_id, version)

    def _already(self, table: str, app_id: str, version: int) -> bool:
        self._check_writable(table)
        committed = self.last_version(table, app_id)
        return committed is not None and committed >= version

    def _write(self, table: str, df: DataFrame, app_id: str, version: int) -> bool:
        write_id = f"queuelake.writeId={uuid.uuid4().hex}"
        since = self.table_version(table) or 0
        try:
            (
                df.write.format("delta")
                .mode("append")
                .option("txnAppId", app_id)
                .option("txnVersion", version)
                .option("userMetadata", write_id)
                .save(self.path(table))
            )
        except Exception:
            # Another writer (another process: same-process writers share the lock) committed this
            # (app_id, version) first; Delta's conflict check refuses ours (ConcurrentTransactionException).
            committed = self.last_version(table, app_id)
            if committed is not None and committed >= version:
                return False
            raise
        # Delta also skips the write silently when the (app_id, version) was committed meanwhile.
        return landed(self._require(table), since, "userMetadata", write_id)

    def replace_dataframe(self, table: str, df: DataFrame, read_version: int | None = None) -> None:
        self._check_writable(table)
        with self._lock(table, ""):
            check_unchanged(table, read_version, self.table_version(table))  # Delta's own overwrite starts later
            (
                _utc_timestamps(df)
                .write.format("delta")
                .mode("overwrite")
                .option("overwriteSchema", "true")
                .save(self.path(table))
            )

    # ------------------------------------------------------------ deletes (erase, retention: the typed tables)

    def count_rows(self, table: str, where: RowFilter) -> Reached:
        from queuelake.lake import deletes

        return deletes.reached(self._load(table), where)  # a read of the log and the files: any table

    def matching_rows(self, table: str, where: RowFilter, columns: list[str], version: int | None = None) -> pa.Table:
        from queuelake.lake import deletes

        return deletes.matching(self._load(table, version), where, columns)

    def delete_rows(self, table: str, where: RowFilter) -> Deleted:
        """Delete ``where``'s rows with delta-spark's ``DeltaTable.delete``, one commit, retried when a
        concurrent commit conflicts; figures from the commit's ``operationMetrics``."""
        from queuelake.lake import deletes

        self._check_writable(table)
        condition = spark_condition(where.sql)
        for attempt in range(1, _ATTEMPTS + 1):
            dt = self._require(table)
            if deletes.reached(dt, where).rows == 0:
                return deletes.Deleted(0, 0, 0, dt.version(), None, attempt)
            try:
                with self._lock(table, ""):
                    self._delta(table).delete(condition)
            except Exception as exc:  # noqa: BLE001 - Delta's ConcurrentModificationException family: retry
                if "Concurrent" in type(exc).__name__ or "Concurrent" in str(exc)[:300]:
                    time.sleep(min(0.05 * 2**attempt, 2.0))
                    continue
                raise LakeError(f"lake table {table}: delete where {condition} failed: {exc}") from exc
            # the newest commit read from the log with deltalake: Spark's ``history(1)`` was a job of its own
            commit = self._require(table).history(limit=1)[0]
            if commit.get("operation") != deletes.DELETE_OPERATION:
                raise LakeError(f"lake table {table}: the newest commit is {commit.get('operation')}, not our delete")
            metrics = commit.get("operationMetrics") or {}
            read = commit.get("readVersion")
            return deletes.Deleted(
                rows=int(metrics.get("numDeletedRows", 0)),
                files_removed=int(metrics.get("numRemovedFiles", 0)),
                files_rewritten=int(metrics.get("numAddedFiles", 0)),
                read_version=int(read) if read is not None else None,
                version=int(commit["version"]),
                attempts=attempt,
            )
        raise LakeError(f"lake table {table}: the delete where {condition} kept conflicting ({_ATTEMPTS} attempts)")

    def purge_removed(self, table: str) -> int:
        """Delete the removed files from storage now, as ``VACUUM ... RETAIN 0 HOURS`` would: every data
        file the table's current version does not name (removed by a commit, or an orphan), deleted on the
        driver from one listing of the table (``_unreferenced``). Why not the VACUUM: it is 9 Spark jobs
        however little it deletes (5.5 s of a one-row erase's 22 s on a 2-core machine). When the listing
        holds what the driver cannot judge (a live file under another spelling, a deletion vector), the
        VACUUM runs, Delta's retention check off for the call. Either way files no commit names go too,
        which is safe only on tables written in one commit per write (the typed tables, the records):
        never on the journal, whose drain stages files before it commits them (the journal is delta-rs's,
        whose purge deletes only the log's tombstones)."""
        from queuelake.lake import catalogue, record_tables

        if table == record_tables.MESSAGES.name or catalogue.engine_for(table) is not None:
            raise LakeError(f"lake table {table}: delta-spark never vacuums a table with staged writes (the journal)")
        self._check_writable(table)
        with self._lock(table, ""):
            doomed = _unreferenced(
                stored_files(self.path(table), self.storage_options), _live_paths(self._require(table))
            )
            if doomed is not None:
                delete_stored(self.path(table), doomed, self.storage_options)
                return sum(1 for path in doomed if StoredFile(path, None).is_data)
            return self._vacuum_now(table)

    def _vacuum_now(self, table: str) -> int:
        """``VACUUM ... RETAIN 0 HOURS`` (Delta's retention check off for the call, restored after); the
        files it deleted: those stored before less those after (a listing on the driver, as ``maintain``
        counts), not a ``DRY RUN`` first: that listed the table in Spark twice."""
        key = "spark.databricks.delta.retentionDurationCheck.enabled"
        previous = self.spark.conf.get(key, "true") or "true"
        location = f"delta.{quoted_name(self.path(table))}"
        self.spark.conf.set(key, "false")
        try:
            with _without_adaptive_plans(self.spark):
                stored = data_file_count(self.path(table), self.storage_options)
                self.spark.sql(f"VACUUM {location} RETAIN 0 HOURS").collect()
                doomed = stored - data_file_count(self.path(table), self.storage_options)
        finally:
            self.spark.conf.set(key, previous)
        return max(0, doomed)

    # ------------------------------------------------------------ reads

    def read(self, table: str, version: int | None = None) -> DataFrame:
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(self.path(table))

    # ------------------------------------------------------------ maintain

    def maintain(self, table: str, retention_hours: float = DEFAULT_RETENTION_HOURS) -> dict[str, Any]:
        self._check_writable(table)
        files_before = len(self._require(table).file_uris())
        if files_before > 1:
            metrics = self._delta(table).optimize().executeCompaction().first()["metrics"]
        else:  # one file (or none) has nothing to be compacted with: not a compaction's jobs to find it so
            metrics = {"numFilesRemoved": 0, "numFilesAdded": 0}
        dt = self._require(table)
        stored = stored_files(self.path(table), self.storage_options)
        vacuumed = 0
        if _vacuum_would_delete(stored, _live_paths(dt), retention_hours):
            key = "spark.databricks.delta.retentionDurationCheck.enabled"
            previous = self.spark.conf.get(key, "true") or "true"
            if retention_hours < DEFAULT_RETENTION_HOURS:
                self.spark.conf.set(key, "false")
            try:
                with _without_adaptive_plans(self.spark):
                    self._delta(table).vacuum(float(retention_hours))
            finally:
                self.spark.conf.set(key, previous)
            stored_data = sum(1 for file in stored if file.is_data)
            vacuumed = stored_data - data_file_count(self.path(table), self.storage_options)
            dt = self._require(table)
        else:
            log.debug("maintain %s: nothing to vacuum (no file outside the table's live ones is due)", table)
        return {
            "table": table,
            "engine": self.name,
            "version": dt.version(),
            "files_before": files_before,
            "files_after": len(dt.file_uris()),
            "files_compacted": int(metrics["numFilesRemoved"]),
            "files_written": int(metrics["numFilesAdded"]),
            "files_vacuumed": max(0, vacuumed),
        }


def _live_paths(dt: Any) -> set[str]:
    """The paths of the table's live files, below its root, as its log names them."""
    return set(pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist())


def _unreferenced(stored: list[StoredFile], live: set[str]) -> list[str] | None:
    """What ``VACUUM ... RETAIN 0 HOURS`` deletes from a table stored as ``stored`` whose current version
    names ``live``: every data file that is not a live one, with its hidden checksum (a local store's
    ``.part-….parquet.crc``). None when that cannot be judged from names alone: a live file not stored
    under the name the log gives (an escaped partition value), or a stored file that is neither Parquet
    nor hidden (a deletion vector, which the log names inside an add action): the VACUUM decides then."""
    if not live <= {file.path for file in stored}:
        return None
    doomed: list[str] = []
    for file in stored:
        if file.path in live or file.is_hidden:
            continue
        if not file.is_data:
            return None
        doomed.append(file.path)
    gone = set(doomed)
    for file in stored:  # ``dir/.name.crc`` goes with ``dir/name``
        folder, _, name = file.path.rpartition("/")
        if file.is_hidden and name.endswith(".crc"):
            data = f"{folder}/{name[1:-4]}" if folder else name[1:-4]
            if data in gone:
                doomed.append(file.path)
    return doomed


def _vacuum_would_delete(stored: list[StoredFile], live: set[str], retention_hours: float) -> bool:
    """Whether a ``VACUUM ... RETAIN retention_hours HOURS`` has anything to delete: a stored file that no
    live file is (removed by a commit, or an orphan) written before the retention's cutoff. Why ask: Delta's
    VACUUM is 9 Spark jobs even when it deletes nothing (11.6 s of a maintain on a 2-core machine, for a
    table of one file), and a maintain right after a compaction finds every removed file still in its
    retention. Hidden files (a local store's ``.crc`` checksums, which go with their file) are not asked
    about; a file the store gives no time for counts as due, as does a path the log names otherwise (an
    escaped partition value): when in doubt, the VACUUM runs."""
    cutoff = datetime.now(timezone.utc) - timedelta(hours=retention_hours)
    for file in stored:
        if file.path in live or file.is_hidden:
            continue
        if file.modified is None or file.modified < cutoff:
            return True
    return False


ADAPTIVE = "spark.sql.adaptive.enabled"


@contextlib.contextmanager
def _without_adaptive_plans(spark: SparkSession) -> Iterator[None]:
    """Adaptive query execution off for the call (restored after). Why: a VACUUM is a few joins of the
    listed files and the log's; adaptive execution runs each of its query stages as a job of its own, 21
    Spark jobs for a table of two files against 9 without, a fixed cost of every erase's purge and every
    maintain (the listing and the deletes are the same either way). The commands that vacuum (erase,
    maintain) run no other Spark work beside it."""
    previous = spark.conf.get(ADAPTIVE, None)
    spark.conf.set(ADAPTIVE, "false")
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(ADAPTIVE)
        else:
            spark.conf.set(ADAPTIVE, previous)


def _utc_timestamps(df: DataFrame) -> DataFrame:
    """TimestampNTZ columns as tz-aware timestamps, their wall clock read as UTC (keeps protocol 1/2)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType

    session_tz = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    columns = []
    for f in df.schema.fields:
        if isinstance(f.dataType, TimestampNTZType):
            shifted = F.convert_timezone(F.lit("UTC"), F.lit(session_tz), F.col(quoted_name(f.name)))
            columns.append(shifted.cast("timestamp").alias(f.name))
        else:
            if "TimestampNTZ" in repr(f.dataType):
                raise LakeError(f"column {f.name}: nested TimestampNTZ is not supported; use TimestampType")
            columns.append(F.col(quoted_name(f.name)))
    return df.select(*columns)
