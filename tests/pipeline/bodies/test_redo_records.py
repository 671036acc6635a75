"""A bodies increment taken again (a type failed, the next run redoes it) records what the first attempt
did not, once: its record tables' appends carried the first attempt's application transaction and were
skipped, and the type's unparsed rows were lost while the counts said them (a review)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
from pyspark.sql.types import LongType, StringType, StructField, StructType
from queuelake.lake import stage_tables
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.pipeline.bodies import evolve, run
from queuelake.pipeline.bodies.infer import Change

SALES = '"public"."Sales"'


def unparsed(ids: list[int], type_name: str, upto: int) -> pa.Table:
    now = dt.datetime.now(dt.timezone.utc)
    rows = [
        {
            "message_id": f"m{i}",
            "queue": SALES,
            "seq": i,
            "id": f"id{i}",
            "message_type": type_name,
            "type_name": type_name,
            "content_type": "application/json",
            "reason": "malformed JSON",
            "body_start": "{",
            "journal_version": upto,
            "recorded_at": now,
        }
        for i in ids
    ]
    return pa.Table.from_pylist(rows, schema=stage_tables.BODY_UNPARSED.schema)


def test_a_redo_records_the_unparsed_rows_of_the_type_that_failed_once(tmp_path: Path) -> None:
    lake = DeltaRsEngine(str(tmp_path))
    assert run._write_unparsed(lake, [unparsed([1, 2], "B", 2)], None, 2) == 2  # A failed: none of its rows
    # the redo: B's rows again (left out: recorded), A's now
    assert run._write_unparsed(lake, [unparsed([1, 2], "B", 2), unparsed([3, 4], "A", 2)], None, 2) == 2
    assert sorted(lake.read_arrow("body_unparsed")["seq"].to_pylist()) == [1, 2, 3, 4]
    assert run._write_unparsed(lake, [unparsed([5], "A", 3)], 2, 3) == 1  # the next increment as before
    assert run._write_unparsed(lake, [unparsed([5], "A", 3)], 2, 3) == 0
    assert lake.read_arrow("body_unparsed").num_rows == 5


def test_a_redo_records_each_schema_change_once(tmp_path: Path) -> None:
    lake = DeltaRsEngine(str(tmp_path))
    schema = StructType([StructField("Id", LongType()), StructField("Name", StringType())])
    added = Change("Name", "added", None, "string")

    def evolution(table: str, changes: list) -> evolve.Evolution:  # type: ignore[type-arg]
        return evolve.Evolution(table=table, schema=schema, existed=True, changes=changes)

    first = {"A": evolution("body_a", [("1.0.0.0", added)])}
    run._record_changes(lake, "r1", 4, {"A": "body_a"}, first)
    both = {**first, "B": evolution("body_b", [("1.0.0.0", added)])}  # B failed the first time
    run._record_changes(lake, "r2", 4, {"A": "body_a", "B": "body_b"}, both)
    recorded = lake.read_arrow("body_schema_changes").to_pylist()
    assert sorted((r["table"], r["change"], r["column"]) for r in recorded) == [
        ("body_a", "added", "Name"),
        ("body_b", "added", "Name"),
    ]
