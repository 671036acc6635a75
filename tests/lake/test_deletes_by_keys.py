"""A delete by keys (``RowFilter.keys``): delta-rs deletes the rows of more values than an IN list holds
(``MAX_IN_LIST``) in one MERGE commit, each file rewritten once, and readers of the log take that commit
for the delete it is. Why: retention removed 1.5M messages' typed rows in 300 deletes of 5,000 ids, each
rewriting the files its ids were in (20-35 min a rule: a review)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from queuelake.config import from_dict
from queuelake.lake.deletes import MAX_IN_LIST
from queuelake.lake.engines import open_lake
from queuelake.lake.stage_tables import BODY_SCHEMA_CHANGES as CHANGES
from queuelake.pipeline.store import typed

TABLE = "body_orders"
PER_FILE = 4_000


def _lake(root: Path):
    cfg = from_dict({"transport": {"connection": "postgresql://u@h/db"}, "lake": {"root": str(root)}}, env={})
    return open_lake(cfg.lake)


def _typed_table(lake, files: int) -> list[str]:
    """``files`` commits of ``PER_FILE`` typed rows each; their message ids, in order."""
    ids = [f"m-{n:06d}" for n in range(files * PER_FILE)]
    for at in range(files):
        part = ids[at * PER_FILE : (at + 1) * PER_FILE]
        lake.append(TABLE, pa.table({"message_id": part, "total": [1.5] * len(part)}), "bodies", at + 1)
    created = pa.Table.from_pylist([{"table": TABLE, "change": "created"}], CHANGES.schema)
    lake.append(CHANGES.name, created, "bodies", 1)  # the typed tables' registry
    return ids


def test_the_typed_rows_of_many_messages_go_in_one_commit_each_file_rewritten_once(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    ids = _typed_table(lake, files=4)
    gone = ids[: 2 * PER_FILE + 100] + ids[-3:]  # two files whole, a part of the third and of the fourth
    assert len(gone) > MAX_IN_LIST
    before = lake.table_version(TABLE)

    filters = typed.message_filters(lake, TABLE, pa.array([*gone, "m-unknown", None]))
    figures = typed.remove(lake, pa.array(gone), False, "retention")

    assert len(filters) == 1 and filters[0].keys is not None
    # the kept rows of the two partly matching files written anew, as one file
    assert figures[TABLE] == {"rows": len(gone), "files_removed": 4, "files_rewritten": 1}, figures
    assert lake.table_version(TABLE) == before + 1  # one commit
    left = lake.read_arrow(TABLE, columns=["message_id"])["message_id"].to_pylist()
    assert sorted(left) == sorted(set(ids) - set(gone))
    # the commit rewrote kept rows: a reader of the table's increments finds no new row in it
    assert lake.added_files(TABLE, before, before + 1) == []
    assert all(lake.slice_input(TABLE, span)[0] == [] for span in lake.slices(TABLE, before, before + 1, 1_000))


def test_a_delete_by_keys_counts_before_it_deletes_and_finds_nothing_twice(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    ids = _typed_table(lake, files=2)
    (where,) = typed.message_filters(lake, TABLE, pa.array(ids[10:20]))

    assert lake.count_rows(TABLE, where).rows == 10
    first = lake.delete_rows(TABLE, where)
    again = lake.delete_rows(TABLE, where)

    assert (first.rows, first.files_removed, first.files_rewritten) == (10, 1, 1)
    assert first.read_version is not None and first.version == first.read_version + 1
    assert (again.rows, again.version) == (0, None)
    assert typed.message_filters(lake, TABLE, pa.array(ids[10:20])) == []
