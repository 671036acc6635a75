"""A delta-rs lake of one small table ``t`` (an id, a number and a time), its rows made by prefix, and the
count of deltalake's table loads: what the append log's, the log head's and the checkpoints' tests start from."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from queuelake.lake.delta_rs.engine import DeltaRsEngine

SCHEMA = pa.schema([("id", pa.string()), ("n", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def rows(prefix: str, count: int) -> pa.Table:
    return pa.table(
        {"id": [f"{prefix}-{i}" for i in range(count)], "n": list(range(count)), "at": [T0] * count},
        schema=SCHEMA,
    )


def engine(root: Path) -> DeltaRsEngine:
    lake = DeltaRsEngine(str(root))
    lake.create_table("t", SCHEMA)
    return lake


def count_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of every deltalake load made from now on (``DeltaTable(...)``), until ``monkeypatch.undo``."""
    import deltalake

    loads: list[str] = []

    class Counted(DeltaTable):
        def __init__(self, *args, **kwargs) -> None:
            loads.append(str(args[0]))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(deltalake, "DeltaTable", Counted)
    return loads
