"""``round_files``: what publish and replay read their rounds' files with."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from queuelake.lake import round_files


def test_reading_a_files_columns_needs_no_arrow_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``read_table`` opens the file itself: ``pyarrow.parquet.read_table`` goes through
    ``pyarrow.dataset``, whose import imports pandas, 0.2 s of every publish that reads its keys."""
    path = tmp_path / "part-0.parquet"
    pq.write_table(pa.table({"key": ["a", None, "c"], "body": [b"1", b"2", b"3"]}), path)
    monkeypatch.setitem(sys.modules, "pyarrow.dataset", None)  # an import of it now fails
    with pytest.raises(ImportError):
        import pyarrow.dataset  # noqa: F401

    got = round_files.read_table(str(path), ["key"])
    assert got.column_names == ["key"] and got["key"].to_pylist() == ["a", None, "c"]
