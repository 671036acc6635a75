"""``queuelake bodies``: the journal's new bodies into one typed table per message type."""

from __future__ import annotations

import argparse
from typing import Any

from queuelake.commands.command import Command


def bodies(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake import config as config_mod
    from queuelake.commands.sessions import Sessions
    from queuelake.pipeline.bodies import run as step
    from queuelake.pipeline.step_locks import BODIES, one_at_a_time, standalone

    cfg = config_mod.load(args.config)
    # its lock held by another process: "incomplete" (exit 1), as ``run`` ends for this step
    return standalone(BODIES, one_at_a_time(cfg, BODIES, lambda: Sessions(cfg, None).step(step.bodies, step.pending)))


COMMAND = Command(
    name="bodies",
    help="the journal's new message bodies into typed tables, one per message type",
    run=bodies,
    graceful=True,  # Ctrl-C or SIGTERM: stops after the slice in hand (pipeline/bodies/run.py)
    job=True,
)
