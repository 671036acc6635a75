"""Months on a schedule on the delta-rs engine (issue 57): twelve rounds of a system and its operator,
each command a new process, every reader after every writer (``schedule_play``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.schedule_play import play

pytestmark = pytest.mark.slow


def test_months_on_a_schedule_on_delta_rs(fresh_pg_uri: str, tmp_path: Path) -> None:
    play(fresh_pg_uri, tmp_path, "delta-rs")
