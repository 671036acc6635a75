"""The bodies step's closing log line counts typed tables only. A slice that failed before any table was
written (Spark lacking the lake's file system jars) ended with "0 row(s) read, 0 written to 1 table(s)":
the failed slice's row was counted as a table."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import cast

import pytest
from queuelake.pipeline import runs
from queuelake.pipeline.bodies.run import _failed_slice, _summary
from queuelake.pipeline.bodies.totals import Totals
from queuelake.status import Status

RUN = cast(runs.Run, SimpleNamespace(run_id="r"))  # _summary reads its run_id only


def _line(caplog: pytest.LogCaptureFixture) -> str:
    return next(r.getMessage() for r in caplog.records if r.getMessage().startswith("bodies: "))


def test_a_failed_slice_is_not_counted_as_a_table_written(caplog: pytest.LogCaptureFixture) -> None:
    totals = Totals()
    totals.add(_failed_slice(3, "ClassNotFoundException: S3AFileSystem"))
    with caplog.at_level(logging.INFO, logger="queuelake"):
        summary = _summary(RUN, totals, None, time.monotonic(), Status.FAILED, "e")
    assert "0 written to 0 table(s)" in _line(caplog)
    assert len(summary["tables"]) == 1  # the summary still names the failed slice


def test_typed_tables_beside_a_failed_slice_are_counted(caplog: pytest.LogCaptureFixture) -> None:
    totals = Totals()
    done = {"table": "body_sales_orderplaced", "rows_in": 4, "rows_out": 4, "status": Status.OK}
    totals.add({"upto": 2, "rows_read": 4, "rows_written": 4, "unparsed": 0, "failed": False, "results": [done]})
    totals.add(_failed_slice(3, "out of memory"))
    with caplog.at_level(logging.INFO, logger="queuelake"):
        _summary(RUN, totals, None, time.monotonic(), Status.FAILED, "e")
    assert "4 row(s) read, 4 written to 1 table(s)" in _line(caplog)
