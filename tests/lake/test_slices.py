"""Versions cut into slices of bounded rows (``LakeEngine.slices``), from the commits' own row counts:
what lets bodies and transform take a first backlog of millions a slice at a time (issue 57)."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.lake.increments import Span

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
    assert all(a.upto == b.after for a, b in zip(spans, spans[1:]))  # consecutive

    counted = []
    for low, high, *_ in spans:
        files = lake.added_files("messages", low, high)
        counted.append(sum(pq.read_metadata(f).num_rows for f in files))
    assert sum(counted) == sum(sizes)
    assert all(n <= 60 for n in counted if n != 80)  # one commit larger than the limit is a slice alone
    assert counted.count(80) == 1 and len(spans) >= 4, (spans, counted)
    # from a checkpoint too, and nothing new is no slice
    assert lake.slices("messages", spans[0][1], upto, 10_000) == [Span(spans[0][1], upto)]
    assert lake.slices("messages", upto, upto, 10) == []


def _span_rows(lake, span) -> list[int]:
    """The seqs a slice reads: its files' rows of its batch ids (every row when it names none)."""
    files, batches = lake.slice_input("messages", span)
    out = []
    for f in files:
        table = pq.read_table(f, columns=["seq", "batch_id"])
        for seq, batch_id in zip(table["seq"].to_pylist(), table["batch_id"].to_pylist()):
            if batches is None or batch_id in batches:
                out.append(seq)
    return sorted(out)


@pytest.mark.parametrize("retention_hours", [0, 168], ids=["vacuumed", "not-vacuumed"])
def test_a_whole_table_a_compaction_rewrote_is_cut_by_batch_ids_and_every_row_is_read_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, retention_hours: int
) -> None:
    """A stage's first run on a journal ``maintain`` compacted: once vacuumed, the files the versions
    added are gone, so each slice reads the compacted files and keeps its versions' batches (before
    the vacuum, the files the compaction removed). It took the whole table in one slice (a review:
    4.8M rows, the memory of the backlog)."""
    lake = _lake(tmp_path)
    for i in range(6):
        append(lake, batch('"public"."Sales"', range(i * 10, i * 10 + 10), NOW))
    lake.maintain("messages", retention_hours=retention_hours)  # a compaction (and a vacuum)
    upto = lake.table_version("messages")
    assert upto is not None
    with caplog.at_level(logging.WARNING, logger="queuelake"):
        spans = lake.slices("messages", None, upto, 25)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert len(spans) == 3 and spans[0].after is None and spans[-1].upto == upto, spans
    assert all(a.upto == b.after for a, b in zip(spans, spans[1:]))  # consecutive versions: real checkpoints
    read = [_span_rows(lake, span) for span in spans]
    assert [len(r) for r in read] == [20, 20, 20], read
    assert sorted(sum(read, [])) == list(range(60))
    assert lake.slices("messages", None, upto, 1_000) == [Span(None, upto)]  # within one slice


def test_a_slice_of_a_compacted_table_reads_only_the_files_its_rows_may_be_in(tmp_path: Path) -> None:
    """A compaction keeps the rows' order: each file it writes holds a run of the appends it merged, and
    its commit names them all alike. A slice reads the files whose ``drained_at`` statistics meet its own
    versions' (a review's first run after a ``maintain`` scanned every file once per slice: 2.2 times
    slower than taking the whole journal at once)."""
    import glob
    import os

    from deltalake import DeltaTable

    lake = _lake(tmp_path)
    for i in range(12):
        drained = NOW + dt.timedelta(minutes=i)
        append(lake, batch('"public"."Sales"', range(i * 10, i * 10 + 10), drained))
    table = DeltaTable(lake.path("messages"))
    size = sum(os.path.getsize(f) for f in glob.glob(lake.path("messages") + "/*.parquet")) // 12
    table.optimize.compact(target_size=3 * size)  # files of about three appends each
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    compacted = len(lake.added_files("messages", None, lake.table_version("messages")))
    assert compacted >= 3, compacted
    upto = lake.table_version("messages")
    spans = lake.slices("messages", None, upto, 30)
    assert len(spans) == 4, spans
    assert all(span.files is not None and 0 < len(span.files) < compacted for span in spans), spans
    assert all(s.drained is not None and s.drained[0] < s.drained[1] for s in spans), spans
    assert sorted(sum((_span_rows(lake, s) for s in spans), [])) == list(range(120))


def test_a_first_run_after_an_erase_reads_the_kept_rows_once_and_resumes_exactly(tmp_path: Path) -> None:
    """An erase between the drain and a stage's first run, and more rows after: the slices read every
    kept row once. A run stopped after its first slice resumes from that slice's version by the usual
    increments (which follow the erase's files), and reads the rest exactly, a second erase included."""
    from queuelake.pipeline.store.erase import erase

    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path), "engine": "delta-rs"}}, env={})
    lake = open_lake(cfg.lake)
    for k in range(6):
        append(
            lake,
            batch('"public"."Sales"', range(k * 10, k * 10 + 10), NOW, message_ids=[f"m-{k}{i}" for i in range(10)]),
        )
    erase(cfg, lake, "message_id IN ('m-03', 'm-27', 'm-51')")  # purged at once: three appends' files gone
    for k in range(6, 8):
        append(
            lake,
            batch('"public"."Sales"', range(k * 10, k * 10 + 10), NOW, message_ids=[f"m-{k}{i}" for i in range(10)]),
        )
    upto = lake.table_version("messages")
    assert upto is not None
    expected = [s for s in range(80) if s not in (3, 27, 51)]
    spans = lake.slices("messages", None, upto, 20)
    assert len(spans) == 4, spans
    assert sorted(sum((_span_rows(lake, s) for s in spans), [])) == expected

    # stopped after the first slice: the next run goes on from its version, after one more erase
    done = _span_rows(lake, spans[0])
    erase(cfg, lake, "message_id IN ('m-45', 'm-71')")
    later = lake.table_version("messages")
    assert later is not None
    rest = lake.slices("messages", spans[0].upto, later, 20)
    # cut too, by batch id: the erases' files mix rows the first slice read with new ones (the rest was one
    # slice, the backlog's memory, when a scheduler stopped and restarted a big first run: two reviews)
    assert len(rest) >= 3 and all(span.files is not None for span in rest), rest
    read = sorted(done + sum((_span_rows(lake, s) for s in rest), []))
    assert read == [s for s in expected if s not in (45, 71)], read  # each kept row once


def test_a_whole_table_a_writer_without_batch_ids_rewrote_is_one_slice_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows no drain wrote (no batch id in their commit) cannot be told apart in a rewritten file: the
    first run takes the whole table in one slice, and says so (its memory follows the whole table)."""
    lake = _lake(tmp_path)
    for i in range(3):
        append(lake, batch('"public"."Sales"', range(i * 10, i * 10 + 10), NOW))
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "messages"), batch('"public"."Sales"', range(30, 40), NOW), mode="append")
    lake.maintain("messages")
    upto = lake.table_version("messages")
    assert upto is not None
    with caplog.at_level(logging.WARNING, logger="queuelake"):
        assert lake.slices("messages", None, upto, 5) == [Span(None, upto)]
    [said] = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"messages: versions up to {upto} taken in one slice, not slices of 5 row(s)"), said
    assert "a commit without a batch id" in said, said


def _rows(lake, after: int | None, upto: int) -> list[int]:
    return sorted(s for f in lake.added_files("messages", after, upto) for s in pq.read_table(f)["seq"].to_pylist())


def test_an_erase_before_the_stage_leaves_the_increment_readable_and_exact(tmp_path: Path) -> None:
    """A drain's file erased from (and purged) before a stage read it: the increment names the erase's
    file instead, which holds the rows it kept, each once (it named the purged file, and every later
    ``bodies`` and ``transform`` failed on it)."""
    from queuelake.pipeline.store.erase import erase

    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path), "engine": "delta-rs"}}, env={})
    lake = open_lake(cfg.lake)
    append(lake, batch('"public"."Sales"', range(0, 10), NOW, message_ids=[f"a-{i}" for i in range(10)]))
    seen = lake.table_version("messages")
    for k in (1, 2, 3):
        ids = [f"b-{k}{i}" for i in range(10)]
        append(lake, batch('"public"."Sales"', range(k * 10, k * 10 + 10), NOW, message_ids=ids))
    deleted_at = lake.table_version("messages") + 1  # the erase's delete commit (its purge commits follow)
    assert erase(cfg, lake, "message_id IN ('b-17', 'b-33')")["tables"]["messages"]["files_vacuumed"] >= 2
    upto = lake.table_version("messages")
    assert seen is not None and upto is not None
    expected = [s for s in range(10, 40) if s not in (17, 33)]
    assert _rows(lake, seen, upto) == expected
    # sliced by batch id (the erase's file holds rows of several versions): every row in one slice
    spans = lake.slices("messages", seen, upto, 10)
    assert len(spans) == 3 and all(span.files is not None for span in spans), spans
    assert sorted(sum((_span_rows(lake, span) for span in spans), [])) == expected, spans
    # before the erase, the same commits are cut at every version (10 rows each)
    assert len(lake.slices("messages", seen, deleted_at - 1, 10)) == 3

    # more rows, then a second erase of a row the first one's file kept: followed through both
    append(lake, batch('"public"."Sales"', range(40, 50), NOW, message_ids=[f"c-{i}" for i in range(10)]))
    again_at = lake.table_version("messages") + 1
    erase(cfg, lake, "message_id = 'b-15'")
    upto = lake.table_version("messages")
    expected = [s for s in range(10, 50) if s not in (15, 17, 33)]
    assert _rows(lake, seen, upto) == expected
    spans = lake.slices("messages", seen, upto, 10)
    assert len(spans) == 4 and again_at <= upto, spans
    assert sorted(sum((_span_rows(lake, span) for span in spans), [])) == expected, spans


def test_an_erase_of_rows_read_before_and_new_ones_loses_no_new_row(tmp_path: Path) -> None:
    """One erase over a file the stage read and a new one: delta-rs writes their kept rows into one file,
    which the increment reads whole (the earlier file's kept rows are read again, with a warning);
    no new row is lost."""
    from queuelake.pipeline.store.erase import erase

    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path), "engine": "delta-rs"}}, env={})
    lake = open_lake(cfg.lake)
    append(lake, batch('"public"."Sales"', range(0, 10), NOW, message_ids=[f"a-{i}" for i in range(10)]))
    seen = lake.table_version("messages")
    append(lake, batch('"public"."Sales"', range(10, 20), NOW, message_ids=[f"b-{i}" for i in range(10)]))
    erase(cfg, lake, "message_id IN ('a-1', 'b-1')")
    upto = lake.table_version("messages")
    assert seen is not None and upto is not None
    rows = _rows(lake, seen, upto)
    assert set(range(10, 20)) - {11} <= set(rows) and 11 not in rows and 1 not in rows


def test_a_mixed_erase_is_read_exactly_by_the_ranges_batches(tmp_path: Path) -> None:
    """The same erase over a file read before and a new one: ``added_batches`` names the range's batches,
    and a transform's rows (``new_landed``, ``count_landed``) are the new ones only, each once (the
    earlier file's kept rows were counted again)."""
    from queuelake.pipeline.store.erase import erase
    from queuelake.pipeline.transform import count_landed

    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path), "engine": "delta-rs"}}, env={})
    lake = open_lake(cfg.lake)
    append(lake, batch('"public"."Sales"', range(0, 10), NOW, message_ids=[f"a-{i}" for i in range(10)]))
    seen = lake.table_version("messages")
    append(lake, batch('"public"."Sales"', range(10, 20), NOW, message_ids=[f"b-{i}" for i in range(10)]))
    append(lake, batch('"public"."Sales"', range(20, 25), NOW, message_ids=[f"c-{i}" for i in range(5)]))
    assert lake.added_batches("messages", seen, lake.table_version("messages")) is None  # appends only
    erase(cfg, lake, "message_id IN ('a-1', 'b-1')")
    upto = lake.table_version("messages")
    assert seen is not None and upto is not None
    batches = lake.added_batches("messages", seen, upto)
    assert batches is not None and len(batches) == 2
    files = lake.added_files("messages", seen, upto)
    kept = [
        s
        for f in files
        for s, b in zip(pq.read_table(f)["seq"].to_pylist(), pq.read_table(f)["batch_id"].to_pylist())
        if b in batches
    ]
    assert sorted(kept) == [s for s in range(10, 25) if s != 11]
    assert count_landed(files, batches) == 14
    assert count_landed(files) > 14  # read whole, the earlier file's kept rows are there too


def test_a_group_commit_of_several_batches_of_one_worker_is_read_whole(tmp_path: Path) -> None:
    """A group commit (drain processes, or a commit interval) writes batches 2 to 4 of a worker in one
    commit, whose transaction says only 4: the filter named batch 4 alone, and a transform after a mixed
    erase dropped batches 2 and 3 silently (found by a review: 60 of 90 rows). Every version after the
    one committed before the range is named."""
    import pyarrow as pa
    from queuelake.pipeline.store.erase import erase
    from queuelake.pipeline.transform import count_landed

    from tests.helpers.journal_rows import APP

    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path), "engine": "delta-rs"}}, env={})
    lake = open_lake(cfg.lake)
    append(lake, batch('"public"."Sales"', range(0, 10), NOW, message_ids=[f"a-{i}" for i in range(10)]))  # v 1
    seen = lake.table_version("messages")
    group = batch('"public"."Sales"', range(10, 40), NOW, message_ids=[f"b-{i}" for i in range(30)])
    ids = pa.array([f"{APP}:{2 + i // 10}" for i in range(30)], pa.string())  # batches 2, 3 and 4
    group = group.set_column(group.schema.get_field_index("batch_id"), "batch_id", ids)
    assert lake.append("messages", group, APP, 4)  # one commit, its transaction: version 4
    erase(cfg, lake, "message_id IN ('a-1', 'b-1')")
    upto = lake.table_version("messages")
    assert seen is not None and upto is not None
    batches = lake.added_batches("messages", seen, upto)
    assert batches == [f"{APP}:2", f"{APP}:3", f"{APP}:4"]
    assert count_landed(lake.added_files("messages", seen, upto), batches) == 29


def test_a_file_s_row_groups_within_a_drained_range(tmp_path: Path) -> None:
    """What a rewritten first run's slice reads of a compacted file: the row groups whose ``drained_at``
    statistics meet its rows' (a compaction keeps the order the rows were drained in)."""
    import pyarrow as pa
    from queuelake.lake.round_files import open_file

    times = [NOW + dt.timedelta(minutes=i) for i in range(40)]
    path = tmp_path / "compacted.parquet"
    pq.write_table(pa.table({"drained_at": pa.array(times, pa.timestamp("us", "UTC"))}), path, row_group_size=10)
    opened = open_file(str(path))
    assert opened.row_groups_within("drained_at", times[12], times[25]) == [1, 2]
    assert opened.row_groups_within("drained_at", times[0], times[39]) == [0, 1, 2, 3]
    assert opened.row_groups_within("drained_at", NOW - dt.timedelta(days=1), NOW - dt.timedelta(hours=1)) == []
    assert opened.row_groups_within("no_such_column", times[0], times[1]) == [0, 1, 2, 3]  # unknown: read


def test_a_delete_after_a_compaction_whose_removed_files_remain_is_not_read_again(tmp_path: Path) -> None:
    """A compaction's removed files are read in its stead until vacuum; a retention delete the next day
    rewrote one of the compaction's files, and the removed files still named gave back the rows it had
    deleted (bodies wrote typed rows of messages retention removed). Both an increment and a first run."""
    import pyarrow.dataset as ds
    from queuelake.lake.deletes import RowFilter

    lake = _lake(tmp_path)
    append(lake, batch('"public"."Sales"', range(0, 10), NOW))
    seen = lake.table_version("messages")
    for i in range(1, 6):
        append(lake, batch('"public"."Sales"', range(i * 10, i * 10 + 10), NOW))
    lake.maintain("messages")  # a compaction; its removed files stay for the week of the vacuum's retention
    lake.delete_rows("messages", RowFilter('"seq" = 15', ds.field("seq") == 15, ("seq",)))
    upto = lake.table_version("messages")
    assert seen is not None and upto is not None
    files, batches = lake.added_files("messages", seen, upto), lake.added_batches("messages", seen, upto)
    increment = []
    for f in files:
        table = pq.read_table(f, columns=["seq", "batch_id"])
        increment += [
            s for s, b in zip(table["seq"].to_pylist(), table["batch_id"].to_pylist()) if b in (batches or [b])
        ]
    assert sorted(increment) == [s for s in range(10, 60) if s != 15]
    spans = lake.slices("messages", None, upto, 20)
    assert len(spans) > 1 and sorted(sum((_span_rows(lake, s) for s in spans), [])) == [s for s in range(60) if s != 15]


@pytest.mark.parametrize("vacuumed", [True, False], ids=["vacuumed", "not-vacuumed"])
def test_a_later_run_over_a_compaction_of_rows_read_before_and_new_ones_is_cut_and_reads_each_new_row_once(
    tmp_path: Path, vacuumed: bool
) -> None:
    """Rows a stage read, then many new ones, then a compaction merging both (and an erase's purge):
    the stage's next increment could not be cut between the new rows' commits, and took 5M rows in one
    slice (a review). It is cut by batch id: each slice keeps its versions' batches, so none of the rows
    read before comes back and every new row is read once."""
    from deltalake import DeltaTable

    lake = _lake(tmp_path)
    for i in range(4):  # read by the stage's last run
        append(lake, batch('"public"."Sales"', range(i * 10, i * 10 + 10), NOW + dt.timedelta(minutes=i)))
    seen = lake.table_version("messages")
    for i in range(4, 12):  # new since, 80 rows
        append(lake, batch('"public"."Sales"', range(i * 10, i * 10 + 10), NOW + dt.timedelta(minutes=i)))
    table = DeltaTable(lake.path("messages"))
    table.optimize.compact()  # one file of old and new rows
    if vacuumed:
        table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    upto = lake.table_version("messages")
    assert seen is not None and upto is not None
    spans = lake.slices("messages", seen, upto, 25)
    assert len(spans) == 4 and spans[0].after == seen and spans[-1].upto == upto, spans
    assert sorted(sum((_span_rows(lake, s) for s in spans), [])) == list(range(40, 120)), spans
