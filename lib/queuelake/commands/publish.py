"""``queuelake publish``: send the outbound tables' new rows to their queues and subscribers."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queuelake.commands.command import Command

if TYPE_CHECKING:
    from queuelake.config import Config
    from queuelake.lake.port import LakeEngine
    from queuelake.transport.database import QueueDatabase


def publish(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake import config as config_mod
    from queuelake.commands.sessions import Sessions
    from queuelake.context import open_database
    from queuelake.pipeline.publish import run as step

    cfg = config_mod.load(args.config)
    publish_step, pending = publish_steps(open_database(cfg))
    return Sessions(cfg, None).step(publish_step, pending, writes=step.written_tables)


def publish_steps(database: QueueDatabase) -> tuple[Callable[..., dict[str, Any]], Callable[..., list[str]]]:
    """The publish step and its ``pending`` as ``Sessions.step`` calls them, through the queue
    database's handle the command opened."""
    from queuelake.pipeline.publish import run as step

    def publish(cfg: Config, spark: Any, lake: LakeEngine) -> dict[str, Any]:
        return step.publish(cfg, database, spark, lake)

    def pending(cfg: Config, lake: LakeEngine) -> list[str]:
        return step.pending(cfg, database, lake)

    return publish, pending


COMMAND = Command(
    name="publish",
    help="publish outbound tables to queues and subscribers",
    run=publish,
    job=True,
    graceful=True,  # Ctrl-C or SIGTERM: stops after the batch in hand (pipeline/publish/driver.py)
)
