"""Which driver a drain receives with, and a worker's receive connection."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from queuelake.config import Config
from queuelake.context import connect
from queuelake.transport import db, drivers
from queuelake.transport.db import Connection
from queuelake.transport.dialects import dialect

if TYPE_CHECKING:
    from queuelake.pipeline.drain.sessions import SessionPool


def receive_driver(config: Config) -> str:
    """The name of the driver the drain receives with (``drivers.receive_driver`` says which)."""
    reaches = dialect(config.transport.dialect).drivers
    return drivers.receive_driver(config.transport.driver, config.drain.receive_driver, reaches).name


def receive_connection(config: Config, driver: str, shared: db.SharedAdbc | None, worker: int) -> Connection:
    """A worker's receive connection: from the run's shared ADBC database when the receive goes
    through ADBC, else a connection of its own with ``driver``."""
    if shared is not None:
        return shared.connect()
    return connect(config, f"queuelake-drain-{worker}", driver=driver)


def receive_session(
    config: Config, driver: str, shared: db.SharedAdbc | None, worker: int, sessions: SessionPool | None
) -> contextlib.AbstractContextManager[Connection]:
    """A worker's receive connection for the ``with`` it drains in: one of the run's kept sessions,
    given back rolled back (``sessions.SessionPool``), else its own, closed at the end."""
    if sessions is None:
        return receive_connection(config, driver, shared, worker)
    from queuelake.pipeline.drain.sessions import RECEIVE

    return sessions.session(RECEIVE, lambda conn: conn.rollback())
