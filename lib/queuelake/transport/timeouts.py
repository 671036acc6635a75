"""Timeouts as the database sessions are told them: PostgreSQL's settings (text such as ``"750ms"``) and SQL
Server's ``SET LOCK_TIMEOUT`` (milliseconds). Why a module of its own: the drain's sessions and ``where``'s
peeks bound a wait for a table lock the same way, shorter than their statement timeout.
"""

from __future__ import annotations

import math

# the longest a session waits for a table lock (``drain_session.sql``, ``lock_session.sql``, ``where_queue.sql``),
# on SQL Server too; always shorter than the statement timeout
LOCK_TIMEOUT_SECONDS = 30.0
# how much sooner than the statement timeout the lock timeout fires (half of a statement timeout under 2 s)
LOCK_TIMEOUT_MARGIN_SECONDS = 1.0


def lock_timeout(statement_timeout_s: float) -> str:
    """The sessions' ``lock_timeout`` setting (PostgreSQL's text) of ``lock_timeout_seconds``."""
    return timeout_setting(lock_timeout_seconds(statement_timeout_s))


def lock_timeout_seconds(statement_timeout_s: float) -> float:
    """How long a session waits for a table lock: ``LOCK_TIMEOUT_SECONDS``, or shorter than the statement timeout
    (by ``LOCK_TIMEOUT_MARGIN_SECONDS``, or by half under 2 s). Why: the statement timeout runs from the
    statement's start, the lock timeout from its wait's, so at the same setting the statement timeout fired
    first and PostgreSQL said 57014 (query_canceled), not 55P03: a receive's wait for a table another program
    held locked was not told as one, and the backlog peek was tried on it once more (a review, with
    ``drain.statement_timeout_seconds`` 30 or less). SQL Server's ``SET LOCK_TIMEOUT`` takes the same bound, in
    milliseconds (``timeout_millis``)."""
    shorter = max(statement_timeout_s - LOCK_TIMEOUT_MARGIN_SECONDS, statement_timeout_s / 2)
    return min(LOCK_TIMEOUT_SECONDS, shorter)


def timeout_setting(seconds: float) -> str:
    """A PostgreSQL timeout setting of ``seconds`` (> 0), in whole milliseconds rounded up: a timeout under
    1 ms was "0ms", which PostgreSQL reads as no limit at all (a review)."""
    return f"{timeout_millis(seconds)}ms"


def timeout_millis(seconds: float) -> int:
    """``seconds`` (> 0) in whole milliseconds rounded up, at least 1 (SQL Server's ``LOCK_TIMEOUT``)."""
    return max(1, math.ceil(seconds * 1000))
