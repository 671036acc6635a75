"""The ``runs`` table: one row per command run and queue (or output), written by every command.

Why a module: the table outlives queuelake versions. A column added to ``RUNS_SCHEMA`` must be added
to a ``runs`` table an older version created before appending to it (the lake refuses columns the
table lacks), and every command must do that the same way.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from queuelake.lake.port import LakeEngine
from queuelake.pipeline.journal import RUNS, RUNS_SCHEMA


def append_runs(lake: LakeEngine, run_id: str, command: str, rows: list[dict[str, Any]]) -> None:
    """Append this run's rows once (idempotent per run id and command); missing fields are null."""
    if not rows:
        return
    if lake.exists(RUNS):
        lake.add_columns(RUNS, [f.with_nullable(True) for f in RUNS_SCHEMA])
    lake.append(RUNS, pa.Table.from_pylist(rows, schema=RUNS_SCHEMA), f"queuelake.runs/{run_id}/{command}", 1)
