"""``maintain`` goes on past a table whose maintenance fails, naming it (delta-rs, no Spark, no database)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa
import pytest
from queuelake.commands.maintain import maintain
from queuelake.lake.delta_rs.engine import DeltaRsEngine


def test_one_tables_failure_leaves_the_others_maintained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """deltalake's compaction panicked on a typed table of 2 MB bodies ("byte array offset overflow"), and
    the command ended there: the tables after it, the journal among them, went unmaintained run after run
    (a review)."""
    root = tmp_path / "lake"
    lake = DeltaRsEngine(str(root))
    rows = pa.table({"n": pa.array([1, 2], pa.int64())})
    for table in ("body_acme_thing", "zeta"):
        lake.create_table(table, rows.schema)
        for version in (1, 2):
            lake.append(table, rows, "app", version)
    config = tmp_path / "c.yaml"
    config.write_text(f"lake: {{root: '{root}', engine: delta-rs}}\n")
    real = DeltaRsEngine.maintain

    def panics_on_the_typed_table(self: DeltaRsEngine, table: str, *args: object, **kwargs: object) -> dict:
        if table == "body_acme_thing":
            raise RuntimeError("DeltaError: Generic error: task 815 panicked with message byte array offset overflow")
        return real(self, table, *args, **kwargs)

    monkeypatch.setattr(DeltaRsEngine, "maintain", panics_on_the_typed_table)
    summary = maintain(argparse.Namespace(config=str(config), dry_run=False))
    assert summary["status"] == "failed" and summary["failed_tables"] == ["body_acme_thing"], summary
    assert summary["error"].startswith("lake table body_acme_thing: ") and "offset overflow" in summary["error"]
    assert summary["tables"]["zeta"]["files_compacted"] == 2, summary["tables"]
    assert sorted(lake.read_arrow("zeta")["n"].to_pylist()) == [1, 1, 2, 2]
