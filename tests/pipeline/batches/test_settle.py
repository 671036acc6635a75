"""The ledger counted once the cancelled Spark tasks have ended (no database: a counter stands in)."""

from __future__ import annotations

import pytest
from queuelake.pipeline.batches import settle
from queuelake.spark_progress import kill_timeout_seconds


def test_the_count_is_taken_once_it_has_stood_still(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancelled task's worker committed one more batch after the job's failure was seen: a count taken
    at once said 18 of 19 (a review). The count is the one that stood still past the worker's kill."""
    monkeypatch.setattr(settle, "MONITOR_SECONDS", 0.0)
    seen = iter([18, 18, 19])
    assert settle.settled(lambda: next(seen, 19), kill_timeout=0.0, what="publish x", every=0.1) == 19
    ticks = iter(range(1000))  # never still: the last value once ``most`` has passed
    assert settle.settled(lambda: next(ticks), kill_timeout=5.0, what="publish x", most=0.5, every=0.1) >= 1


@pytest.mark.parametrize(
    ("value", "seconds"), [(None, 2.0), ("2s", 2.0), ("2000", 2.0), ("500ms", 0.5), ("1min", 60.0), ("soon", 2.0)]
)
def test_sparks_kill_timeout_in_seconds(value: str | None, seconds: float) -> None:
    assert kill_timeout_seconds(value) == seconds
