"""Opening what a command works on: the queue database (possibly embedded) and the lake."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from queuelake.config import Config, TransportConfig
from queuelake.transport import db
from queuelake.transport.db import Connection

_servers: dict[str, object] = {}


def resolved_transport(config: Config) -> TransportConfig:
    """The transport config with an embedded server's connection string filled in."""
    t = config.transport
    if t.connection or not t.embedded:
        return t
    from queuelake.transport.embedded import odbc_from_uri, start_embedded

    data = str(Path(t.embedded).resolve())
    if data not in _servers:
        Path(data).mkdir(parents=True, exist_ok=True)
        _servers[data] = start_embedded(data)
    uri = _servers[data].get_uri("postgres")  # type: ignore[attr-defined]
    connection = odbc_from_uri(uri) if t.driver == "pyodbc" else uri
    resolved = dataclasses.replace(t, connection=connection)
    config.transport = resolved
    return resolved


def connect(config: Config, application_name: str = "queuelake", driver: str | None = None) -> Connection:
    return db.connect(resolved_transport(config), application_name, driver)
