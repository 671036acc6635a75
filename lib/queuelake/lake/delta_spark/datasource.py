"""The Spark path of the Rust engine: a Python data source whose executors write Parquet files into the
table folder and whose ``commit()`` commits them all in ONE Delta transaction with the application
transaction (deltalake's ``create_write_transaction``).

Why a data source and not ``toArrow()`` + ``write_deltalake`` on the driver: the DataFrame may be larger
than the driver's memory; executors stream their partitions to files with bounded memory. Facts this
relies on (measured, design section 5): ``commit()`` runs in a Python worker next to the driver, not in
the driver process; batches arrive as Arrow with TimestampType as ``timestamp[us, tz=UTC]`` and
TimestampNTZType naive (we store both tz-aware UTC, keeping the table at protocol 1/2).

The driver (``DeltaRsEngine.append_dataframe``) creates the table first, so ``commit()`` appends; with
the option ``replace`` (``DeltaRsEngine.replace_dataframe``: a typed table whose column changed type) it
makes one overwrite commit of the files and the new schema instead.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from queuelake.lake.arrow_types import conform
from queuelake.lake.files import FileSink, WrittenFile, commit_files, delete_files, replace_files

FORMAT = "queuelake_deltars"
# The lake's storage options (JSON) for the executors' Python workers. The name contains "secret" so
# that Spark redacts the value wherever it prints options (spark.redaction.regex matches it).
SECRET_OPTIONS_KEY = "secret_storage_options"


def encode_schema(schema: pa.Schema) -> str:
    """Data source options are strings: the table's Arrow schema travels base64-encoded IPC."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


@dataclass
class FilesWritten(WriterCommitMessage):
    files: list[WrittenFile]


@dataclass
class _Options:
    table_uri: str
    table: str
    schema: pa.Schema
    partition_by: list[str]
    app_id: str
    version: int
    write_id: str
    engine: str
    kill_pids: list[int]
    storage_options: dict[str, str]
    replace: bool = False  # one overwrite commit of the rows and the schema (``replace_files``)
    read_version: int | None = None  # the version the replacing rows were read at (``replace_files``)

    @classmethod
    def parse(cls, options: dict[str, str]) -> _Options:
        get = {k.lower(): v for k, v in options.items()}.get
        replace = (get("replace") or "").lower() == "true"
        keys = ("table_uri", "table", "schema", "write_id") + (() if replace else ("app_id", "version"))
        missing = [k for k in keys if not get(k)]
        if missing:
            raise ValueError(f"{FORMAT}: missing option(s) {', '.join(missing)}")

        def need(key: str) -> str:
            return get(key) or ""  # checked just above

        return cls(
            table_uri=need("table_uri"),
            table=need("table"),
            schema=decode_schema(need("schema")),
            partition_by=json.loads(get("partition_by") or "[]"),
            app_id=need("app_id"),
            version=int(get("version") or 0),
            write_id=need("write_id"),
            engine=get("engine") or "delta-rs",
            kill_pids=[int(p) for p in (get("test_kill_pids") or "").split(",") if p],
            storage_options=json.loads(get(SECRET_OPTIONS_KEY) or "{}"),
            replace=replace,
            read_version=int(need("read_version")) if get("read_version") else None,
        )


class DeltaRsDataSource(DataSource):
    """Write-only: ``df.write.format("queuelake_deltars").options(...).mode("append").save()``.

    Options: table_uri, table, schema (``encode_schema``), partition_by (JSON list), app_id, version,
    write_id (unique per call, recorded in commitInfo), engine, and ``SECRET_OPTIONS_KEY`` (the lake's
    storage options as JSON, for object storage). Use ``DeltaRsEngine.append_dataframe``
    rather than calling this directly: it checks the transaction version and creates the table first.
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def writer(self, schema, overwrite: bool) -> DeltaRsWriter:
        options = _Options.parse(dict(self.options))
        if overwrite != options.replace:
            raise ValueError(f"{FORMAT}: mode overwrite goes with the option replace=true, and only with it")
        return DeltaRsWriter(options)


class DeltaRsWriter(DataSourceArrowWriter):
    def __init__(self, options: _Options) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FilesWritten:
        o = self.options
        sink = FileSink(
            o.table_uri,
            o.schema,
            o.partition_by,
            prefix=f"part-{o.write_id}-{uuid.uuid4().hex[:12]}",
            storage_options=o.storage_options,
        )
        try:
            for batch in iterator:
                sink.write(conform(pa.Table.from_batches([batch]), o.schema, o.table))
            return FilesWritten(sink.close())
        except BaseException:
            sink.abort()
            raise

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        o = self.options
        files = [f for m in messages if isinstance(m, FilesWritten) for f in m.files]
        if o.replace:
            replace_files(
                o.table_uri, o.table, files, o.schema, o.partition_by, o.write_id, o.storage_options, o.read_version
            )
            return
        commit_files(
            o.table_uri,
            o.table,
            files,
            o.app_id,
            o.version,
            o.write_id,
            o.engine,
            o.kill_pids,
            storage_options=o.storage_options,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete the files written, unless a commit naming them may have landed: a commit whose reply
        the store lost failed ``commit`` though the log names its files, and deleting them broke the
        table for good (a review). Kept, they are orphans at worst, which vacuum removes."""
        o = self.options
        written = [f for m in messages if isinstance(m, FilesWritten) for f in m.files]
        if written and not _surely_not_committed(o):
            return
        delete_files(o.table_uri, written, o.storage_options)


def _surely_not_committed(o: _Options) -> bool:
    """Whether none of the table's recent commits carries this write's id (False when the log cannot be
    read: unsure, the files stay)."""
    from queuelake.lake.delta_rs.commits import WRITE_ID_KEY
    from queuelake.lake.storage import delta_table

    try:
        dt = delta_table(o.table_uri, None, o.storage_options)
        return not any(commit.get(WRITE_ID_KEY) == o.write_id for commit in dt.history(limit=100))
    except Exception:  # noqa: BLE001 - the store still failing: keep the files
        return False


# One registration at a time in this process: Spark's check-then-register is not atomic (see below).
_REGISTERING = threading.Lock()


def register(spark) -> None:
    """Register the data source on ``spark`` and make it the calling thread's active session: safe from
    any number of threads and as often as called (each write calls it).

    Why the lock and the activation: Spark (4.1) refuses a registration with DATA_SOURCE_ALREADY_EXISTS
    when the session being registered on does not hold the name yet but the JVM thread's *active*
    session does, or when a second thread registers the same name between Spark's own check and put.
    ``bodies`` writes its types' tables from a thread pool; each thread's JVM thread may carry another
    active session than the one it writes with. So the target session is activated first, in the same
    critical section, and a refusal is accepted only when the target session does hold the source."""
    with _REGISTERING:
        activate(spark)
        try:
            spark.dataSource.register(DeltaRsDataSource)
        except Exception as exc:  # noqa: BLE001 - pyspark's AnalysisException; its class moved across versions
            if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc) or not registered(spark):
                raise


def registered(spark) -> bool:
    """Whether ``spark``'s own session (not the thread's active one) holds the data source."""
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    return bool(manager.dataSourceExists(FORMAT))


def activate(spark) -> None:
    """Make ``spark`` the JVM thread's active session before a write through the data source.

    Why: Spark looks a Python data source up in the active session of the JVM thread that runs the
    write, and a Python thread other than the main one gets a JVM thread with none (pyspark 4.1: a
    write from a thread pool fails with "data source not found"). Cheap: one py4j call."""
    jvm = spark._jvm
    companion = jvm.org.apache.spark.sql.classic.SparkSession  # Spark 4; Spark 3.5 has no classic
    try:
        companion.setActiveSession(spark._jsparkSession)
    except Exception:  # noqa: BLE001 - Spark 3.5: the session class is org.apache.spark.sql.SparkSession
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
