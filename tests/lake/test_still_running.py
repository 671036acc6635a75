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


def test_a_delete_runs_where_a_stop_is_taken_at_once_and_says_it_is_still_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A delete by keys (one MERGE: a retention's typed rows) and a delete by a predicate run in a thread the
    main one waits on (``stopping.interruptible``): a second stop signal during a retention waited ~40 s for
    the MERGE of a million messages' typed rows (a review)."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    from queuelake.lake.deletes import RowFilter
    from queuelake.pipeline.store import typed

    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path), "engine": "delta-rs"}}, env={})
    lake = open_lake(cfg.lake)
    ids = [f"m-{n}" for n in range(3_000)]
    totals = [float(n) for n in range(len(ids))]
    lake.append("body_orders", pa.table({"message_id": ids, "total": totals}), "bodies", 1)
    monkeypatch.setattr(stopping, "STILL_SECONDS", 0.0001)  # every wait on the native call is "long"
    (by_keys,) = typed.message_filters(lake, "body_orders", pa.array(ids[:2_500]))
    assert by_keys.keys is not None
    by_sql = RowFilter('"total" >= 2990', ds.field("total") >= 2990, ("total",))
    with caplog.at_level(logging.INFO, logger="queuelake"):
        assert lake.delete_rows("body_orders", by_keys).rows == 2_500
        assert lake.delete_rows("body_orders", by_sql).rows == 10
    said = {r.getMessage().split(": still running")[0] for r in caplog.records if "still running" in r.getMessage()}
    assert said == {"body_orders: deleting the rows of 2500 key(s)", "body_orders: deleting rows"}, said


def test_a_stop_while_a_call_waits_leaves_it_behind_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop taken while an ``interruptible`` call runs leaves the call in its thread; ``jobs.run_job`` then
    ends the process without the interpreter's teardown, which such a thread crashed (spark-submit exited
    139 after a stopped ``maintain``'s summary: a review)."""
    import os
    import signal
    import threading

    # Python's own SIGINT handler for the test, whatever the test runner's worker set (xdist's may ignore it)
    monkeypatch.setattr(stopping, "_LEFT_BEHIND", [])
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            stopping.interruptible(lambda: time.sleep(1.5))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert stopping.calls_left_behind()
    time.sleep(1.6)
    assert not stopping.calls_left_behind()  # once the call has ended, nothing is left behind


def test_a_job_whose_stop_left_a_call_behind_ends_without_teardown(monkeypatch: pytest.MonkeyPatch) -> None:
    """``jobs.run_job`` ends at once (``os._exit`` with the command's code) only when a call was left behind."""
    import os
    import threading

    from queuelake import jobs

    ended: list[int] = []
    monkeypatch.setattr(os, "_exit", ended.append)
    monkeypatch.setattr(logging, "shutdown", lambda: None)  # this test process's handlers stay open
    jobs.end_now_if_calls_left_behind(143)
    assert ended == []  # nothing left behind: the interpreter ends as usual
    running = threading.Event()  # a call still running in its thread
    monkeypatch.setattr(stopping, "_LEFT_BEHIND", [running])
    jobs.end_now_if_calls_left_behind(143)
    assert ended == [143]


def test_the_program_whose_stop_left_a_call_behind_ends_without_teardown(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``queuelake`` program (``cli.console``) ends as a job does when a stop left a native call
    running, its atexit handlers run first: a publish stopped twice while it read the lake's log ended
    in a segmentation fault (exit -11) where 130 was due, 5 runs in 110 (a review)."""
    import atexit
    import os
    import threading

    from queuelake import cli

    ended: list[object] = []
    monkeypatch.setattr(os, "_exit", lambda code: ended.append(("exit", code)))
    monkeypatch.setattr(atexit, "_run_exitfuncs", lambda: ended.append("atexit"))
    monkeypatch.setattr(logging, "shutdown", lambda: None)
    monkeypatch.setattr(cli, "main", lambda: 130)
    monkeypatch.setattr(cli, "_ENDING", [False])
    monkeypatch.setattr(stopping, "_LEFT_BEHIND", [threading.Event()])  # a call still running
    try:
        assert cli.console() == 130
    finally:
        import gc

        gc.enable()
        gc.unfreeze()
    assert ended == ["atexit", ("exit", 130)]
