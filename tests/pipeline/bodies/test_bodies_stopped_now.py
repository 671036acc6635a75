"""A bodies run stopped now (a second signal) inside a slice, after some of its types' tables had
committed: those rows are counted by the stopped run (summary and ``runs``), and the slice's redo does not
count them again. Real PostgreSQL, drain, Spark and Delta; the stop is raised in the second type's write and
those after it, as a second signal's cancelled Spark jobs end them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from queuelake import stopping
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.lake.reading import read_table
from queuelake.pipeline.bodies import run as bodies_run
from queuelake.pipeline.bodies import typed_append
from queuelake.transport import db, installer

from tests.helpers.bodies import send
from tests.helpers.bodies_corpus import corpus as c
from tests.helpers.stages import drain


def test_the_tables_a_stopped_slice_committed_are_counted_once(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = from_dict(
        {
            "transport": {"connection": fresh_pg_uri},
            "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
            "drain": {"queues": ["Sales"], "batch_size": 50},
            "bodies": {"parallel_tables": 1},  # the types in order: the first commits, the second stops
        },
        env={},
    )
    with db.connect(cfg.transport) as conn:  # type: ignore[attr-defined]
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    send(cfg, "Sales", list(c.corpus()))
    lake = open_lake(cfg.lake, spark)  # type: ignore[attr-defined]
    assert drain(cfg, lake)["status"] == "ok"
    write_type = typed_append.write_type
    calls: list[str] = []

    def stopped_at_the_second(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(args[3])
        if len(calls) >= 2:  # as the stop's cancelled Spark jobs end every write after it
            raise KeyboardInterrupt
        return write_type(*args, **kwargs)

    monkeypatch.setattr(typed_append, "write_type", stopped_at_the_second)
    with pytest.raises(KeyboardInterrupt) as stopped:
        bodies_run.bodies(cfg, spark, lake)
    monkeypatch.setattr(typed_append, "write_type", write_type)
    done = stopping.done_before(stopped.value)["bodies"]
    [first] = [t for t in done["tables"] if t["table"] != "body_increments"]
    assert first["rows_out"] > 0 and done["rows_written"] == first["rows_out"], done
    runs = read_table(str(tmp_path / "lake" / "runs")).to_pylist()
    assert any(r["run_id"] == done["run_id"] and r["table"] == first["table"] for r in runs), runs

    again = bodies_run.bodies(cfg, spark, lake)
    assert again["status"] == "ok", again
    runs = read_table(str(tmp_path / "lake" / "runs")).to_pylist()
    counted = Counter()
    for r in runs:
        if r["command"] == "bodies" and r["table"].startswith("body_") and r["table"] != "body_increments":
            counted[r["table"]] += r["rows_out"] or 0
    for table, rows in counted.items():
        if table != "body_unparsed":
            assert rows == len(read_table(str(tmp_path / "lake" / table))), (table, counted)
    assert counted[first["table"]] == first["rows_out"], counted  # the redo did not count them again
