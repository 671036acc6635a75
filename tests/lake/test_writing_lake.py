"""The lake of ``maintain`` and ``erase`` (``sessions.writing_lake``): on ``lake.engine: auto``, a lake whose
every table delta-rs made needs no Spark session. ``maintain`` on the demo's lake spent ~30 s starting one
and logged nothing meanwhile (a review)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from queuelake.commands.sessions import active_spark, writing_lake
from queuelake.config import from_dict
from queuelake.lake.delta_rs.engine import DeltaRsEngine


def test_auto_on_a_lake_delta_rs_made_starts_no_session(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    made = DeltaRsEngine(str(root))
    for table in ("messages", "runs", "body_sales_orderplaced"):
        made.create_table(table, pa.schema([("id", pa.string())]))
    cfg = from_dict(
        {"transport": {"connection": "postgresql://u@h/d"}, "lake": {"root": str(root), "engine": "auto"}}, env={}
    )
    if active_spark() is not None:  # never in the fast tier; a process that ran Spark tests first keeps one
        pytest.skip("an earlier test's Spark session is active in this process, and auto uses a session it finds")
    lake = writing_lake(cfg)
    assert active_spark() is None, "a Spark session was started"
    assert lake.name == "delta-rs" and sorted(lake.tables()) == ["body_sales_orderplaced", "messages", "runs"]
    assert lake.maintain("messages")["files_after"] == 0
