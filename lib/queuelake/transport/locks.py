"""Named session locks (advisory lock / sp_getapplock): one drain per queue, one run per replay id.

The lock belongs to the session, not to a transaction, so it holds until the connection closes or the
process dies; the caller keeps a connection open for as long as it needs the lock.
"""

from __future__ import annotations

from queuelake.transport.db import Connection


def try_lock(conn: Connection, name: str, what: str | None = None) -> bool:
    """Take the named lock without waiting; False when another session holds it. Commits, so that
    the caller's next transaction starts clean (the lock outlives it)."""
    rows = conn.run("drain_lock", {}, {"lock_name": name}, what=what)
    conn.commit()
    return bool(rows and rows[0][0] in (True, 1, "1", "t"))


def unlock(conn: Connection, name: str, what: str | None = None) -> None:
    """Release the named lock this session holds (a session given back to the run's pool keeps
    nothing). Rolls back first: the release must not ride on a failed transaction."""
    conn.rollback()
    conn.run("drain_unlock", {}, {"lock_name": name}, what=what)
    conn.commit()
