"""The docs' example commands that name the demo's config (``-c .demo/queuelake-demo.yaml``, where ``make
demo`` writes it) find on the demo's lake what the docs say they find. A user who ran the demo and copied
docs/where.md's ``--value 4711`` or docs/failures.md's group ``d1b700`` found nothing (a review): the demo's
traffic names its messages the same way on every run now (``commands/demo/end_to_end.demo_roles``,
``traffic.order_events``), and the examples name them.

Each command runs as written (its ``queuelake`` is this checkout's), in order, from the folder holding
``.demo``; what follows a ``|`` (``jq``, ``sed``) is left out, and a line holding a ``<placeholder>`` is
a template, not an example. One demo run, on delta-rs, with fewer messages than ``make demo`` seeds: the
examples hold for any ``--messages``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import REPO, run_cli

DEMO_CONFIG = ".demo/queuelake-demo.yaml"
BASH_BLOCK = re.compile(r"```(?:bash|sh)\n(.*?)```", re.S)
PLACEHOLDER = re.compile(r"<[^<>]+>")

# what each command's JSON summary says when it found what its example shows
FOUND: dict[str, Callable[[dict[str, Any]], bool]] = {
    "find": lambda s: s["found"] > 0,
    "where": lambda s: s["found"] > 0 and bool(s["messages"]),
    "failures": lambda s: bool(s.get("message_ids")) if "replay_where" in s else s["groups"] > 0,
    "replay": lambda s: s["selected"] > 0,
    "conversation": lambda s: s["messages"] > 0,
}

# and what the docs tell of the demo's messages they name: its first order failed at Billing, its second was
# processed there
FIRST, SECOND = "f38b2ffc-80a4-4f5a-91c9-bc701e7ea419", "731c9452-1919-493a-9117-45ad49889310"
FIRST_CONVERSATION, SECOND_CONVERSATION = "bb896433-be1b-5e35-acf7-0e8c3e249f1e", "96ce31a8-66f5-5497-bc3c-d9ca292f6b4f"
SAYS: dict[tuple[str, str], Callable[[dict[str, Any]], bool]] = {
    ("where", FIRST): lambda s: set(s["places"]) == {"drained", "failed"},
    ("where", "order-2026-0"): lambda s: [m["message_id"] for m in s["messages"]] == [FIRST],
    ("where", SECOND_CONVERSATION): lambda s: set(s["places"]) == {"drained", "processed"},
    ("find", SECOND): lambda s: s["kinds"] == {"audit": 1, "sent": 1},
    ("find", FIRST_CONVERSATION): lambda s: s["kinds"] == {"failed": 1, "sent": 1},
    ("conversation", FIRST_CONVERSATION): lambda s: s["failed"] == 1 and s["endpoints"] == ["Sales", "Billing"],
    ("failures", "00cf01"): lambda s: s.get("exception_type", "System.TimeoutException") == "System.TimeoutException",
}


def demo_examples() -> list[tuple[str, list[str]]]:
    """``(page:line, argv after queuelake)`` of every example command on the demo's config, in page order."""
    found = []
    for page in sorted((REPO / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for block in BASH_BLOCK.finditer(text):
            first = text[: block.start()].count("\n") + 2
            for offset, line in enumerate(block.group(1).splitlines()):
                command = line.split("|")[0]
                if not command.startswith("queuelake ") or f"-c {DEMO_CONFIG}" not in command:
                    continue
                if PLACEHOLDER.search(command):
                    continue
                found.append((f"{page.relative_to(REPO)}:{first + offset}", shlex.split(command, comments=True)[1:]))
    return found


def test_the_docs_name_the_demo_where_a_reader_tries_them() -> None:
    pages = {where.split(":")[0] for where, _ in demo_examples()}
    assert {"docs/where.md", "docs/find.md", "docs/failures.md"} <= pages, pages


@pytest.mark.slow
def test_the_docs_examples_find_what_they_say_on_the_demo(tmp_path: Path) -> None:
    demo = run_cli(
        ["demo", "--workdir", str(tmp_path / ".demo"), "--messages", "200", "--engine", "delta-rs"],
        cwd=tmp_path,
        timeout=900,
    )
    assert demo.returncode == 0 and demo.summary["status"] == "ok", demo.stderr[-3000:]
    assert (tmp_path / DEMO_CONFIG).is_file()

    missed = []
    for where, argv in demo_examples():
        result = run_cli(argv, cwd=tmp_path, timeout=300)
        summary = result.summary
        says = [check for (command, arg), check in SAYS.items() if command == argv[0] and arg in argv]
        if result.returncode != 0 or not summary or not all(ok(summary) for ok in [FOUND[argv[0]], *says]):
            missed.append(f"{where}: queuelake {shlex.join(argv)}\n  exit {result.returncode}: {result.stdout[-800:]}")
    assert not missed, "\n".join(missed)
