"""A lookup of many files on a slow store says how far it is: ``where`` on a throttled store's journal of
124 files, before its id index existed, was silent for over 100 s (a review)."""

from __future__ import annotations

import datetime as dt
import logging
import time
from pathlib import Path

import pytest
from queuelake.config import from_dict
from queuelake.lake import lookup
from queuelake.lake.engines import open_lake

from tests.helpers.journal_rows import UTC, append, batch


def test_a_long_lookup_logs_how_many_files_it_has_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lake = open_lake(from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path)}}, env={}).lake)
    for k in range(4):
        ids = [f"{i}-{k}" for i in range(5)]  # every file's range of ids meets every other's: none pruned
        append(
            lake,
            batch('"public"."Sales"', range(k * 5, k * 5 + 5), dt.datetime(2026, 12, 1, tzinfo=UTC), message_ids=ids),
        )
    held = lookup._holds

    def slow_holds(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.3)  # a file's column on a throttled store
        return held(*args, **kwargs)

    monkeypatch.setattr(lookup, "_holds", slow_holds)
    monkeypatch.setattr(lookup, "PROGRESS_SECONDS", 0.1)
    monkeypatch.setattr(lookup, "_THREADS", 1)
    with caplog.at_level(logging.INFO, logger="queuelake"):
        found = lake.lookup("messages", "message_id", ["3-2", "2-9"])
    assert found.rows.column("message_id").to_pylist() == ["3-2"]
    said = [r.getMessage() for r in caplog.records if "file(s) read" in r.getMessage()]
    assert said and said[0].startswith("messages: looking for 2 message_id value(s) for "), said
    assert said[-1].endswith(" of 4 file(s) read"), said


def test_a_lookup_of_some_columns_reads_those_alone(tmp_path: Path) -> None:
    """``columns``: the matching rows' named columns, not whole rows (a replay's look at the copies an earlier
    replay sent read 100,000 journal rows with their bodies for their headers); a column the table lacks is
    said."""
    from queuelake.errors import LakeError

    lake = open_lake(from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path)}}, env={}).lake)
    append(lake, batch('"public"."Sales"', range(5), dt.datetime(2026, 12, 1, tzinfo=UTC), message_ids=list("abcde")))
    found = lake.lookup("messages", "message_id", ["c"], columns=["headers", "seq"])
    assert found.rows.column_names == ["message_id", "headers", "seq"] and found.rows.column("seq").to_pylist() == [2]
    assert "body" in lake.lookup("messages", "message_id", ["c"]).rows.column_names
    assert lake.lookup("messages", "message_id", ["z"], columns=["seq"]).rows.column_names == ["message_id", "seq"]
    with pytest.raises(LakeError, match="no column"):
        lake.lookup("messages", "message_id", ["c"], columns=["no_such"])
