"""A command's Spark session and lake: which engine, and a session only when there is work.

Why its own module: every lake command asks the same questions (is there a session spark-submit
made? which engine wrote this table? does this step need Spark at all?), and starting Spark to find
nothing to do was most of an idle run's cost.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from queuelake.config import Config
from queuelake.lake.engines import delta_rs_may_write, open_lake, without_spark
from queuelake.lake.port import LakeEngine
from queuelake.report import log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def active_spark() -> SparkSession | None:
    """The session spark-submit or Databricks made; the drain never starts one by itself. None without
    asking pyspark when this process never imported it (no session can exist then): importing it
    took 0.1-0.25 s of every command that needs no Spark."""
    if "pyspark.sql" not in sys.modules:
        return None
    try:
        from pyspark.sql import SparkSession
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return None
    return SparkSession.getActiveSession()


def lake_for(cfg: Config, spark: SparkSession | None = None) -> LakeEngine:
    return open_lake(cfg.lake, spark if spark is not None else active_spark())


def spark_for(cfg: Config, spark: SparkSession | None) -> SparkSession:
    from queuelake.spark import get_spark

    return spark or get_spark(cfg.spark)


def require_lake_root(cfg: Config) -> None:
    """Fail, as ``find`` and ``replay`` do (exit 1, ``error_kind`` lake), when a local lake root does not
    exist: a mistyped ``lake.root`` made ``tables``, ``erase`` and ``maintain`` report "ok" over
    nothing (issue 59). An object-store root is not listed here: a prefix exists once written to."""
    from pathlib import Path

    from queuelake.errors import LakeError

    root = str(cfg.lake.root)
    local = root[len("file://") :] if root.startswith("file://") else (root if "://" not in root else None)
    if local is not None and not Path(local).is_dir():
        raise LakeError(
            f"lake root {root} does not exist (nothing has been drained into this lake; check lake.root, "
            "or run queuelake drain)"
        )


class Sessions:
    """A command's Spark session and lake, the session started only for a step with work to do.

    Why: transform and publish find nothing new on most scheduled runs, and starting Spark to say so
    was the whole cost of an idle ``run`` (10-20 s). Each step says cheaply whether it has work
    (``pending``: Delta log lookups and the ledger, no Spark); without work it runs on the lake a
    drain uses (delta-rs, no session), says "nothing to do" and records its ``runs`` row."""

    def __init__(self, cfg: Config, spark: SparkSession | None) -> None:
        self.cfg = cfg
        self.session = spark or active_spark()
        self.spark_lake = lake_for(cfg, self.session) if self.session is not None else None
        self._quiet: LakeEngine | None = None

    def quiet(self) -> LakeEngine:
        """The lake without a session (the drain's), or the session's when there is one."""
        if self.spark_lake is not None:
            return self.spark_lake
        if self._quiet is None:
            self._quiet = runs_only_lake(self.cfg)
        return self._quiet

    def with_spark(self) -> tuple[SparkSession, LakeEngine]:
        if self.spark_lake is None:
            self.session = spark_for(self.cfg, None)
            self.spark_lake = lake_for(self.cfg, self.session)
        assert self.session is not None
        return self.session, self.spark_lake

    def step(self, step: Any, pending: Any, writes: Any = None) -> dict[str, Any]:
        """``step(cfg, spark, lake)``, with a session only when ``pending(cfg, lake)`` names work.

        ``writes(cfg)``: the tables the step may write, for a step that uses Spark only for some of its
        work (publish: its clean rounds, the usual ones, are checked and sent without it). Where
        delta-rs may write them all, the step gets the delta-rs lake and a session that starts on first
        use: a publish of 300,000 rows took 4 s, and the session's start 5-10 s more."""
        if self.spark_lake is not None:
            return step(self.cfg, *self.with_spark())
        if pending(self.cfg, self.quiet()):
            if writes is not None and self._delta_rs_may_write(writes(self.cfg)):
                return step(self.cfg, LazySpark(lambda: self.with_spark()[0]), self.quiet())
            return step(self.cfg, *self.with_spark())
        # nothing to do: the step says so without a session (one is still started if a concurrent
        # drain added work in between: the step touches Spark only for work)
        log.info("%s: nothing new, no Spark session started", step.__name__)
        return step(self.cfg, LazySpark(lambda: self.with_spark()[0]), self.quiet())

    def _delta_rs_may_write(self, tables: list[str]) -> bool:
        """Whether the session-less lake (delta-rs) may write every one of ``tables``."""
        return delta_rs_may_write(self.cfg.lake.engine, self.quiet(), tables)


class LazySpark:
    """A stand-in for the SparkSession that starts it on first use: what a step that finds nothing
    to do is handed, so that it never pays for a session it does not touch."""

    def __init__(self, start: Any) -> None:
        self._start = start
        self._session: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._session is None:
            self._session = self._start()
        return getattr(self._session, name)


def runs_only_lake(cfg: Config) -> LakeEngine:
    """The lake of a command whose only lake write is its ``runs`` rows (purge-expired). ``runs`` is
    delta-rs's (``pipeline.runs.runs_engine``), so no Spark session is started for it, whatever
    ``lake.engine`` says: starting one took longer than the purge. Only a ``runs`` table an older
    version made with delta-spark still needs the session."""

    from queuelake.pipeline.runs import RUNS

    session = active_spark()
    if session is None:
        lake = without_spark(cfg.lake)
        if not lake.exists(RUNS) or lake.written_by(RUNS) != "delta-spark":
            return lake
    return writing_lake(cfg, session)


def writing_lake(cfg: Config, spark: SparkSession | None = None) -> LakeEngine:
    """The lake for a command that writes tables other commands created (maintain; purge-expired when
    an older ``runs`` table is delta-spark's). The engine that wrote a table must write it again:
    delta-spark (and auto, which may pick it, as transform does) needs a session; delta-rs does not
    start one, nor does auto on a lake whose every table delta-rs made, nor delta-spark until a table
    needs Spark's work."""
    session = spark or active_spark()
    if session is None and cfg.lake.engine == "auto":
        lake = without_spark(cfg.lake)
        if all(lake.written_by(table) == "delta-rs" for table in lake.tables()):
            return lake  # every table delta-rs's: a maintain spent ~30 s starting Spark for none (a review)
    if session is None and cfg.lake.engine == "delta-spark":
        # the session started when a table first needs Spark work: a maintain with nothing to compact or
        # vacuum, an erase with no typed row to delete, start none (5 s or more on 2 cores)
        return open_lake(cfg.lake, None, start_spark=lambda: spark_for(cfg, None))
    session = session or (None if cfg.lake.engine == "delta-rs" else spark_for(cfg, None))
    return lake_for(cfg, session)
