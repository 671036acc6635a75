"""A ``--where`` comparing ``queue`` with a queue's short name (erase, replay): refused with the canonical
address to write, since the journal's ``queue`` column holds canonical addresses only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from queuelake import cli as cli_mod
from queuelake.config import from_dict
from queuelake.errors import ArgumentError
from queuelake.pipeline.replay.predicate import check_columns, check_queue_names

TRANSPORT = from_dict({"transport": {"connection": "x"}}, env={}).transport  # type: ignore[attr-defined]
COLUMNS = ["queue", "seq", "message_id", "failed_queue"]


@pytest.mark.parametrize(
    "where",
    [
        "queue = 'Sales' AND seq = 1234",  # as operations.md showed it: an erase of nothing, "ok"
        "'Sales' = queue",
        "queue <> 'Sales'",  # every row: an erase of everything but what was meant
        "queue IN ('\"public\".\"audit\"', 'Sales')",
        "NOT (QUEUE = 'sales.orders' OR seq > 3)",
    ],
)
def test_a_short_queue_name_is_refused_with_its_canonical_address(where: str) -> None:
    with pytest.raises(ArgumentError, match="canonical") as refused:
        check_queue_names(where, TRANSPORT)
    assert 'write \'"public"."Sales"\'' in str(refused.value) or 'write \'"sales"."orders"\'' in str(refused.value)
    with pytest.raises(ArgumentError, match="canonical"):
        check_columns(where, COLUMNS, TRANSPORT)  # replay's check, on the same parse


@pytest.mark.parametrize(
    "where",
    [
        'queue = \'"public"."Sales"\' AND seq = 1234',
        "queue LIKE '%Sales%'",  # a pattern is the user's to mean
        "failed_queue = 'Sales'",  # the header's value, as the endpoint wrote it
    ],
)
def test_canonical_addresses_patterns_and_other_columns_pass(where: str) -> None:
    check_queue_names(where, TRANSPORT)
    check_columns(where, COLUMNS, TRANSPORT)


def test_text_sqlglot_cannot_parse_and_a_check_without_a_transport_are_left_alone() -> None:
    check_queue_names("this is not sql (", TRANSPORT)  # check_columns warns of it, Spark judges it
    check_columns("queue = 'Sales'", COLUMNS)  # no transport to resolve the name by


def test_erase_refuses_a_short_queue_name_before_it_opens_the_lake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "job.yaml"
    lake = {"root": str(tmp_path / "lake"), "engine": "delta-rs"}
    conf.write_text(json.dumps({"transport": {"connection": "${QUEUELAKE_CONNECTION}"}, "lake": lake}))
    monkeypatch.setenv("QUEUELAKE_CONNECTION", "x")
    code = cli_mod.main(["erase", "-c", str(conf), "--where", "queue = 'Sales' AND seq = 1234", "--dry-run"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and summary["error_kind"] == "arguments", summary
    assert "'Sales' (write '\"public\".\"Sales\"')" in summary["error"], summary


@pytest.mark.parametrize(
    ("where", "spark_said", "told"),
    [
        # a trailing AND: Spark's error was at the wrapper's ")" on line 3, which the user never typed
        (
            "queue = 'x' AND",
            "[PARSE_SYNTAX_ERROR] Syntax error at or near ')'. SQLSTATE: 42601 (line 3, pos 0)",
            "Syntax error at or near the end of --where. SQLSTATE: 42601 (line 1, pos 15)",
        ),
        (
            "queue = 'x' AND\nseq >",
            "[PARSE_SYNTAX_ERROR] Syntax error at or near ')'. SQLSTATE: 42601 (line 4, pos 0)",
            "at or near the end of --where. SQLSTATE: 42601 (line 2, pos 5)",
        ),
        (
            "queue = = 'x'",
            "[PARSE_SYNTAX_ERROR] Syntax error at or near '='. SQLSTATE: 42601 (line 2, pos 8)",
            "at or near '='. SQLSTATE: 42601 (line 1, pos 8)",
        ),
        (
            "nosuch = 1",
            "[UNRESOLVED_COLUMN.WITH_SUGGESTION] ... name `nosuch` cannot be resolved. SQLSTATE: 42703; line 2 pos 0;",
            "SQLSTATE: 42703; line 1 pos 0;",
        ),
        ("seq", "a reason without a position", "a reason without a position"),
    ],
)
def test_a_spark_error_is_placed_in_the_lines_typed(where: str, spark_said: str, told: str) -> None:
    """Spark judges ``(\\n<where>\\n)``: its positions are put back in the lines the user typed."""
    from queuelake.pipeline.replay.predicate import _in_user_lines

    assert told in _in_user_lines(spark_said, where)
