"""A long native call a command waits on says it is still running: ``maintain``'s compaction of a
multi-million-row journal was silent for 199 s (a review), and an operator could not tell it from a hang."""

from __future__ import annotations

import datetime as dt
import logging
import time
from pathlib import Path

import pytest
from queuelake import stopping
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake

from tests.helpers.journal_rows import UTC, append, batch


def test_a_call_with_a_still_text_logs_it_while_it_runs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(stopping, "STILL_SECONDS", 0.05)
    with caplog.at_level(logging.INFO, logger="queuelake"):
        assert stopping.interruptible(lambda: time.sleep(0.3) or 7, still="maintain messages: compacting") == 7
        said = [r.getMessage() for r in caplog.records]
        assert said and all(m.startswith("maintain messages: compacting: still running (") for m in said), said
        caplog.clear()
        assert stopping.interruptible(lambda: time.sleep(0.2) or 8) == 8  # no text: nothing said
        assert not caplog.records


def test_maintain_says_its_compaction_and_vacuum_are_still_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path), "engine": "delta-rs"}}, env={})
    lake = open_lake(cfg.lake)
    for i in range(4):
        append(lake, batch('"public"."Sales"', range(i * 10, i * 10 + 10), dt.datetime(2026, 12, 1, tzinfo=UTC)))
    monkeypatch.setattr(stopping, "STILL_SECONDS", 0.0001)  # every wait on the native call is "long"
    with caplog.at_level(logging.INFO, logger="queuelake"):
        lake.maintain("messages")
    said = {r.getMessage().split(": still running")[0] for r in caplog.records if "still running" in r.getMessage()}
    assert said == {"maintain messages: compacting", "maintain messages: vacuuming"}, said
