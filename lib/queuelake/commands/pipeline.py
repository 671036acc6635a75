"""drain, transform, publish, run, maintain: the commands that touch the lake."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from queuelake import config as config_mod
from queuelake.config import Config
from queuelake.lake.port import LakeEngine, open_lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _active_spark() -> SparkSession | None:
    """The session spark-submit or Databricks made; the drain never starts one by itself."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return None
    return SparkSession.getActiveSession()


def lake_for(cfg: Config, spark: SparkSession | None = None) -> LakeEngine:
    return open_lake(cfg.lake, spark if spark is not None else _active_spark())


def drain(args: argparse.Namespace, spark: SparkSession | None = None) -> dict[str, Any]:
    from queuelake.pipeline.drain import drain as run_drain

    cfg = config_mod.load(args.config)
    return run_drain(
        cfg,
        lake_for(cfg, spark),
        queue_names=args.queues,
        max_messages=args.max_messages,
        max_seconds=args.max_seconds,
    )
