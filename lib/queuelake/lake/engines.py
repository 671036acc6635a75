"""Which engine: ``open_lake`` builds the one config asks for, ``table_engine`` the one the table
catalogue fixes for a table (``journal_engine``: the journal's).

Why a module of its own: the interface (``port.py``) is what every pipeline imports, and it must not
know its implementations. The choice between them, and the metastore names wrapped around the chosen
one (``metastore.py``), live here: the one module that builds engines.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from queuelake.errors import LakeError
from queuelake.lake import catalogue, record_tables
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.lake.delta_spark.engine import DeltaSparkEngine
from queuelake.lake.metastore import registrar_for, with_names
from queuelake.lake.port import JournalLake, LakeEngine
from queuelake.lake.storage import loads_reused as loads_reused  # for commands that read only (cli)
from queuelake.report import log
from queuelake.spark import delta_session_problem, has_delta_jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from queuelake.config_sections import LakeConfig


def without_spark(config: LakeConfig) -> LakeEngine:
    """The lake as delta-rs reads and writes it, no Spark session started: what the commands that read
    the Delta log and files on the driver open (find, where, failures, health, conversation, ...). Its
    line names the configured engine too: a delta-spark lake read so was announced as ``lake.engine
    delta-rs`` (a review)."""
    import dataclasses

    return open_lake(dataclasses.replace(config, engine="delta-rs"), configured=config.engine)


def delta_rs_may_write(setting: str, lake: LakeEngine, tables: list[str]) -> bool:
    """Whether ``lake``, the session-less one (``without_spark``), may write every one of ``tables``:
    ``setting`` (``lake.engine``) leaves the engine to queuelake (``auto``, or delta-rs itself) and none
    of them was made by delta-spark (an engine refuses the other's tables: ``marks.py``)."""
    if setting not in ("auto", "delta-rs") or lake.name != DeltaRsEngine.name:
        return False
    return all(not lake.exists(table) or lake.written_by(table) != DeltaSparkEngine.name for table in tables)


def open_lake(
    config: LakeConfig,
    spark: SparkSession | None = None,
    configured: str | None = None,
    start_spark: Callable[[], SparkSession] | None = None,
) -> LakeEngine:
    """The engine config asks for. ``auto``: a table that exists is written by the engine that made
    it (``PerTableLake``); a new one by delta-spark when its JVM classes are present, else delta-rs.
    ``start_spark``, with no ``spark`` and ``lake.engine: delta-spark``: the session is started when the
    engine first needs one (``DeltaSparkEngine``), and checked then; a maintain or an erase that finds
    nothing for Spark to do starts none (5 s or more of a command that did nothing)."""
    engine = config.engine
    problem = delta_session_problem(spark) if spark is not None and engine in ("auto", "delta-spark") else None
    if engine == "auto":
        engine = "delta-spark" if spark is not None and problem is None else "delta-rs"
        if spark is not None and problem is not None and has_delta_jvm(spark):
            _say_once(f"lake.engine auto: {problem}: new tables by delta-rs")
    if engine == "delta-spark":
        if spark is None and start_spark is not None and getattr(config, "schema", None):
            spark = start_spark()  # tables registered by name (lake.schema): through the session, from the start
            problem = delta_session_problem(spark)
        if spark is None and start_spark is None:
            raise LakeError("lake.engine delta-spark needs a Spark session")
        if config.engine == "delta-spark" and problem is not None:
            raise _no_delta(problem)
        later = None if spark is not None or start_spark is None else _checked(start_spark)
        lake: LakeEngine = DeltaSparkEngine(config.root, spark, config.storage_options, start_spark=later)
    else:
        lake = DeltaRsEngine(config.root, spark, config.storage_options)
    if config.engine == "auto":
        rust = lake if lake.name == "delta-rs" else DeltaRsEngine(config.root, spark, config.storage_options)
        lake = PerTableLake(lake, rust)  # type: ignore[assignment]
    _announce(config.root, configured or config.engine, lake.name, configured is not None)
    # metastore names (lake.catalog/lake.schema): tables also registered by name (lake/metastore.py)
    return with_names(lake, registrar_for(config, lake.name, spark))


def _no_delta(problem: str) -> LakeError:
    """Said before anything is written: without the classes, the first Delta call failed with a Py4J
    "'JavaPackage' object is not callable" or a SQL parse error at VACUUM; without the settings, with
    CANNOT_CREATE_DATA_SOURCE_TABLE at its first table."""
    return LakeError(
        f"lake.engine: delta-spark, and {problem}: put Delta on Spark's classpath and turn it on "
        "(`queuelake spark-packages` prints spark-submit's --packages, its summary the two --conf "
        "settings; a local session takes jars from QUEUELAKE_DELTA_JARS or spark.jars)"
    )


def _checked(start_spark: Callable[[], SparkSession]) -> Callable[[], SparkSession]:
    """``start_spark``, its session checked for Delta as an eager one is (``_no_delta``)."""

    def start() -> SparkSession:
        spark = start_spark()
        problem = delta_session_problem(spark)
        if problem is not None:
            raise _no_delta(problem)
        return spark

    return start


_ANNOUNCED: set[tuple[str, str]] = set()
_SAID: set[str] = set()


def _say_once(warning: str) -> None:
    if warning not in _SAID:
        _SAID.add(warning)
        log.warning("%s", warning)


def _announce(root: str, engine: str, chosen: str, without_spark: bool = False) -> None:
    """Say which lake a command uses, a local one by its absolute path, and the engine that writes its
    new tables: once per process and engine. Why the path: a relative ``lake.root`` is relative to the
    folder the command runs in, and a scheduler started elsewhere began another journal there without a
    word (found by a review). Why per engine: with ``auto``, a run's steps before its Spark session
    (the drain) write with delta-rs and the later ones with delta-spark, and the one line said delta-rs."""
    where = root if "://" in root else os.path.abspath(root)
    if (where, chosen) not in _ANNOUNCED:
        _ANNOUNCED.add((where, chosen))
        said = chosen if engine == chosen else f"{engine}: new tables by {chosen}"
        if without_spark and engine != chosen:
            said = f"{engine}; read here by {chosen}, without Spark"
        log.info("lake: %s (lake.engine %s)", where, said)


# the LakeEngine methods that write the table named by their first argument: they must use the
# engine that made it. Reads stay with the run's engine: either engine reads any Delta table, and
# delta-spark reads the journal natively (with data skipping) where the Python data source would not.
_WRITES = frozenset(
    {
        "create_table",
        "append",
        "append_dataframe",
        "replace_dataframe",
        "stage",
        "discard_staged",
        "check_stageable",
        "commit_staged",
        "add_columns",
        "maintain",
        "delete_rows",
        "purge_removed",
    }
)


class PerTableLake:
    """``lake.engine: auto`` decided per table: one that exists is written by the engine recorded on
    it, whatever this run's Spark has; a new one by this run's choice (``default``).

    Why: ``auto`` picked one engine per run, from whether Spark had the Delta JVM classes. Adding the
    Delta package to a spark-submit that ran without it turned every table the earlier runs had made
    into "created by delta-rs, this job writes with delta-spark", and the job failed. A table made by
    delta-spark cannot be written in a run without the JVM classes: that says what to change before
    anything is written (reading it works: reads stay with the run's engine)."""

    def __init__(self, default: LakeEngine, rust: LakeEngine) -> None:
        self.default = default
        self.rust = rust
        self.name = default.name
        self.root = default.root
        self._recorded: dict[str, str] = {}

    def engine_for(self, table: str) -> LakeEngine:
        """The engine that writes ``table``."""
        recorded = self._recorded.get(table) or self._read_mark(table)
        if recorded is None or recorded == self.default.name:
            return self.default  # a new (or unmarked) table: this run's choice
        if recorded == self.rust.name:
            return self.rust
        raise LakeError(
            f"lake table {table!r} was made by {recorded} and this run has no Delta JVM classes "
            "(lake.engine: auto chose delta-rs): put Delta on Spark's classpath (`queuelake "
            "spark-packages` prints spark-submit's --packages; a local session takes jars from "
            "QUEUELAKE_DELTA_JARS or spark.jars)"
        )

    def _read_mark(self, table: str) -> str | None:
        """The engine recorded on an existing table, remembered: a table never changes engine."""
        try:
            recorded = self.rust.written_by(table) if self.rust.exists(table) else None
        except Exception:  # noqa: BLE001 - a log delta-rs cannot read (a delta-spark feature): the run's choice
            return None
        if recorded is not None:
            self._recorded[table] = recorded
        return recorded

    def tables(self) -> list[str]:
        return self.default.tables()

    def __getattr__(self, attr: str) -> Any:
        if attr in _WRITES:
            return lambda table, *args, **kwargs: getattr(self.engine_for(table), attr)(table, *args, **kwargs)
        return getattr(self.default, attr)


def journal_engine(lake: LakeEngine) -> JournalLake:
    """The engine that writes the ``messages`` journal: always delta-rs (``tables.MESSAGES.engine``;
    why: ``table_entry.DELTA_RS``), the one that implements the staged writes (``port.JournalLake``)."""
    engine = table_engine(lake, record_tables.MESSAGES.name)
    if engine.name != DeltaRsEngine.name:  # the catalogue fixes delta-rs: only a changed catalogue gets here
        raise LakeError(f"lake table {record_tables.MESSAGES.name}: staged writes need delta-rs, not {engine.name}")
    return cast("JournalLake", engine)  # DeltaRsEngine, or a wrapper that passes its methods through


def table_engine(lake: LakeEngine, table: str) -> LakeEngine:
    """The engine that writes ``table``: the one the catalogue fixes for it (``tables.engine_for``),
    else ``lake`` itself. The catalogue fixes only delta-rs (an engine every run can build)."""
    wanted = catalogue.engine_for(table)
    if wanted is None or wanted == lake.name:
        return lake
    if wanted != DeltaRsEngine.name:
        raise LakeError(f"lake table {table}: the catalogue names {wanted}, and only delta-rs can be fixed")
    # the lake's session if it has started one: a delta-spark lake that starts its own on first use must
    # not start it for this (the journal's Spark reads find the active session, ``DeltaRsEngine._spark``)
    spark = getattr(lake, "started_spark", None)
    engine = DeltaRsEngine(lake.root, spark, getattr(lake, "storage_options", None))
    # the same metastore names as the lake it serves (lake.catalog/lake.schema)
    return with_names(engine, getattr(lake, "registrar", None), existing=False)
