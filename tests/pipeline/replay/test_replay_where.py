"""replay's --where is vetted against the journal's columns before any Spark starts: a typo is named at
once, as erase names it (issue 59: replay reported it after a Spark session's start, 11 s). One process,
a real journal (delta-rs), no database reached."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from queuelake.cli import build_parser
from queuelake.commands.replay import where_predicate
from queuelake.config import from_dict
from queuelake.errors import ArgumentError
from queuelake.lake.engines import open_lake
from queuelake.pipeline.replay.predicate import check_columns

from tests.helpers.cli import run_cli
from tests.helpers.journal_rows import UTC, append, batch

COLUMNS = ["queue", "seq", "message_id", "headers", "failed_queue"]


def test_unknown_columns_are_named_and_spark_forms_pass(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ArgumentError, match=r"unknown column\(s\) colour, falied_queue"):
        check_columns("colour = 'red' AND falied_queue IS NOT NULL", COLUMNS)
    with caplog.at_level("WARNING", logger="queuelake"):
        check_columns("failed_queue IS NOT NULL AND headers['NServiceBus.MessageId'] = 'x'", COLUMNS)
        check_columns("exists(array(seq), x -> x > 3) AND lower(queue) = 'sales'", COLUMNS)  # a lambda's variable
        assert caplog.records == []
        # Spark's to judge, and said at once: its verdict came after its session's start (a review)
        check_columns("this is not sql (", COLUMNS)
    assert "--where could not be parsed here" in caplog.text


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


def test_where_file_carries_a_predicate_past_the_one_argument_limit(tmp_path: Path) -> None:
    """A failure group of ~15,000+ messages has a ``replay_where`` over Linux's 128 KiB limit on one
    argument; ``--where-file`` reads it whole (and ``-`` reads stdin), exactly one of the two is required."""
    seqs = ", ".join(str(n) for n in range(1_000_000, 1_030_000))
    predicate = f"outcome = 'landed' AND (queue = '\"public\".\"error\"' AND seq IN ({seqs}))"
    assert len(predicate.encode()) > 128 * 1024
    path = tmp_path / "where.txt"
    path.write_text(predicate + "\n", encoding="utf-8")
    parser = build_parser()
    args = parser.parse_args(["replay", "-c", "job.yaml", "--where-file", str(path)])
    assert where_predicate(args) == predicate
    assert where_predicate(parser.parse_args(["replay", "-c", "job.yaml", "--where", "seq = 1"])) == "seq = 1"
    for neither_or_both in ([], ["--where", "seq = 1", "--where-file", str(path)]):
        with pytest.raises(SystemExit):
            parser.parse_args(["replay", "-c", "job.yaml", *neither_or_both])
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n")
    with pytest.raises(ArgumentError, match=r"--where-file .*empty\.txt: the file is empty"):
        where_predicate(parser.parse_args(["replay", "-c", "job.yaml", "--where-file", str(empty)]))
    with pytest.raises(ArgumentError, match=r"--where-file .*missing\.txt: cannot read it"):
        where_predicate(parser.parse_args(["replay", "-c", "job.yaml", "--where-file", str(tmp_path / "missing.txt")]))
