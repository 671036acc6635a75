"""Metastore names for lake tables: ``lake.catalog`` / ``lake.schema``.

Why: notebooks and SQL users on Databricks or a Hive metastore read ``queuelake.messages``, not
``delta.`/mnt/lake/messages```. Where ``lake.schema`` is set, every lake table queuelake writes is
registered as an external table over its folder::

    CREATE TABLE IF NOT EXISTS `<catalog>`.`<schema>`.`<name>` USING delta LOCATION '<path>'

(two-part ``<schema>.<name>`` when ``lake.catalog`` is null: the session's current catalog). The data
stays where the lake keeps it; the name only points at it, so dropping the name never drops data.

Registration goes through Spark's catalog, so it needs a session whose Delta JVM classes are on the
classpath (delta-spark; Databricks always has them), whichever engine writes the table:
- delta-spark, or delta-rs with such a session: tables are registered when created or first written
  in a process, and every table already under the root when the lake is opened (a lake that existed
  before the names were configured, or tables a run without Spark wrote);
- delta-rs with a Spark session lacking the Delta classes: an error when the lake is opened. Such a
  session can never register a ``delta`` table, and silently leaving the names unset would leave SQL
  users reading a stale or missing table;
- no Spark session at all (``queuelake drain`` outside spark-submit never starts one): a warning; the
  next command that has a session (transform, publish, run) registers what the drain created.

Identifiers are validated (letters, digits, ``_``, ``-``) and backquoted; the location is a quoted
string literal. Registration is idempotent and remembered per process, so it costs one SQL statement per
table per process. A name that already points at another folder is reported with a warning and left
as it is (it may be another deployment's; we never re-point a name someone else owns).
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote

from queuelake.config_sections import METASTORE_NAME
from queuelake.errors import LakeError
from queuelake.report import log

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from queuelake.config_sections import LakeConfig
    from queuelake.lake.files import StagedFiles
    from queuelake.lake.port import JournalLake, LakeEngine

_IDENTIFIER = METASTORE_NAME


def quote_identifier(name: str, what: str) -> str:
    """``name`` backquoted, after checking it is a plain identifier (what: for the error message)."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise LakeError(f"{what} {name!r} cannot be a metastore name: use letters, digits, '_' and '-'")
    return "`" + name + "`"


def sql_string(text: str) -> str:
    """A Spark SQL string literal (backslash escapes, as Spark's parser reads them)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _same_location(a: str, b: str) -> bool:
    def norm(uri: str) -> str:
        uri = unquote(uri).rstrip("/")  # metastores may report a location percent-encoded
        uri = re.sub(r"^file:(//)?", "", uri)
        return re.sub(r"^s3a?://", "s3://", uri)

    return norm(a) == norm(b)


class Registrar:
    """Registers lake tables by name in one Spark session's catalog, once per table per process."""

    def __init__(self, spark: SparkSession, catalog: str | None, schema: str) -> None:
        self.spark = spark
        self.catalog = catalog
        self.schema = schema
        parts = ([quote_identifier(catalog, "lake.catalog")] if catalog else []) + [
            quote_identifier(schema, "lake.schema")
        ]
        self._namespace = ".".join(parts)
        self._done: set[str] = set()
        self._schema_ready = False
        self._guard = threading.Lock()

    def name(self, table: str) -> str:
        """The quoted name a table is registered under."""
        return f"{self._namespace}.{quote_identifier(table, 'lake table')}"

    def display(self, table: str) -> str:
        """The name as users type it (``queuelake.messages``)."""
        return ".".join(p for p in (self.catalog, self.schema, table) if p)

    def done(self, table: str) -> bool:
        """True once ``table`` was registered in this process."""
        return table in self._done

    def ensure(self, table: str, location: str) -> None:
        """Register ``table`` (an existing Delta table at ``location``) unless done in this process."""
        with self._guard:
            if table in self._done:
                return
            name = self.name(table)
            try:
                if not self._schema_ready:
                    self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {self._namespace}")
                    self._schema_ready = True
                self.spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING delta LOCATION {sql_string(location)}")
                detail = self.spark.sql(f"DESCRIBE DETAIL {name}").first()
                if detail is None:
                    raise LakeError(f"DESCRIBE DETAIL {name} returned no row")
                registered = detail["location"]
            except Exception as exc:  # Spark's AnalysisException & co: say which name and why
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise LakeError(
                    f"lake table {table}: cannot register it as {self.display(table)} "
                    f"(lake.catalog/lake.schema): {first[:300]}"
                ) from None
            if not _same_location(str(registered), location):
                log.warning(
                    "lake table %s: the name %s already points at %s, not at this lake's %s; left as it is",
                    table,
                    self.display(table),
                    registered,
                    location,
                )
            else:
                log.info("lake table %s registered as %s", table, self.display(table))
            self._done.add(table)


def registrar_for(config: LakeConfig, engine_name: str, spark: SparkSession | None) -> Registrar | None:
    """The registrar the config asks for, None when it asks for none or (warned) cannot have one now.
    Raises LakeError when the session can never register a Delta table (see the module docstring)."""
    schema: str | None = getattr(config, "schema", None)
    if not schema:
        return None
    catalog = getattr(config, "catalog", None)
    shown = ".".join(p for p in (catalog, schema) if p)
    if spark is None:
        log.warning(
            "lake.catalog/lake.schema (%s): no Spark session in this run (%s engine), so tables are not "
            "registered by name now; the next run with a session (transform, publish, run) registers them",
            shown,
            engine_name,
        )
        return None
    from queuelake.spark import has_delta_jvm

    if not has_delta_jvm(spark):
        raise LakeError(
            f"lake.catalog/lake.schema ({shown}) registers tables through Spark's Delta catalog, and this "
            "Spark session has no Delta JVM classes: add the Delta package (queuelake spark-packages) "
            "or remove lake.catalog/lake.schema"
        )
    return Registrar(spark, catalog, schema)


class RegisteringLake:
    """A LakeEngine that also registers every table it creates or writes (see the module docstring).

    Why a wrapper in the port rather than code in each engine: both engines (and the delta-rs journal
    engine of a delta-spark lake) get the same behaviour, and the pipelines never see it. Everything
    else is the wrapped engine's, unchanged.
    """

    def __init__(self, engine: LakeEngine, registrar: Registrar) -> None:
        self.inner = engine
        self.registrar = registrar

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def register(self, table: str) -> None:
        if self.registrar.done(table):  # the common case: no log lookup per write
            return
        if self.inner.exists(table):
            self.registrar.ensure(table, self.inner.path(table))

    def register_existing(self) -> None:
        """Register every table already under the root (when the engine can list them)."""
        tables = getattr(self.inner, "tables", None)
        if tables is None:
            return
        for table in tables():
            self.register(table)

    def create_table(self, table: str, schema: pa.Schema, partition_by: list[str] | None = None) -> None:
        self.inner.create_table(table, schema, partition_by)
        self.register(table)

    def append(self, table: str, data: pa.Table, app_id: str, version: int) -> bool:
        landed = self.inner.append(table, data, app_id, version)
        self.register(table)
        return landed

    def append_dataframe(self, table: str, df: DataFrame, app_id: str, version: int) -> bool:
        landed = self.inner.append_dataframe(table, df, app_id, version)
        self.register(table)
        return landed

    def commit_staged(self, table: str, staged: StagedFiles, app_id: str, version: int, verify: bool = False) -> bool:
        landed = cast("JournalLake", self.inner).commit_staged(table, staged, app_id, version, verify)
        self.register(table)
        return landed

    def commit_staged_group(self, table: str, batches: list[tuple[StagedFiles, str, int]]) -> int:
        landed = cast("JournalLake", self.inner).commit_staged_group(table, batches)
        self.register(table)
        return landed


def with_names(engine: LakeEngine, registrar: Registrar | None, existing: bool = True) -> LakeEngine:
    """``engine`` registering its tables through ``registrar`` (unchanged when there is none)."""
    if registrar is None:
        return engine
    lake = RegisteringLake(engine, registrar)
    if existing:
        lake.register_existing()
    return lake  # type: ignore[return-value]
