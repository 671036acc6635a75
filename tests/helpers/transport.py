"""Transport configs for the integration tests, on real PostgreSQL through either driver (psycopg or
pyodbc): a ``Config`` for a database, a connection, a queue's table reference, and a config file whose
connection comes from ``${QUEUELAKE_CONNECTION}``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from queuelake.config import Config, from_dict
from queuelake.transport import db
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef, queue_ref

from tests.helpers.db import connection_string


def make_config(uri: str, driver: str, queues: Sequence[str] = ("Sales",), **transport: Any) -> Config:
    data = {
        "transport": {
            "dialect": "postgresql",
            "driver": driver,
            "connection": connection_string(uri, driver),
            **transport,
        },
        "drain": {"queues": list(queues)},
    }
    return from_dict(data, env={})


def connect(uri: str, driver: str) -> Connection:
    return db.connect(make_config(uri, driver).transport, "queuelake-tests")


def ref(name: str, driver: str = "psycopg", uri: str = "postgresql://x@localhost/x") -> TableRef:
    return queue_ref(name, make_config(uri, driver).transport)


def write_config(
    tmp_path: Path, driver: str, queues: Iterable[str], name: str = "queuelake.yaml", **transport: Any
) -> Path:
    """A config file whose connection comes from ${QUEUELAKE_CONNECTION}, as a deployment's would."""
    data = {
        "transport": {
            "dialect": "postgresql",
            "driver": driver,
            "connection": "${QUEUELAKE_CONNECTION}",
            **transport,
        },
        "drain": {"queues": list(queues)},
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path
