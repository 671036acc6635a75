"""A compaction of wide rows writes row groups bounded by bytes, so that the next one can read them back
(delta-rs, no Spark, no database)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from queuelake.lake.delta_rs import row_groups
from queuelake.lake.delta_rs.engine import DeltaRsEngine


def _wide_rows(first: int, count: int, width: int) -> pa.Table:
    """``count`` rows of a distinct text ``width`` bytes long (repeated values would shrink the footer's
    sizes to a dictionary's)."""
    ids = range(first, first + count)
    return pa.table({"n": pa.array(ids, pa.int64()), "text": pa.array([f"{i:08d}" * (width // 8) for i in ids])})


def _row_groups(lake: DeltaRsEngine, table: str) -> list[int]:
    dt = DeltaTable(lake.path(table))
    return [
        meta.row_group(g).num_rows
        for meta in (pq.ParquetFile(uri).metadata for uri in dt.file_uris())
        for g in range(meta.num_row_groups)
    ]


def test_a_compaction_of_wide_rows_bounds_its_row_groups_by_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 20 KB a row and 1 MB a row group, no compacted row group holds more than 52 rows; a table of
    narrow rows keeps deltalake's own sizes (one row group for all)."""
    monkeypatch.setattr(row_groups, "ROW_GROUP_BYTES", 2**20)
    lake = DeltaRsEngine(str(tmp_path / "lake"))
    for version in range(1, 11):
        lake.append("body_acme_wide", _wide_rows(version * 100, 40, 20_000), "app", version)
        lake.append("body_acme_narrow", _wide_rows(version * 100, 40, 8), "app", version)
    wide = lake.maintain("body_acme_wide", retention_hours=0)
    narrow = lake.maintain("body_acme_narrow", retention_hours=0)
    assert wide["files_compacted"] == 10 and narrow["files_compacted"] == 10, (wide, narrow)
    groups = _row_groups(lake, "body_acme_wide")
    assert sum(groups) == 400 and max(groups) <= 2**20 // 20_000, groups
    assert _row_groups(lake, "body_acme_narrow") == [400]
    assert sorted(lake.read_arrow("body_acme_wide")["n"].to_pylist()) == sorted(
        n for v in range(1, 11) for n in range(v * 100, v * 100 + 40)
    )


def test_a_table_without_files_keeps_the_rows_asked(tmp_path: Path) -> None:
    lake = DeltaRsEngine(str(tmp_path / "lake"))
    lake.create_table("t", _wide_rows(0, 1, 8).schema)
    assert row_groups.bounded_rows(DeltaTable(lake.path("t")), 10_000) == 10_000
    assert row_groups.bounded_rows(DeltaTable(lake.path("t")), None) == row_groups.DEFAULT_ROWS


@pytest.mark.slow
def test_a_typed_table_of_megabyte_fields_is_compacted_again_and_again(tmp_path: Path) -> None:
    """The real sizes: 3,000 rows of 1 MB text (3 GB). A first compaction wrote them as one row group
    and the second panicked reading it back ("byte array offset overflow": 32-bit offsets), run after
    run (a review: maintain failed on a typed table of 2 MB bodies)."""
    lake = DeltaRsEngine(str(tmp_path / "lake"))
    for version in range(1, 31):
        lake.append("body_acme_big", _wide_rows(version * 1000, 100, 1_000_000), "app", version)
    first = lake.maintain("body_acme_big", retention_hours=0)
    lake.append("body_acme_big", _wide_rows(0, 1, 8), "app", 31)
    second = lake.maintain("body_acme_big", retention_hours=0)
    assert first["files_compacted"] == 30 and second["files_compacted"] >= 1, (first, second)
    groups = _row_groups(lake, "body_acme_big")
    assert sum(groups) == 3001 and max(groups) <= row_groups.ROW_GROUP_BYTES // 1_000_000, groups


@pytest.mark.parametrize("value", ["2026-12-01", "2026-12-01T10:00:00.000000Z", "Sales Team", "50%"])
def test_a_partitioned_table_whose_values_delta_escapes_is_compacted(tmp_path: Path, value: str) -> None:
    """The widest files' footers were opened as the table's ``file://`` URI plus the log's decoded path,
    which pyarrow decoded once more: a partition folder Hive-escaped (``p=...10%3A00...``) or holding a
    space was not found, and ``maintain`` failed on such a table at every run (a review)."""
    lake = DeltaRsEngine(str(tmp_path / "a lake"))
    schema = pa.schema([("body", pa.string()), ("p", pa.string())])
    lake.create_table("by_value", schema, ["p"])
    for i in range(3):
        rows = pa.table({"body": [f"{i:04d}{j:04d}" * 100 for j in range(10)], "p": [value] * 10}, schema=schema)
        lake.append("by_value", rows, "app", i + 1)
    assert row_groups.widest_row_bytes(DeltaTable(lake.path("by_value"))) > 0
    lake.maintain("by_value")
    dt = DeltaTable(lake.path("by_value"))
    assert len(dt.file_uris()) == 1 and dt.to_pyarrow_table().num_rows == 30


def test_a_corrupt_commit_in_the_log_names_its_table(tmp_path: Path) -> None:
    """A commit file deltalake cannot parse failed every command with deltalake's words alone, no table
    named (a review); the error names the lake table and its path now."""
    from queuelake.errors import LakeError, describe

    lake = DeltaRsEngine(str(tmp_path / "lake"))
    lake.append("body_acme_order", _wide_rows(0, 3, 16), "app", 1)
    commit = tmp_path / "lake" / "body_acme_order" / "_delta_log" / "00000000000000000001.json"
    commit.write_text("{not json\n")
    with pytest.raises(LakeError, match=r"lake table body_acme_order at .*body_acme_order: ") as caught:
        lake.table_version("body_acme_order")
    assert "Json error" in str(caught.value) and "<unknown>" not in describe(caught.value), str(caught.value)
