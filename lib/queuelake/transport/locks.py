"""Named session locks (advisory lock / sp_getapplock): one drain per queue, one run per replay id.

The lock belongs to the session, not to a transaction, so it holds until the connection closes or the
process dies; the caller keeps a connection open for as long as it needs the lock.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from queuelake.errors import DrainError, TransportError
from queuelake.report import log
from queuelake.transport.db import Connection

# sp_getapplock takes 255 characters of a resource name and drops the rest: two long names sharing
# their first 255 characters (a queue's canonical name can be longer) would have been one lock
MAX_NAME = 200


def resource(name: str) -> str:
    """The name the server is given: as it is, or past ``MAX_NAME`` its start and a hash of the whole."""
    if len(name) <= MAX_NAME:
        return name
    return f"{name[: MAX_NAME - 33]}#{hashlib.sha256(name.encode('utf-8')).hexdigest()[:32]}"


def try_lock(conn: Connection, name: str, what: str | None = None) -> bool:
    """Take the named lock without waiting; False when another session holds it. Commits, so that
    the caller's next transaction starts clean (the lock outlives it). A server that refuses the lock
    statement itself (a login without the right to it) raises a ``TransportError`` saying so."""
    try:
        rows = conn.run("drain_lock", {}, {"lock_name": resource(name)}, what=what)
        conn.commit()
    except TransportError as exc:
        raise TransportError(f"the session lock for {what or name} could not be taken: {reason(exc)}") from None
    return bool(rows and rows[0][0] in (True, 1, "1", "t"))


def unlock(conn: Connection, name: str, what: str | None = None) -> None:
    """Release the named lock this session holds (a session given back to the run's pool keeps
    nothing). Rolls back first: the release must not ride on a failed transaction. A connection lost
    holds no lock: the release says so, as a ``TransportError`` (the driver's own error got through)."""
    conn.rollback()
    if conn.lost:
        raise TransportError(f"the session lock for {what or name} went with its lost connection")
    try:
        conn.run("drain_unlock", {}, {"lock_name": resource(name)}, what=what)
        conn.commit()
    except TransportError as exc:
        raise TransportError(f"the session lock for {what or name} could not be released: {reason(exc)}") from None


def _fence(name: str) -> str:
    return resource(f"{name}#claims")


def mark_claim(conn: Connection, name: str, what: str) -> None:
    """In a claim's transaction, before its lock is confirmed: mark the claim under way on the lock
    ``name`` guards, to the transaction's end (``wait_for_claims`` waits for it)."""
    conn.run("claim_fence_shared", {}, {"lock_name": _fence(name)}, what=what)


FENCE_POLL_SECONDS = 0.5  # between two tries of the claim fence
FENCE_SAY_SECONDS = 10.0  # between two log lines while it waits


def wait_for_claims(conn: Connection, name: str, what: str, give_up: Callable[[], str | None] = lambda: None) -> None:
    """Just after taking the lock ``name``: wait for every claim transaction under way on it to end.
    Why: a drain whose lock session died could have confirmed its lock and be committing a claim when
    this one took the lock; this one then read the queue's claims and versions without it, claimed
    the same (application id, version), and its batch was skipped as journalled: lost (a review, with
    the commit held 5 s). Once this returns, every claim of the old drain is committed or rolled back,
    and any later one fails its lock's confirmation.

    Tried every ``FENCE_POLL_SECONDS``, not waited for in one statement: a claim whose process froze is
    under way until the server ends its transaction (``idle_in_transaction_timeout_seconds``, 10 min by
    default), and a drain waited that long without a word, past its time box and through a SIGTERM (a
    review). It says why it waits, and raises ``DrainError`` once ``give_up`` gives a reason (a stop,
    the time box): its queue fails, and the next drain lands what the old one claimed."""
    started, said = time.monotonic(), None
    while True:
        rows = conn.run("claim_fence_wait", {}, {"lock_name": _fence(name)}, what=what)
        conn.commit()
        if rows and _granted(rows[0][0]):
            return
        waited = time.monotonic() - started
        reason = give_up()
        if reason is not None:
            raise DrainError(
                f"{what}: a drain whose lock went is still committing a claim after {waited:.0f}s; {reason} "
                "(the next drain lands that claim)"
            )
        if said is None or time.monotonic() - said >= FENCE_SAY_SECONDS:
            said = time.monotonic()
            log.info("%s: waiting for a claim a drain whose lock went is committing (%.0fs so far)", what, waited)
        time.sleep(FENCE_POLL_SECONDS)


def _granted(value: object) -> bool:
    """A driver's true: psycopg's bool, ADBC's and psqlodbc's text or number."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "t", "true")
    return bool(value)


def confirm_held(conn: Connection, what: str) -> None:
    """Raise ``TransportError`` when the session holding a lock no longer answers: the lock went with
    it (a restarted server, a terminated backend). A session that answers still holds what it took."""
    conn.run("db_now", what=what)
    conn.rollback()


def reason(exc: TransportError) -> str:
    """The server's words, without the statement's file name ("drain_lock on ... failed: ")."""
    return str(exc).split(" failed: ", 1)[-1]
