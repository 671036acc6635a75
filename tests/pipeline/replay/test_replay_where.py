"""replay's --where is vetted against the journal's columns before any Spark starts: a typo is named at
once, as erase names it (issue 59: replay reported it after a Spark session's start, 11 s). One process,
a real journal (delta-rs), no database reached."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from queuelake.config import from_dict
from queuelake.errors import ArgumentError
from queuelake.lake.engines import open_lake
from queuelake.pipeline.replay.predicate import check_columns

from tests.helpers.cli import run_cli
from tests.helpers.journal_rows import UTC, append, batch

COLUMNS = ["queue", "seq", "message_id", "headers", "failed_queue"]


def test_unknown_columns_are_named_and_spark_forms_pass() -> None:
    with pytest.raises(ArgumentError, match=r"unknown column\(s\) colour, falied_queue"):
        check_columns("colour = 'red' AND falied_queue IS NOT NULL", COLUMNS)
    check_columns("failed_queue IS NOT NULL AND headers['NServiceBus.MessageId'] = 'x'", COLUMNS)
    check_columns("exists(array(seq), x -> x > 3) AND lower(queue) = 'sales'", COLUMNS)  # a lambda's variable
    check_columns("this is not sql (", COLUMNS)  # Spark's to judge


@pytest.mark.slow
def test_a_typo_fails_before_spark(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(root), "engine": "delta-rs"}}, env={})
    append(open_lake(cfg.lake), batch('"public"."error"', range(3), dt.datetime(2026, 11, 1, tzinfo=UTC)))
    conf = tmp_path / "job.json"
    conf.write_text(json.dumps({"transport": {"connection": "${QUEUELAKE_CONNECTION}"}, "lake": {"root": str(root)}}))
    proc = run_cli(
        ["replay", "-c", str(conf), "--where", "exeption_type = 'X'"],
        "postgresql://nobody@127.0.0.1:1/none",
        cwd=tmp_path,
        timeout=300,
    )
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 1 and summary["error_kind"] == "arguments", summary
    assert "unknown column(s) exeption_type" in summary["error"]
    assert "SparkContext" not in proc.stderr and "log4j" not in proc.stderr, proc.stderr[-2000:]
