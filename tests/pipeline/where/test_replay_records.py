"""``where``'s replay records: a resumed replay has several ``replays`` rows, and the last run, by when it
started, is the one shown (a review: the first, interrupted run was shown over the run that finished it,
as the table's rows came back newest first)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.lake.record_tables import REPLAYS
from queuelake.pipeline.where.places import Place
from queuelake.pipeline.where.run import Answer, _replay_records

UTC = dt.timezone.utc


def test_the_run_that_started_last_is_the_replays_record(tmp_path: Path) -> None:
    lake = open_lake(from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path)}}, env={}).lake)
    first = dt.datetime(2026, 12, 1, 7, 30, 40, tzinfo=UTC)
    runs = [  # newest first, as the reader may give them
        {"run_id": "resumed", "started_at": first + dt.timedelta(minutes=1), "total_sent": 500_000, "status": "ok"},
        {"run_id": "first", "started_at": first, "total_sent": 230_000, "status": "interrupted"},
    ]
    rows = [
        {"replay_id": "r1", "ended_at": r["started_at"] + dt.timedelta(seconds=30), "predicate": "TRUE", **r}
        for r in runs
    ]
    lake.create_table(REPLAYS.name, REPLAYS.schema)
    lake.append(REPLAYS.name, pa.Table.from_pylist(rows, REPLAYS.schema), "t", 1)
    answer = Answer(places=[Place("replayed", "m1", '"public"."Sales"', facts={"replay_id": "r1"})])
    _replay_records(lake, answer)
    record = answer.replays["r1"]
    assert (record["run_id"], record["total_sent"], record["status"]) == ("resumed", 500_000, "ok"), record
