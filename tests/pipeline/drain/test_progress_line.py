"""The drain's per-batch progress line: what it says of the rows left."""

from __future__ import annotations

import logging
import time

import pytest
from queuelake.config import from_dict
from queuelake.pipeline.drain.progress import Progress
from queuelake.transport.table_refs import queue_ref


def test_a_queue_whose_newest_row_was_not_read_yet_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """A queue estimated at one batch skips the read of its newest row; its line said "about 0 left"
    of a queue that held more (a review). It now says the rest is not counted yet."""
    cfg = from_dict({"transport": {"connection": "postgresql://h/db"}, "drain": {"queues": ["Sales"]}}, env={})
    progress = Progress(queue_ref("Sales", cfg.transport), time.monotonic())
    progress.start(None, read=False)  # type: ignore[arg-type]  # no read: no connection used
    counts = {"landed": 5, "expired": 0, "quarantined": 0}
    with caplog.at_level(logging.INFO, logger="queuelake"):
        progress.batch(1, 3, counts, time.monotonic(), 5, 5, None)  # type: ignore[arg-type]
    assert "5 so far" in caplog.text and "what is left not counted yet" in caplog.text, caplog.text
    assert "about 0 left" not in caplog.text
