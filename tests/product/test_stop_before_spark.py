"""A stop asked before a command's Spark session started starts none (no JVM: this is the fast tier)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from queuelake import stopping
from queuelake.config_sections import SparkConfig
from queuelake.spark import get_spark


@pytest.fixture
def stop_asked() -> Iterator[None]:
    stopping.request()
    try:
        yield
    finally:
        stopping.reset()


def test_a_stop_asked_before_the_session_starts_none(stop_asked: None) -> None:
    """A SIGTERM during a command's start-up still started Spark (10-30 s) before the step saw the stop
    (carried from a review): the session is not started, and the stop ends the command."""
    with pytest.raises(stopping.Interrupted, match="stopped before the Spark session started"):
        get_spark(SparkConfig(master="local[1]"))
