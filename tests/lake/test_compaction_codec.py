"""A compaction keeps the journal compressed: ``maintain`` gave delta-rs writer properties with the
journal's row-group size and no codec, and deltalake then writes UNCOMPRESSED (a review: the journal
grew from 1.2 GB to 3.9 GB at its first ``maintain``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from queuelake.lake import catalogue
from queuelake.lake.delta_rs.engine import DeltaRsEngine


def test_a_compacted_journal_is_written_with_the_journals_codec(tmp_path: Path) -> None:
    lake = DeltaRsEngine(str(tmp_path))
    assert catalogue.row_group_rows("messages"), "the journal compacts with a row-group size of its own"
    for v in range(1, 4):
        ids = [f"id-{v}-{i}" for i in range(500)]
        lake.append("messages", pa.table({"id": ids, "body": [b"x" * 200] * 500}), "w", v)
    assert lake.maintain("messages", retention_hours=0)["files_compacted"] == 3
    codecs = set()
    for uri in DeltaTable(lake.path("messages")).file_uris():
        meta = pq.ParquetFile(uri.removeprefix("file://")).metadata
        codecs |= {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups) for c in range(2)}
    assert codecs == {"SNAPPY"}, codecs
