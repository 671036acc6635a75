"""replay: send journal rows back to queues (a retry of failed messages, or a replay of any selection)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from queuelake import config as config_mod

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def replay(args: argparse.Namespace, spark: SparkSession | None = None) -> dict[str, Any]:
    from queuelake.commands.pipeline import lake_for
    from queuelake.pipeline.replay import ReplayOptions
    from queuelake.pipeline.replay import replay as run_replay
    from queuelake.spark import get_spark

    options = ReplayOptions(
        predicate=args.where,
        to=args.to,
        dry_run=args.dry_run,
        limit=args.limit,
        max_rate=args.max_rate,
        replay_id=args.replay_id,
        batch_size=args.batch_size,
        ack_queue=args.ack_queue,
    )
    options.check()  # a bad --where or --replay-id fails before Spark starts
    cfg = config_mod.load(args.config)
    if args.to and not args.dry_run:
        # a replay into a queue the next drain takes back into the lake is almost always a mistake
        config_mod.check_send_target(cfg, args.to, "replay --to")
    session = spark or get_spark(cfg.spark)
    return run_replay(cfg, session, lake_for(cfg, session), options)
