"""Versions cut into slices of bounded rows (``LakeEngine.slices``), from the commits' own row counts:
what lets bodies and transform take a first backlog of millions a slice at a time (issue 57)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow.parquet as pq
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake

from tests.helpers.journal_rows import UTC, append, batch

NOW = dt.datetime(2026, 11, 28, tzinfo=UTC)


def _lake(root: Path):
    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(root), "engine": "delta-rs"}}, env={})
    return open_lake(cfg.lake)


def test_versions_are_cut_at_the_row_limit_and_every_row_is_in_one_slice(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    sizes = [30, 30, 50, 10, 10, 80, 5]
    for i, n in enumerate(sizes):
        append(lake, batch('"public"."Sales"', range(i * 100, i * 100 + n), NOW))
    upto = lake.table_version("messages")
    assert upto is not None
    spans = lake.slices("messages", None, upto, 60)
    assert spans[0][0] is None and spans[-1][1] == upto
    assert all(a_high == b_low for (_, a_high), (b_low, _) in zip(spans, spans[1:]))  # consecutive

    counted = []
    for low, high in spans:
        files = lake.added_files("messages", low, high)
        counted.append(sum(pq.read_metadata(f).num_rows for f in files))
    assert sum(counted) == sum(sizes)
    assert all(n <= 60 for n in counted if n != 80)  # one commit larger than the limit is a slice alone
    assert counted.count(80) == 1 and len(spans) >= 4, (spans, counted)
    # from a checkpoint too, and nothing new is no slice
    assert lake.slices("messages", spans[0][1], upto, 10_000) == [(spans[0][1], upto)]
    assert lake.slices("messages", upto, upto, 10) == []


def test_a_whole_table_with_more_than_appends_is_one_slice(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    for i in range(3):
        append(lake, batch('"public"."Sales"', range(i * 10, i * 10 + 10), NOW))
    lake.maintain("messages")  # a compaction: older files are removed from the snapshot
    upto = lake.table_version("messages")
    assert upto is not None
    assert lake.slices("messages", None, upto, 5) == [(None, upto)]
