"""A ``runs`` table an older version made lacks the columns added since: its readers take them as nulls (a
review: ``where`` failed with ``KeyError: no such column(s): predicate`` on a lake made before erase existed,
until a command of the new version wrote a row)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.lake.record_tables import RUNS
from queuelake.pipeline.health.depth import drain_rows
from queuelake.pipeline.runs import read_runs
from queuelake.pipeline.where.run import Answer, _records

UTC = dt.timezone.utc
ADDED_SINCE = ("rows_removed", "files_removed", "files_rewritten", "predicate", "backlog_left")


def test_an_old_runs_table_reads_its_missing_columns_as_nulls(tmp_path: Path) -> None:
    lake = open_lake(from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path)}}, env={}).lake)
    old = pa.schema([f for f in RUNS.schema if f.name not in ADDED_SINCE])
    lake.create_table(RUNS.name, old)
    when = dt.datetime(2026, 1, 5, tzinfo=UTC)
    row = {"run_id": "r1", "command": "drain", "queue": '"public"."Sales"', "started_at": when, "ended_at": when}
    lake.append(RUNS.name, pa.Table.from_pylist([{**row, "status": "ok", "dequeued": 3}], old), "t", 1)

    rows = read_runs(lake, ["run_id", "command", "predicate", "backlog_left"])
    assert rows.to_pylist() == [{"run_id": "r1", "command": "drain", "predicate": None, "backlog_left": None}]
    assert drain_rows(lake).num_rows == 0  # no backlog recorded: no depth point
    answer = Answer(searched=("m1",))
    _records(lake, answer, "message")
    assert answer.erase_runs == 0 and not answer.places
