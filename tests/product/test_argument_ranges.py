"""An option's value out of range is a usage error naming the option (exit 2), before anything runs:
``--max-messages -1`` reached the database as a negative LIMIT, and ``--max-messages 0`` or
``--max-seconds -5`` drained nothing and logged that the queue was empty with rows waiting (a review)."""

from __future__ import annotations

import pytest
from queuelake.cli import build_parser


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["drain", "--max-messages", "-1"], "--max-messages: -1: at least 1"),
        (["drain", "--max-messages", "0"], "--max-messages: 0: at least 1"),
        (["run", "--max-messages", "0"], "--max-messages: 0: at least 1"),
        (["drain", "--max-seconds", "-5"], "--max-seconds: -5: more than 0 seconds"),
        (["drain", "--max-seconds", "soon"], "--max-seconds: 'soon' is not a number of seconds"),
        (["demo", "--messages", "-5"], "--messages: -5: at least 1"),
    ],
)
def test_an_out_of_range_option_is_a_usage_error(argv: list[str], said: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


def test_values_in_range_are_taken() -> None:
    args = build_parser().parse_args(["drain", "--max-messages", "1", "--max-seconds", "0.5"])
    assert (args.max_messages, args.max_seconds) == (1, 0.5)
