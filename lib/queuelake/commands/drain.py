"""``queuelake drain``: take messages off the configured queues into the lake's journal."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queuelake.commands.argtypes import at_least_one, seconds
from queuelake.commands.command import Command

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from queuelake.config import Config


def queue_arguments(parser: argparse.ArgumentParser) -> None:
    """The drain's arguments, which ``run`` takes too."""
    parser.add_argument("--queue", action="append", dest="queues", help="drain only this queue (repeatable)")
    parser.add_argument(
        "--max-messages",
        type=at_least_one,
        default=None,
        help="stop once about N messages are drained from each queue (whole batches)",
    )
    parser.add_argument(
        "--max-seconds", type=seconds, default=None, help="stop starting new batches after S seconds (a time box)"
    )


def drain(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake import config as config_mod
    from queuelake.commands import sessions
    from queuelake.context import open_database
    from queuelake.pipeline.drain.run import drain as run_drain

    cfg = config_mod.load(args.config)
    spark = sessions.active_spark()
    # the journal and runs are delta-rs's whatever lake.engine says: a drain never starts Spark
    return run_drain(
        cfg,
        open_database(cfg),  # the queue database's handle: what the drain's connections come from
        sessions.lake_for(cfg, spark) if spark is not None else sessions.runs_only_lake(cfg),
        queue_names=args.queues,
        max_messages=args.max_messages,
        max_seconds=args.max_seconds,
        start_spark=spark_starter(cfg),
    )


def spark_starter(cfg: Config) -> Callable[[], SparkSession]:
    """How a drain on executors starts Spark (``spark.master``'s session), imported only then: a
    drain on the driver never imports pyspark."""

    def start() -> SparkSession:
        from queuelake.spark import get_spark

        return get_spark(cfg.spark)

    return start


COMMAND = Command(
    name="drain",
    help="drain queues into the lake",
    run=drain,
    arguments=queue_arguments,
    graceful=True,
    job=True,
)
