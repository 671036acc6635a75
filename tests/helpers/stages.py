"""The stages that send and receive, called as their commands call them: the queue database's
handle opened from the config (``context.open_database``, in the command layer), then the stage.
Tests that drive a stage in-process take these, so that each call site reads ``drain(cfg, lake)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queuelake.commands.drain import spark_starter
from queuelake.config import Config
from queuelake.context import open_database
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.drain import run as drain_run
from queuelake.pipeline.publish import run as publish_run
from queuelake.pipeline.replay import replayer
from queuelake.pipeline.replay.plan import ReplayOptions


def drain(config: Config, lake: LakeEngine, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``pipeline.drain.run.drain`` through a handle opened from ``config``, starting Spark (on
    executors) as the command does."""
    kwargs.setdefault("start_spark", spark_starter(config))
    return drain_run.drain(config, open_database(config), lake, *args, **kwargs)


def replay(
    config: Config,
    spark: Any,
    lake: LakeEngine,
    options: ReplayOptions,
    start_spark: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """``pipeline.replay.replayer.replay`` through a handle opened from ``config``."""
    return replayer.replay(config, open_database(config), spark, lake, options, start_spark)


def publish(config: Config, spark: Any, lake: LakeEngine) -> dict[str, Any]:
    """``pipeline.publish.run.publish`` through a handle opened from ``config``."""
    return publish_run.publish(config, open_database(config), spark, lake)
