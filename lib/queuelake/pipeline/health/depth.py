"""Queue depth over time, from what every drain already records in ``runs`` (no ``count(*)``, no
query of the queue database).

A drain's row for a queue says how many rows it took (``dequeued``) and the backlog it left
(``backlog_left``: 0 when its workers found the queue empty, else the transport's peek, the
RowVersion / seq span). So each drain gives two points: the depth when it started, ``dequeued +
backlog_left`` (what was there, plus what arrived while it ran: an upper bound), at ``started_at``,
and the depth it left, ``backlog_left``, at ``ended_at``. Drawn over time, the first shows the backlog
that builds between drains; the second alone would saw-tooth to zero (ServiceControl #4556).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.lake import table_entry
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.runs import read_runs, runs_engine

DEPTH_SCHEMA = pa.schema(
    [
        pa.field("queue", pa.string()),
        pa.field("at", table_entry.UTC_TS),
        pa.field("depth", pa.int64()),
        pa.field("when", pa.string()),  # before (a drain's start) | after (its end)
    ]
)
_COLUMNS = ["command", "queue", "started_at", "ended_at", "dequeued", "backlog_left"]


def drain_rows(lake: LakeEngine) -> pa.Table:
    """The drain's ``runs`` rows that carry a backlog (``_COLUMNS``)."""
    runs = read_runs(runs_engine(lake), _COLUMNS)
    keep = pc.and_(pc.equal(runs["command"], "drain"), pc.is_valid(runs["backlog_left"]))
    return runs.filter(pc.fill_null(keep, False))


def depth_over_time(lake: LakeEngine) -> pa.Table:
    """Each queue's depth at every drain's start and end (``DEPTH_SCHEMA``), by queue and time."""
    runs = drain_rows(lake)
    left = runs["backlog_left"]
    before = pa.table(
        {
            "queue": runs["queue"],
            "at": runs["started_at"],
            "depth": pc.add(pc.fill_null(runs["dequeued"], 0), left),
            "when": pa.array(["before"] * runs.num_rows, pa.string()),
        },
        schema=DEPTH_SCHEMA,
    )
    after = pa.table(
        {
            "queue": runs["queue"],
            "at": runs["ended_at"],
            "depth": left,
            "when": pa.array(["after"] * runs.num_rows, pa.string()),
        },
        schema=DEPTH_SCHEMA,
    )
    return pa.concat_tables([before, after]).sort_by(
        [("queue", "ascending"), ("at", "ascending"), ("when", "descending")]
    )


def current_depth(lake: LakeEngine) -> pa.Table:
    """Per queue, the backlog its latest drain left and when: (queue, at, depth)."""
    runs = drain_rows(lake).sort_by([("queue", "ascending"), ("ended_at", "descending")])
    latest: dict[str, tuple[object, int]] = {}
    for queue, ended, left in zip(
        runs["queue"].to_pylist(), runs["ended_at"].to_pylist(), runs["backlog_left"].to_pylist()
    ):
        latest.setdefault(queue, (ended, left))
    return pa.table(
        {
            "queue": pa.array(list(latest), pa.string()),
            "at": pa.array([v[0] for v in latest.values()], table_entry.UTC_TS),
            "depth": pa.array([v[1] for v in latest.values()], pa.int64()),
        }
    )
