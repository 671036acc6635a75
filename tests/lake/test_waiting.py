"""A line every so often while a lake call waits on its store (no store here: a sleep stands in)."""

from __future__ import annotations

import logging
import time

import pytest
from queuelake.lake.waiting import said_while_waiting


def test_a_long_wait_is_said_and_a_short_one_is_not(caplog: pytest.LogCaptureFixture) -> None:
    """A slow store left a drain 143 s and a find 122 s without a line (a review)."""
    with caplog.at_level(logging.INFO, logger="queuelake"):
        with said_while_waiting("committing 3 batch(es) to the journal", every=0.05):
            time.sleep(0.3)
        said = [r.getMessage() for r in caplog.records]
        assert said and all(m.startswith("lake: still committing 3 batch(es) to the journal (") for m in said), said
        caplog.clear()
        with said_while_waiting("reading the Delta log of t", every=5):
            pass
        time.sleep(0.1)
    assert caplog.records == []
