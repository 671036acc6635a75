"""How a command, a queue, an output or a replay ended: one set of words for the summary and ``runs``.

Why an enum: the same six words were string literals in a dozen modules, so a typo (``"fail"``)
would have been a new status that no check, no exit code and no notebook knew. ``Status`` is a
``str``: it compares equal to the words the ``runs`` table and older summaries hold, and JSON, orjson
and Arrow write it as that word.
"""

from __future__ import annotations

import enum


class Status(str, enum.Enum):
    OK = "ok"
    # stopped by an error; the summary's ``error`` (and ``error_kind``) say why
    FAILED = "failed"
    # everything taken was journalled, but rows other sessions held were left in the queue
    INCOMPLETE = "incomplete"
    # stopped early by SIGTERM (at a batch boundary for drain and run) or Ctrl-C
    INTERRUPTED = "interrupted"
    # not run: a queue another drain holds, an output that does not exist yet
    SKIPPED = "skipped"
    # held back by the data: failed expectations; nothing written or sent
    BLOCKED = "blocked"
    # a replay's canary (--canary) failed again, or was not processed in time: the rest is not sent
    # (resumable by replay id); exit code 1, as failed
    CANARY_FAILED = "canary-failed"
    CANARY_TIMEOUT = "canary-timeout"

    def __str__(self) -> str:
        return self.value


def worst(statuses: list[Status | str]) -> Status:
    """The status of a run of several parts: failed (or blocked, or a replay's canary: the data needs a
    person) beats incomplete beats interrupted beats ok; skipped parts count as ok."""
    found = {Status(s) for s in statuses}
    if found & {Status.CANARY_FAILED, Status.CANARY_TIMEOUT}:
        found.add(Status.FAILED)
    for status in (Status.FAILED, Status.INCOMPLETE, Status.INTERRUPTED):
        if status in found or (status is Status.FAILED and Status.BLOCKED in found):
            return status
    return Status.OK
