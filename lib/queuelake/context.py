"""Opening what a command works on: the queue database (possibly embedded) and the lake."""

from __future__ import annotations

from queuelake.config import Config
from queuelake.transport import embedded
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection

# data folder -> its pgserver handle (``transport.embedded``, where the server is started): the
# same dict, so that the demo, which stops its server before it returns, finds it here
_servers = embedded._servers


def open_database(config: Config) -> QueueDatabase:
    """The queue database a command works on, opened once by the command and passed down (the drain,
    replay and publish stages take it as an argument; no pipeline module opens its own). Opening
    starts nothing: an embedded server is started by the handle the first time a connection is
    needed (an idle publish, which finds nothing to send in the lake, never starts one), and a handle
    shipped to Spark tasks or drain processes carries its connection string already filled in, so
    none of them starts a server of its own; the loaded ``config`` is unchanged."""
    return QueueDatabase(config.transport)


def connect(config: Config, application_name: str = "queuelake", driver: str | None = None) -> Connection:
    """One connection for a script that holds a Config only (notebooks, examples run by hand); the
    library's commands and stages open the database once (``open_database``) and connect through it."""
    return open_database(config).connect(application_name, driver)
