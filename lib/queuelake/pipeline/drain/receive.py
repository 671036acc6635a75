"""Which driver a drain receives with, and a worker's receive connection."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from queuelake.config_sections import DrainConfig
from queuelake.dialects.dialect import dialect
from queuelake.transport import db, drivers
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection

if TYPE_CHECKING:
    from queuelake.pipeline.drain.sessions import SessionPool


def receive_driver(database: QueueDatabase, settings: DrainConfig) -> str:
    """The name of the driver the drain receives with (``drivers.receive_driver`` says which)."""
    reaches = dialect(database.dialect).drivers
    return drivers.receive_driver(database.driver, settings.receive_driver, reaches).name


def receive_connection(database: QueueDatabase, driver: str, shared: db.SharedAdbc | None, worker: int) -> Connection:
    """A worker's receive connection: from the run's shared ADBC database when the receive goes
    through ADBC, else a connection of its own with ``driver``."""
    if shared is not None:
        return shared.connect()
    return database.connect(f"queuelake-drain-{worker}", driver=driver)


def receive_session(
    database: QueueDatabase, driver: str, shared: db.SharedAdbc | None, worker: int, sessions: SessionPool | None
) -> contextlib.AbstractContextManager[Connection]:
    """A worker's receive connection for the ``with`` it drains in: one of the run's kept sessions,
    given back rolled back (``sessions.SessionPool``), else its own, closed at the end."""
    if sessions is None:
        return receive_connection(database, driver, shared, worker)
    from queuelake.pipeline.drain.sessions import RECEIVE

    return sessions.session(RECEIVE, lambda conn: conn.rollback())
