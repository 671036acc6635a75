"""``queuelake transform``: run the configured transforms on what the journal gained since the last run."""

from __future__ import annotations

import argparse
from typing import Any

from queuelake.commands.command import Command


def transform(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake import config as config_mod
    from queuelake.commands.sessions import Sessions
    from queuelake.pipeline import transform as step
    from queuelake.pipeline.step_locks import TRANSFORM, one_at_a_time, standalone

    cfg = config_mod.load(args.config)
    # its lock held by another process: "incomplete" (exit 1), as ``run`` ends for this step
    return standalone(
        TRANSFORM, one_at_a_time(cfg, TRANSFORM, lambda: Sessions(cfg, None).step(step.transform, step.pending))
    )


COMMAND = Command(
    name="transform",
    help="run the configured transforms incrementally",
    run=transform,
    graceful=True,  # Ctrl-C or SIGTERM: stops after the slice in hand (pipeline/transform.py)
    job=True,
)
