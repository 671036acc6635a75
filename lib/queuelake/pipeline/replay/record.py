"""What a replay run leaves in the lake: a ``replays`` row, and ``runs`` rows (one per destination)."""

from __future__ import annotations

import collections
import datetime as dt

import pyarrow as pa

from queuelake.lake import record_tables
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.replay.plan import ReplayOptions
from queuelake.pipeline.replay.result import ReplayResult
from queuelake.pipeline.runs import Run, record_engine

REPLAYS = record_tables.REPLAYS.name
REPLAYS_SCHEMA: pa.Schema = record_tables.REPLAYS.schema


def record_run(
    lake: LakeEngine,
    run_id: str,
    started: dt.datetime,
    options: ReplayOptions,
    result: ReplayResult,
    sent_per_destination: collections.Counter[str],
) -> None:
    """A ``replays`` row and ``runs`` rows (one per destination) for this run."""
    ended = dt.datetime.now(dt.timezone.utc)
    opts = options
    replay = {
        "replay_id": result.replay_id,
        "run_id": run_id,
        "started_at": started,
        "ended_at": ended,
        "predicate": opts.predicate,
        "to_queue": opts.to,
        "limit": opts.limit,
        "journal_version": result.journal_version,
        "selected": result.selected,
        "destinations": list(result.destinations.items()),
        "rows_sent": result.rows_sent,
        "total_sent": result.total_sent,
        "batches": result.batches,
        "batches_done_before": result.batches_done_before,
        "failed_batches": len(result.failed_batches),
        "skipped": result.skipped,
        "skipped_reasons": list(result.skipped_reasons.items()),
        "max_rate": opts.max_rate,
        "rate": result.rate,
        "status": result.status,
        "error": result.error,
    }
    record_engine(lake, REPLAYS).append(
        REPLAYS, pa.Table.from_pylist([replay], schema=REPLAYS_SCHEMA), f"queuelake.replays/{run_id}", 1
    )
    Run("replay", run_id, started).record(lake, result.runs_rows(sent_per_destination))
