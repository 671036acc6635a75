"""``queuelake publish``: send the outbound tables' new rows to their queues and subscribers."""

from __future__ import annotations

import argparse
from typing import Any

from queuelake.commands.command import Command


def publish(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake import config as config_mod
    from queuelake.commands.sessions import Sessions
    from queuelake.pipeline.publish import run as step

    cfg = config_mod.load(args.config)
    return Sessions(cfg, None).step(step.publish, step.pending, writes=step.written_tables)


COMMAND = Command(name="publish", help="publish outbound tables to queues and subscribers", run=publish, job=True)
