"""``failures`` on a big journal says how far it is: a 5,000,000-row journal took 5 minutes with nothing in
the log between its first and last lines (a review). Each pass over the files logs a line every
``PROGRESS_SECONDS``: files read of all, rows, failed copies (or retries of them) found so far."""

from __future__ import annotations

import datetime as dt
import logging
import time
from pathlib import Path

import pyarrow as pa
import pytest
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.pipeline.failures import read, run

from tests.helpers.journal_rows import UTC, append, batch

ERROR = '"public"."error"'


def failed_batch(seqs: range) -> pa.Table:
    rows = batch(ERROR, seqs, dt.datetime(2026, 11, 30, tzinfo=UTC))
    at = rows.schema.get_field_index("exception_type")
    return rows.set_column(at, "exception_type", pa.array(["System.TimeoutException"] * len(seqs), pa.string()))


def test_a_long_pass_over_the_journal_logs_how_far_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lake = open_lake(from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path)}}, env={}).lake)
    for k in range(4):
        append(lake, failed_batch(range(k * 10, k * 10 + 10)))
    opened = read.open_file

    def slow_open(uri: str):  # type: ignore[no-untyped-def]
        time.sleep(0.3)  # a file of a big journal on a store
        return opened(uri)

    monkeypatch.setattr(read, "open_file", slow_open)
    monkeypatch.setattr(run, "PROGRESS_SECONDS", 0.2)
    with caplog.at_level(logging.INFO, logger="queuelake"):
        found = run.failure_groups(lake)
    assert found.summary()["failed_copies"] == 40
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("failures: looking for")]
    assert any(line.startswith("failures: looking for failed copies for ") for line in lines), lines
    assert any("of 4 journal file(s) read" in line and "found so far" in line for line in lines), lines
    assert any(line.startswith("failures: looking for retries of them") for line in lines), lines


def test_the_ids_a_row_group_holds_are_found_alike_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """Few failed ids are looked up by Arrow's ``is_in``, many by a set built once (``is_in`` built its hash
    of 345,000 ids again for each of 330 row groups: a review); both find the same rows."""
    ids = {f"m-{n}" for n in range(0, 1_000, 3)}
    column = pa.chunked_array([[f"m-{n}" for n in range(500)] + [None, "", "m-999"], ["m-3", "x"]])
    expected = [n for n in range(500) if n % 3 == 0] + [502, 503]
    assert read._Membership(ids).wanted is not None
    assert read._Membership(ids).rows_of(column).tolist() == expected
    monkeypatch.setattr(read._Membership, "SET_FROM", 1)
    assert read._Membership(ids).wanted is None
    assert read._Membership(ids).rows_of(column).tolist() == expected
