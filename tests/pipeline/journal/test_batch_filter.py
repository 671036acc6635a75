"""The increment's batch ids as ranges of each writer's versions (what the Spark join keeps)."""

from __future__ import annotations

from queuelake.pipeline.journal.batch_filter import version_ranges


def test_consecutive_versions_of_a_writer_are_one_range() -> None:
    ids = [f"queuelake.drain/public.Orders/w0:{v}" for v in range(5, 100_005)]
    assert version_ranges(ids) == [("queuelake.drain/public.Orders/w0", 5, 100_004)]


def test_gaps_writers_and_colons_in_app_ids_are_kept_apart() -> None:
    ids = ["a:b:3", "a:b:1", "a:b:2", "a:b:7", "c:0", "a:b:8", "c:0"]
    assert version_ranges(ids) == [("a:b", 1, 3), ("a:b", 7, 8), ("c", 0, 0)]
    assert version_ranges([]) == []
