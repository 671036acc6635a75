"""Many deletes of one table: counted as they commit, a progress line every ``PROGRESS_SECONDS`` while more
remain (an erase deleting typed rows was silent for 8 minutes: a review)."""

from __future__ import annotations

import logging

import pytest
from queuelake.lake.deletes import Deleted, RowFilter
from queuelake.pipeline.store import deleting


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Table:
    """A table whose every delete removes 5,000 rows of one file, the clock moving 4 s a delete."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.deletes = 0

    def delete_rows(self, table: str, where: RowFilter) -> Deleted:
        self.clock.now += 4.0
        self.deletes += 1
        return Deleted(rows=5000, files_removed=1, files_rewritten=0, read_version=1, version=self.deletes + 1)


def filters(n: int) -> list[RowFilter]:
    return [RowFilter(f"seq = {i}", None, ("seq",)) for i in range(n)]  # type: ignore[arg-type]


def test_many_deletes_log_their_progress_and_count_as_they_commit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    monkeypatch.setattr(deleting.time, "monotonic", clock)
    table = Table(clock)
    figures: dict[str, int] = {}
    with caplog.at_level(logging.INFO, logger="queuelake"):
        for deleted in deleting.deleted_each(table, "body_orders", filters(8), "erase"):  # type: ignore[arg-type]
            deleting.add(figures, deleted)
            assert figures["rows"] == 5000 * table.deletes  # counted before the next delete starts
    lines = [r.getMessage() for r in caplog.records if "committed" in r.getMessage()]
    # 4 s a delete: a line after the 3rd (12 s), the 6th (24 s); none after the last (its caller says the total)
    assert lines == [
        "erase body_orders: 3 of 8 delete(s) committed, 15000 row(s) removed so far",
        "erase body_orders: 6 of 8 delete(s) committed, 30000 row(s) removed so far",
    ], lines
    assert figures == {"rows": 40_000, "files_removed": 8, "files_rewritten": 0}


def test_a_table_of_few_deletes_says_nothing_until_its_own_total(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    monkeypatch.setattr(deleting.time, "monotonic", clock)
    with caplog.at_level(logging.INFO, logger="queuelake"):
        done = list(deleting.deleted_each(Table(clock), "replay_skipped", filters(2), "retention"))  # type: ignore[arg-type]
    assert len(done) == 2 and not [r for r in caplog.records if "committed" in r.getMessage()]
