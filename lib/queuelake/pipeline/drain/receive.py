"""Which driver a drain receives with, and a worker's receive connection."""

from __future__ import annotations

from queuelake.config import Config
from queuelake.context import connect
from queuelake.transport import db
from queuelake.transport.db import Connection


def receive_driver(config: Config) -> str:
    wanted = config.drain.receive_driver
    if wanted != "auto":
        return wanted
    if config.transport.driver == "psycopg" and db.adbc_available():  # a libpq connection string
        return "adbc"
    return config.transport.driver


def receive_connection(config: Config, driver: str, shared: db.SharedAdbc | None, worker: int) -> Connection:
    """A worker's receive connection: from the run's shared ADBC database when the receive goes
    through ADBC, else a connection of its own with ``driver``."""
    if shared is not None:
        return shared.connect()
    return connect(config, f"queuelake-drain-{worker}", driver=driver)
