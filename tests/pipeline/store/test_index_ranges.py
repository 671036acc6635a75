"""Retention's index predicate (``pipeline/store/index_ranges.py``): the removed seqs of a queue cut into
ranges by the rows that stay, every removed seq named, no kept seq named (unless excluded by the
queue's NOT IN list), and the SQL text and the pyarrow expression selecting the same rows."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from queuelake.pipeline.store.index_ranges import index_filter, queue_runs, runs, spans


def named(ranges: list[tuple[int, int]], excluded: list[int], seq: int) -> bool:
    return any(lo <= seq <= hi for lo, hi in ranges) and seq not in excluded


@pytest.mark.parametrize(
    ("removed", "kept", "ranges", "excluded"),
    [
        (range(0, 100), [], [(0, 99)], []),  # a time prefix: one range
        (range(0, 100), range(100, 200), [(0, 99)], []),  # what stays after it: not inside
        ([0, 1, 2, 5, 6, 9], [3, 4, 8], [(0, 2), (5, 6), (9, 9)], []),  # kept rows between: runs
        ([0, 2, 4], [], [(0, 4)], []),  # gaps with no row (erased, never drained) join runs
        ([0, 1, 2, 3], [2], [(0, 1), (3, 3)], []),  # a seq both removed and kept: its index rows stay
        ([], [1, 2], [], []),
    ],
)
def test_runs(removed, kept, ranges, excluded) -> None:  # type: ignore[no-untyped-def]
    assert runs(np.array(list(removed), np.int64), np.array(list(kept), np.int64)) == (ranges, excluded, 0)


def test_many_gaps_keep_the_widest_and_exclude_the_rest() -> None:
    # kept rows at every 10th seq, and one block of 50 kept rows: 3 ranges at most
    removed = [s for s in range(0, 300) if s % 10 != 5 and not 100 <= s < 150]
    kept = [s for s in range(0, 300) if s % 10 == 5 or 100 <= s < 150]
    ranges, excluded, left = runs(np.array(removed), np.array(kept), max_ranges=3)
    assert left == 0
    assert len(ranges) == 3 and not set(range(100, 150)) & set(excluded)  # the block is a gap
    assert all(named(ranges, excluded, s) for s in removed)
    assert not any(named(ranges, excluded, s) for s in kept)


def test_random_interleavings_are_exact() -> None:
    rng = random.Random(7)
    for _ in range(200):
        seqs = list(range(rng.randint(1, 400)))
        kept_share = rng.choice([0.0, 0.01, 0.2, 0.7])
        kept = sorted(s for s in seqs if rng.random() < kept_share)
        removed = sorted(set(seqs) - set(kept))
        limit = rng.choice([0, 3, 1000])
        ranges, excluded, left = runs(
            np.array(removed, np.int64), np.array(kept, np.int64), max_ranges=rng.randint(1, 6), max_listed=limit
        )
        assert sum(named(ranges, excluded, s) for s in removed) == len(removed) - left
        assert not any(named(ranges, excluded, s) for s in kept)
        assert len(ranges) <= 6 and (not removed or ranges) and len(excluded) <= limit
        assert left == 0 or not excluded


def test_sql_and_arrow_name_the_same_index_rows() -> None:
    removed = pa.table({"queue": ["a", "a", "a", "b'q"], "seq": pa.array([1, 2, 5, 7], pa.int64())})
    kept = pa.table({"queue": ["a", "b'q", "c"], "seq": pa.array([3, 9, 2], pa.int64())})
    per_queue = queue_runs(removed, kept)
    assert [(q.queue, q.ranges) for q in per_queue] == [("a", [(1, 2), (5, 5)]), ("b'q", [(7, 7)])]
    where = index_filter(per_queue, upto=4)
    assert where is not None and where.columns == ("queue", "seq", "upto")
    index = pa.table(
        {
            "queue": ["a", "a", "a", "a", "a", "b'q", "b'q", "c"],
            "seq": pa.array([1, 2, 3, 5, 5, 7, 9, 2], pa.int64()),
            "upto": pa.array([1, 4, 1, 2, 5, 3, 3, 1], pa.int64()),
        }
    )
    picked = index.filter(where.arrow)
    assert list(zip(picked["queue"].to_pylist(), picked["seq"].to_pylist(), strict=True)) == [
        ("a", 1),
        ("a", 2),
        ("a", 5),
        ("b'q", 7),
    ]  # (a, 5) written at journal version 5 stays: a row the read of kept rows did not see
    assert "\"queue\" = 'b''q'" in where.sql and '"upto" <= 4' in where.sql
    span = spans(removed)
    assert span is not None
    assert index.filter(span.arrow).num_rows == 6  # queue a's seqs 1..5 and b'q's 7; c has nothing removed


def test_scattered_removals_name_the_largest_runs_with_no_list() -> None:
    """A rule on expired rows, every twentieth row expired: naming them all would need a NOT IN list as
    long as the rows that stay, which deltalake's DELETE crashes on (a segfault from ~20,000 entries). Past
    ``max_listed`` the largest runs are named and the other removed seqs are counted as left."""
    seqs = range(100_000)
    removed = np.array([s for s in seqs if s % 20 == 0 or 50_000 <= s < 50_100], np.int64)
    kept = np.array([s for s in seqs if not (s % 20 == 0 or 50_000 <= s < 50_100)], np.int64)
    ranges, excluded, left = runs(removed, kept, max_ranges=4, max_listed=5_000)
    assert excluded == [] and len(ranges) == 4
    assert (50_000, 50_100) in ranges  # the one long run (50,100 is a twentieth too), beside three single seqs
    named_seqs = {s for s in removed.tolist() if any(lo <= s <= hi for lo, hi in ranges)}
    assert left == removed.size - len(named_seqs) > 0
    assert not any(lo <= s <= hi for s in kept.tolist() for lo, hi in ranges)


def test_the_lists_of_all_queues_share_one_bound() -> None:
    rows = [(q, s) for q in ("a", "b", "c") for s in range(3_000)]
    removed = pa.table({"queue": [q for q, s in rows if s % 2 == 0], "seq": [s for q, s in rows if s % 2 == 0]})
    kept = pa.table({"queue": [q for q, s in rows if s % 2], "seq": [s for q, s in rows if s % 2]})
    per_queue = queue_runs(removed, kept, max_ranges=16, max_listed=2_000)
    assert sum(len(q.excluded) for q in per_queue) <= 2_000
    assert all(q.left > 0 for q in per_queue if not q.excluded)
    where = index_filter(per_queue, upto=1)
    assert where is not None and where.sql.count("NOT (") <= 1
