"""A replay reads the headers and bodies of a batch's rows from the row groups that hold them, never a
whole journal file: after a compaction into one large file, a retry of 39 messages read all of it and
peaked at 1.29 GB (a review)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from queuelake.errors import ReplayError
from queuelake.lake.round_files import LakeFile
from queuelake.pipeline.replay.rows import HEADERS_TYPE, Content, Row

GROUP_ROWS = 100


def _journal_file(folder: Path, name: str, rows: int) -> str:
    headers = pa.array([[("n", f"{name}-{i}")] for i in range(rows)], HEADERS_TYPE)
    body = pa.array([f"{name}-{i}".encode() for i in range(rows)], pa.binary())
    path = folder / name
    pq.write_table(pa.table({"headers": headers, "body": body}), path, row_group_size=GROUP_ROWS)
    return str(path)


def _row(file: str, index: int) -> Row:
    return Row("error", index, f"id-{index}", None, None, "retry", "Billing", file, index)


def test_a_batch_reads_only_the_row_groups_that_hold_its_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _journal_file(tmp_path, "a.parquet", 1_000), _journal_file(tmp_path, "b.parquet", 250)
    read: list[tuple[str, int]] = []
    whole = LakeFile.read_row_group

    def row_group(self: LakeFile, group: int, columns: list[str] | None = None) -> pa.Table:
        read.append((self._name, group))
        return whole(self, group, columns)

    monkeypatch.setattr(LakeFile, "read", lambda *_a, **_k: pytest.fail("a whole file was read"))
    monkeypatch.setattr(LakeFile, "read_row_group", row_group)
    content = Content([a, b])
    wanted = [("a.parquet", 735), ("b.parquet", 3), ("a.parquet", 5), ("a.parquet", 799), ("b.parquet", 249)]
    got = content.read([_row(f, i) for f, i in wanted])

    assert got.column("body").to_pylist() == [f"{f}-{i}".encode() for f, i in wanted]  # in the order asked
    assert [dict(h) for h in got.column("headers").to_pylist()] == [{"n": f"{f}-{i}"} for f, i in wanted]
    assert sorted(read) == [(a, 0), (a, 7), (b, 0), (b, 2)]  # the groups of rows 735 and 799 read once
    assert len(content.cache) == Content.CACHED_GROUPS  # the last few groups stay, not the files


def test_a_row_the_file_does_not_have_is_said(tmp_path: Path) -> None:
    a = _journal_file(tmp_path, "a.parquet", 10)
    with pytest.raises(ReplayError, match="journal file a.parquet has 10 rows"):
        Content([a]).read([_row("a.parquet", 10)])
