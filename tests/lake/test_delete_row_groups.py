"""A delete writes the kept rows of the files it reaches as the table's own row groups, as a compaction
does: an erase of 3 ids rewrote three journal files as one file of one 404,229-row group (571 MB), and
every later `find` or replay read of it took 2 GB, until a compaction (a review)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from queuelake.config import from_dict
from queuelake.lake import catalogue
from queuelake.lake.deletes import RowFilter
from queuelake.lake.engines import open_lake
from queuelake.pipeline.store import typed

from tests.helpers.journal_rows import UTC, append, batch

WHEN = dt.datetime(2026, 12, 1, tzinfo=UTC)


def _groups(root: Path, table: str) -> list[int]:
    """The rows of each row group of the table's current files."""
    from deltalake import DeltaTable

    return [
        meta.row_group(g).num_rows
        for uri in DeltaTable(str(root / table)).file_uris()
        for meta in [pq.ParquetFile(uri.removeprefix("file://")).metadata]
        for g in range(meta.num_row_groups)
    ]


def test_the_files_a_delete_writes_anew_have_the_tables_row_groups(tmp_path: Path) -> None:
    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path), "engine": "delta-rs"}}, env={})
    lake = open_lake(cfg.lake)
    own = catalogue.row_group_rows("messages")
    assert own is not None
    rows = 2 * own + 500
    append(lake, batch('"public"."audit"', range(1, rows + 1), WHEN))  # one file
    assert _groups(tmp_path, "messages") == [own, own, 500]

    # by a predicate (the journal's erase and retention)
    gone = lake.delete_rows("messages", RowFilter('"seq" IN (7, 8, 9)', ds.field("seq").isin([7, 8, 9]), ("seq",)))
    assert gone.rows == 3
    assert sum(_groups(tmp_path, "messages")) == rows - 3 and max(_groups(tmp_path, "messages")) <= own

    # by keys, one MERGE (the typed tables' rows of erased or expired messages)
    ids = [f"m-{n}" for n in range(rows)]
    lake.append("body_orders", pa.table({"message_id": ids, "note": ["x" * 50] * rows}), "bodies", 1)
    (where,) = typed.message_filters(lake, "body_orders", pa.array(ids[:2_000]))
    assert where.keys is not None and lake.delete_rows("body_orders", where).rows == 2_000
    assert sum(_groups(tmp_path, "body_orders")) == rows - 2_000
