"""drain, transform, publish, run, maintain: the commands that touch the lake."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from queuelake import config as config_mod
from queuelake.config import Config
from queuelake.lake.engines import journal_engine, open_lake
from queuelake.lake.port import LakeEngine
from queuelake.report import log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def active_spark() -> SparkSession | None:
    """The session spark-submit or Databricks made; the drain never starts one by itself."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return None
    return SparkSession.getActiveSession()


def lake_for(cfg: Config, spark: SparkSession | None = None) -> LakeEngine:
    return open_lake(cfg.lake, spark if spark is not None else active_spark())


def drain(args: argparse.Namespace, spark: SparkSession | None = None) -> dict[str, Any]:
    from queuelake.pipeline.drain.run import drain as run_drain

    cfg = config_mod.load(args.config)
    # the journal and runs are delta-rs's whatever lake.engine says: a drain never starts Spark
    return run_drain(
        cfg,
        lake_for(cfg, spark) if spark is not None else runs_only_lake(cfg),
        queue_names=args.queues,
        max_messages=args.max_messages,
        max_seconds=args.max_seconds,
    )


def _spark(cfg: Config, spark: SparkSession | None) -> SparkSession:
    from queuelake.spark import get_spark

    return spark or get_spark(cfg.spark)


def transform(args: argparse.Namespace, spark: SparkSession | None = None) -> dict[str, Any]:
    from queuelake.pipeline import transform as step

    cfg = config_mod.load(args.config)
    return Sessions(cfg, spark).step(step.transform, step.pending)


def publish(args: argparse.Namespace, spark: SparkSession | None = None) -> dict[str, Any]:
    from queuelake.pipeline.publish import run as step

    cfg = config_mod.load(args.config)
    return Sessions(cfg, spark).step(step.publish, step.pending)


def run_all(args: argparse.Namespace, spark: SparkSession | None = None) -> dict[str, Any]:
    """drain, transform, publish: the scheduled job. Stops at the first failing step, and before
    the next step once SIGTERM asked to stop (status "interrupted", the steps not run are listed).
    A drain that ended "incomplete" (rows held by other sessions) does not stop the later steps, but
    the run reports "incomplete"."""
    from queuelake import stopping
    from queuelake.pipeline import transform as transform_mod
    from queuelake.pipeline.drain.run import drain as run_drain
    from queuelake.pipeline.publish import run as publish_mod

    cfg = config_mod.load(args.config)
    sessions = Sessions(cfg, spark)
    order = {
        "drain": lambda: run_drain(cfg, sessions.quiet(), args.queues, args.max_messages, args.max_seconds),
        "transform": lambda: sessions.step(transform_mod.transform, transform_mod.pending),
        "publish": lambda: sessions.step(publish_mod.publish, publish_mod.pending),
    }
    steps: dict[str, Any] = {}
    for name, step in order.items():
        if stopping.requested():
            break
        steps[name] = step()
        # an incomplete drain (rows other sessions held) journalled everything it took: go on
        if steps[name].get("status") not in ("ok", "incomplete"):
            break
    statuses = {s.get("status") for s in steps.values()}
    if statuses - {"ok", "incomplete"}:
        return {"status": "failed", **steps}
    if "incomplete" in statuses and len(steps) == len(order):
        return {"status": "incomplete", **steps}
    if len(steps) < len(order):
        return {"status": "interrupted", **steps, "skipped": [n for n in order if n not in steps]}
    return {"status": "ok", **steps}


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
            self.session = _spark(self.cfg, None)
            self.spark_lake = lake_for(self.cfg, self.session)
        assert self.session is not None
        return self.session, self.spark_lake

    def step(self, step: Any, pending: Any) -> dict[str, Any]:
        """``step(cfg, spark, lake)``, with a session only when ``pending(cfg, lake)`` names work."""
        if self.spark_lake is not None or pending(self.cfg, self.quiet()):
            return step(self.cfg, *self.with_spark())
        # nothing to do: the step says so without a session (one is still started if a concurrent
        # drain added work in between: the step touches Spark only for work)
        log.info("%s: nothing new, no Spark session started", step.__name__)
        return step(self.cfg, LazySpark(lambda: self.with_spark()[0]), self.quiet())


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


def maintain(args: argparse.Namespace, spark: SparkSession | None = None) -> dict[str, Any]:
    """Compact and vacuum every lake table under lake.root. The lake port lists the tables, so an
    object-storage root (``s3://...``) is maintained like a local folder, never silently skipped."""
    from queuelake.pipeline import runs

    cfg = config_mod.load(args.config)
    lake = writing_lake(cfg, spark)
    journal = journal_engine(lake)  # the tables delta-rs wrote under a delta-spark job: messages, ...
    run_id, started = runs.new_run_id(), runs.utc_now()
    figures: dict[str, Any] = {}
    rows = []
    names = lake.tables()
    if not names:
        log.info("maintain: no lake tables under %s yet, nothing to do", cfg.lake.root)
    for name in names:
        t0 = time.monotonic()
        figures[name] = (journal if lake.written_by(name) == journal.name else lake).maintain(name)
        log.info(
            "maintain %s: %s file(s) compacted, %s vacuumed in %.1fs",
            name,
            figures[name].get("files_compacted", "?"),
            figures[name].get("files_vacuumed", "?"),
            time.monotonic() - t0,
        )
        rows.append(
            {
                "table": name,
                "started_at": started,
                "ended_at": runs.utc_now(),
                "files_compacted": figures[name].get("files_compacted"),
                "files_vacuumed": figures[name].get("files_vacuumed"),
                "seconds": round(time.monotonic() - t0, 3),
                "status": "ok",
            }
        )
    runs.append_runs(lake, run_id, "maintain", rows)
    return {"run_id": run_id, "tables": figures}


def runs_only_lake(cfg: Config) -> LakeEngine:
    """The lake of a command whose only lake write is its ``runs`` rows (purge-expired). ``runs`` is
    delta-rs's (``pipeline.runs.runs_engine``), so no Spark session is started for it, whatever
    ``lake.engine`` says: starting one took longer than the purge. Only a ``runs`` table an older
    version made with delta-spark still needs the session."""
    import dataclasses

    from queuelake.pipeline.runs import RUNS

    session = active_spark()
    if session is None:
        lake = open_lake(dataclasses.replace(cfg.lake, engine="delta-rs"))
        if not lake.exists(RUNS) or lake.written_by(RUNS) != "delta-spark":
            return lake
    return writing_lake(cfg, session)


def writing_lake(cfg: Config, spark: SparkSession | None = None) -> LakeEngine:
    """The lake for a command that writes tables other commands created (maintain; purge-expired when
    an older ``runs`` table is delta-spark's). The engine that wrote a table must write it again:
    delta-spark (and auto, which may pick it, as transform does) needs a session; delta-rs does not
    start one."""
    session = spark or active_spark() or (None if cfg.lake.engine == "delta-rs" else _spark(cfg, None))
    return lake_for(cfg, session)
