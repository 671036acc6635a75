"""The Spark session: reuse the one spark-submit or Databricks made, else build a local one.

We never download jars at run time (no ``configure_spark_with_delta_pip``): on machines without the
Delta JVM package the lake falls back to the Rust engine instead. A local session gets the Delta jars
only from files already on disk: ``spark.jars`` in the config's ``spark.conf``, or the folder (or
comma-separated jar paths) named by ``QUEUELAKE_DELTA_JARS`` (e.g. ``jvm/jars``, filled by
``bash jvm/fetch-jars.sh``). Either way, when a Delta jar is among them, the Delta SQL extension and
catalog are switched on too (unless the config sets them).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queuelake import stopping
from queuelake.config_sections import SparkConfig
from queuelake.report import log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # pandas 3 + pyspark 4.1: the silent slow path can run out of memory; fail fast instead.
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    # a block cached on disk (``bodies``' slice) is written by Java serialization, whose stream holds
    # every object written until it resets, 100 by default: 100 cached batches of ~4 MB per task ran the
    # default 1 GB driver out of memory on bodies of 200 KB (a review); reset after each one
    "spark.serializer.objectStreamReset": "1",
    # timestamps as Parquet's microseconds, not Spark's default INT96 (nanoseconds): deltalake, polars
    # and DuckDB read INT96 as nanoseconds, and a .NET DateTime.MinValue (year 1) in a typed table
    # delta-spark wrote made the whole table unreadable to them (a review)
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}

WAREHOUSE = "spark.sql.warehouse.dir"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
JARS_ENV = "QUEUELAKE_DELTA_JARS"


def get_spark(config: SparkConfig | None = None) -> SparkSession:
    """The active session if there is one, else one built from ``spark.master`` with the UI off; either
    way refused (``SparkVersionError``, one line) unless its Spark is one queuelake supports.

    Under spark-submit (``under_spark_submit``) the session is built from what spark-submit was given:
    its ``--master``, ``--name`` and every ``--conf`` win over ``spark.master`` and our defaults, which
    only fill the gaps. Why: the builder's settings override spark-submit's, so a job submitted to YARN
    or a standalone master ran in ``local[2]`` inside the driver (``spark.master``'s default), the
    cluster never used."""
    from pyspark.sql import SparkSession

    from queuelake.spark_version import check_spark

    quiet_query_context_logs()
    active = SparkSession.getActiveSession()
    if active is not None:
        _check_once(active, check_spark)
        return active
    if stopping.requested():  # a stop asked before the session started: not 10-30 s of start-up, then stop
        raise stopping.Interrupted("stopped before the Spark session started")
    config = config or SparkConfig()
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    given = submitted_conf() if under_spark_submit() else {}
    if under_spark_submit():
        for line in launch_settings_ignored(config.conf, given):
            log.warning("%s", line)
    master = given.get("spark.master", config.master)
    # what spark-submit was given that sizes Delta and turns it on: its jars (``--packages``), cores
    launched = {k: given[k] for k in _SIZING_KEYS if k in given}
    conf = {
        "spark.master": config.master,
        "spark.app.name": config.app_name,
        **session_conf({**launched, **config.conf}, os.environ.get(JARS_ENV), master, quiet=not debugging()),
    }
    if WAREHOUSE not in conf and WAREHOUSE not in given and _local_cores(master) is not None:
        conf[WAREHOUSE] = scratch_warehouse()
    builder = SparkSession.builder
    for key, value in conf.items():
        if key not in given:
            builder = builder.config(key, value)
    with _jvm_ignoring_stop_signals(), stopping.handlers_kept():
        spark = builder.getOrCreate()
    stopping.restore_handlers()  # pyspark's SIGINT handler out, the command's back (Ctrl-C stops at a boundary)
    if stopping.requested():  # asked while the JVM started (10-30 s): taken now, as one asked before it is (a
        # review: a replay's whole Spark selection ran first, 12 s; a bodies step got to its first slice)
        raise stopping.Interrupted("stopped while the Spark session started")
    if not debugging():  # --debug brings Spark's warnings back (an out-of-memory's cause was hidden: a review)
        spark.sparkContext.setLogLevel("ERROR")
    _check_once(spark, check_spark)
    return spark


_scratch: list[str] = []  # this process's scratch warehouse, once made


def scratch_warehouse() -> str:
    """A local session's warehouse: a folder of this process's own under the temporary folder, removed
    when the process ends. Spark's default is ``./spark-warehouse``, made in the current folder the first
    time a statement goes through the session catalog (delta-spark's ``ALTER TABLE delta.`...```, the
    metastore names' ``CREATE SCHEMA``): ``queuelake demo --engine delta-spark`` left one in the user's
    folder (a review). A local session's catalog lives in memory and ends with it, so nothing kept there
    outlives the session anyway; queuelake's tables are in the lake (external, by path). Not for a cluster
    (its executors must reach the warehouse), nor when ``spark.conf`` or spark-submit names one."""
    if not _scratch:
        path = tempfile.mkdtemp(prefix="queuelake-spark-warehouse-")
        atexit.register(_remove_scratch, path, os.getpid())
        _scratch.append(path)
    return _scratch[0]


def _remove_scratch(path: str, owner: int) -> None:
    if os.getpid() == owner:  # not from a forked child that inherited the handler
        shutil.rmtree(path, ignore_errors=True)


STDERR_FD = 2  # the process's own stderr, whatever ``sys.stderr`` is now (a test's capture has no file)


@contextlib.contextmanager
def _jvm_ignoring_stop_signals() -> Iterator[None]:
    """A JVM pyspark starts now ignores the stop signals (``stopping.ignored_while_starting_children``,
    held around its ``Popen`` alone), so a hang-up or a cancel sent to the whole process group stops the
    command at a batch boundary instead of killing its Spark; and writes its stdout to stderr."""
    import pyspark.java_gateway as gateway

    popen = gateway.Popen
    started: list[Any] = []

    def popen_ignoring_stop_signals(*args: Any, **kwargs: Any) -> Any:
        # the JVM's stdout to stderr: Delta's VACUUM prints "Deleted 1 files and directories ..." there,
        # and stdout is the command's JSON summary alone (``| jq .`` failed on erase and maintain: a review)
        kwargs.setdefault("stdout", STDERR_FD)
        with stopping.ignored_while_starting_children():
            child = popen(*args, **kwargs)
        started.append(child)
        return child

    gateway.Popen = popen_ignoring_stop_signals  # type: ignore[assignment,misc]
    try:
        yield
    except BaseException:
        # a stop (or an error) while pyspark waited for the JVM: pyspark removes the folder the JVM
        # writes its port to, the JVM's main thread dies before it watches its stdin, and its gateway
        # threads kept it alive for good, deaf to the stop signals (a review: 5 of 5 Ctrl-C Ctrl-C)
        for child in started:
            if child.poll() is None:
                child.kill()
                child.wait(10)
        raise
    finally:
        gateway.Popen = popen  # type: ignore[misc]


# the sessions already checked (by identity): get_spark runs once per stage, the check once per session
_CHECKED: list[Any] = []


def _check_once(spark: SparkSession, check: Any) -> None:
    if any(s is spark for s in _CHECKED):
        return
    check(spark)
    _CHECKED.append(spark)


# settings read when the driver's JVM starts: under spark-submit it has started before the job reads its
# config, so ``spark.conf`` cannot change them (spark-submit's own flags and --conf can)
LAUNCH_SETTINGS = {
    "spark.driver.memory": "--driver-memory",
    "spark.driver.extraJavaOptions": "--driver-java-options",
    "spark.driver.extraClassPath": "--driver-class-path",
    "spark.driver.extraLibraryPath": "--driver-library-path",
}


def launch_settings_ignored(wanted: dict[str, str], given: dict[str, str]) -> list[str]:
    """A warning per ``spark.conf`` setting that a driver started by spark-submit cannot take (its JVM
    already runs: ``LAUNCH_SETTINGS``), naming the flag that would. Why: ``spark.driver.memory: 3g`` in
    the config, the advice for a first backlog, did nothing under spark-submit or Airflow, silently (a
    review)."""
    lines = []
    for key, flag in LAUNCH_SETTINGS.items():
        if key in wanted and str(wanted[key]).strip().lower() != str(given.get(key, "")).strip().lower():
            running = f"it runs with {given[key]!r}" if key in given else "it runs with Spark's default"
            lines.append(
                f"spark.conf {key}: {wanted[key]!r} has no effect under spark-submit, whose driver JVM started "
                f"before the job read its config ({running}): give it to spark-submit ({flag} or --conf {key}=...)"
            )
    return lines


def under_spark_submit() -> bool:
    """True in the Python that spark-submit started for an application (its PythonRunner hands the
    driver's JVM gateway over in ``PYSPARK_GATEWAY_PORT``); False in a plain ``python``/``queuelake``."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def submitted_conf() -> dict[str, str]:
    """The settings spark-submit gave the driver (``--master``, ``--conf``, spark-defaults.conf)."""
    from pyspark import SparkConf, SparkContext

    # the gateway first: without it SparkConf() is an empty Python dict, not the JVM's system properties
    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


QUIET_LOG4J = Path(__file__).with_name("log4j2.properties")
# PySpark 4 logs every failed query as a JSON line holding the whole Java stack trace (12 KB for a
# typo in `replay --where`) before the exception reaches queuelake, which reports it in one line
_QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def debugging() -> bool:
    """Whether the command runs with --debug (queuelake's logger at DEBUG)."""
    return logging.getLogger("queuelake").isEnabledFor(logging.DEBUG)


def quiet_query_context_logs() -> None:
    """Silence PySpark's query-context loggers (see ``_QUERY_CONTEXT_LOGGERS``), unless --debug.
    Through PySpark's own ``getLogger``: a plain logger of the same name would break its calls."""
    if debugging():
        return
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # pyspark before 4.0 has no such loggers
        return
    for name in _QUERY_CONTEXT_LOGGERS:
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


def session_conf(
    conf: dict[str, str], delta_jars: str | None = None, master: str = "local[2]", quiet: bool = False
) -> dict[str, str]:
    """What a session we build gets: our defaults, then ``conf``; plus the jars of ``delta_jars`` (a
    folder of jars, or comma-separated jar paths) appended to ``spark.jars``; plus, when a Delta jar is
    on ``spark.jars``, the Delta extension and catalog, and parallelism sized to the cores (a local
    master's, a cluster's as its config says: ``_cluster_cores``): Delta splits the log state into 50
    partitions (every small commit and read ~4x slower) and VACUUM lists files in stages of 10,000
    tasks (a 5-file table took 40 s). ``quiet``: the driver
    logs through ``QUIET_LOG4J`` (errors only). ``conf`` always wins."""
    defaults = dict(_DEFAULT_CONF)
    if quiet:
        defaults["spark.driver.extraJavaOptions"] += f" -Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()}"
    merged = {**defaults, **conf}
    extra = local_jars(delta_jars) if delta_jars else []
    if delta_jars and not extra:
        from queuelake.errors import ConfigError

        raise ConfigError(f"{JARS_ENV}={delta_jars!r}: no .jar files there (run: bash jvm/fetch-jars.sh)")
    jars = [j for j in merged.get("spark.jars", "").split(",") if j.strip()] + extra
    if jars:
        merged["spark.jars"] = ",".join(dict.fromkeys(jars))
    # a Delta jar named, or Delta among spark-submit's --packages (a review: under spark-submit neither
    # the settings that turn it on nor the sizing below were made, and Delta ran 50-task stages)
    if any("delta-spark" in os.path.basename(j) for j in jars) or "io.delta:delta-spark" in merged.get(
        "spark.jars.packages", ""
    ):
        delta = delta_conf()
        cores = _local_cores(master) or _cluster_cores(merged)
        if cores:
            delta["spark.databricks.delta.snapshotPartitions"] = str(cores)
            delta["spark.sql.sources.parallelPartitionDiscovery.parallelism"] = str(cores)
        merged.update({k: v for k, v in delta.items() if k not in conf})
    return merged


_SIZING_KEYS = ("spark.jars", "spark.jars.packages", "spark.cores.max", "spark.default.parallelism")
# the Delta log's partitions and listing parallelism on a cluster whose cores the config does not say
CLUSTER_DELTA_PARALLELISM = 16
DELTA_DEFAULT_PARALLELISM = 50  # spark.databricks.delta.snapshotPartitions' own default


def _cluster_cores(conf: dict[str, str]) -> int:
    """A cluster's cores as the config gives them (``spark.cores.max``, else ``spark.default.parallelism``),
    else ``CLUSTER_DELTA_PARALLELISM``. Why: Delta's defaults (50 log partitions, VACUUM listing in stages
    of 10,000 tasks) held on a standalone master, and an erase of 20 rows ran 30,458 tasks in 446 s (a
    review: 51,365 tasks and 361 s for a ``maintain`` with nothing to compact; sized: 173 and 185 s)."""
    for key in ("spark.cores.max", "spark.default.parallelism"):
        value = conf.get(key, "").strip()
        if value.isascii() and value.isdigit() and int(value) > 0:
            # no more than Delta's own default: a big cluster's 512 cores made 512 log partitions (a review)
            return min(int(value), DELTA_DEFAULT_PARALLELISM)
    return CLUSTER_DELTA_PARALLELISM


def _local_cores(master: str) -> int | None:
    """The cores of a ``local``, ``local[N]`` or ``local[*]`` master; None for a cluster."""
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if not match:
        return None
    if match.group(1) in (None, "*"):
        return 1 if match.group(1) is None else (os.cpu_count() or 1)
    return int(match.group(1))


def delta_conf(jars: Iterable[str] = ()) -> dict[str, str]:
    """Spark settings for Delta Lake: the SQL extension, the catalog, and ``jars`` on spark.jars."""
    conf = {"spark.sql.extensions": DELTA_EXTENSION, "spark.sql.catalog.spark_catalog": DELTA_CATALOG}
    jars = list(jars)
    if jars:
        conf["spark.jars"] = ",".join(jars)
    return conf


def local_jars(spec: str) -> list[str]:
    """The jar files named by ``spec``: a folder (its ``*.jar``) or comma-separated paths; absolute."""
    found: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if os.path.isdir(part):
            found.extend(sorted(glob.glob(os.path.join(part, "*.jar"))))
        elif os.path.isfile(part):
            found.append(part)
    return [os.path.abspath(j) for j in found]


def _python() -> str:
    import sys

    return sys.executable


def delta_session_problem(spark: SparkSession) -> str | None:
    """What this session lacks to write Delta tables (None: nothing): the JVM classes, or the two
    session settings that turn them on. Why both: under spark-submit, ``--packages`` alone puts the
    classes on the classpath, and the run chose delta-spark for its new tables, drained, and then
    failed at its first table (``CANNOT_CREATE_DATA_SOURCE_TABLE``) naming neither setting (a review).
    Only a session with neither setting is refused, and none on Databricks, whose runtime has Delta on
    by its own means (a platform that sets one of them its own way is trusted)."""
    if not has_delta_jvm(spark):
        return "this run's Spark session has no Delta JVM classes"
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return None
    wanted = (("spark.sql.extensions", DELTA_EXTENSION), ("spark.sql.catalog.spark_catalog", DELTA_CATALOG))
    missing = [f"{key}={value}" for key, value in wanted if value not in (spark.conf.get(key, None) or "")]
    if len(missing) == len(wanted):
        return "this run's Spark session has the Delta classes but not " + " and ".join(missing)
    return None


def has_delta_jvm(spark: SparkSession) -> bool:
    """True when the Delta Lake JVM classes are on this session's classpath."""
    try:
        jvm: Any = spark._jvm  # type: ignore[attr-defined]
        # Spark's loader (the thread's context loader): jars given with spark.jars or --packages are on
        # it, not on the system class path that a bare Class.forName through py4j would search.
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(DELTA_EXTENSION, False, loader)
        return True
    except Exception:
        return False
