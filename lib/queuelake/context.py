"""Opening what a command works on: the queue database (possibly embedded) and the lake."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

from queuelake.config import Config
from queuelake.config_sections import TransportConfig
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection

# data folder -> its pgserver handle: one server per folder and process, stopped at process exit
_servers: dict[str, object] = {}
# drain workers of several queues ask for the server at once; pgserver's start is not thread-safe
# (its inter-process file lock is shared by the threads of a process), so one thread starts it.
# Across processes, pgserver's own inter-process lock and its per-folder list of handle pids
# make a second process reuse the running server, and the last one to exit stop it.
_servers_lock = threading.Lock()


def embedded_server(data_dir: str | Path) -> Any:
    """The pgserver instance for this data folder, started once per process (thread-safe)."""
    from queuelake.transport.embedded import start_embedded

    data = str(Path(data_dir).resolve())
    with _servers_lock:
        server = _servers.get(data)
        if server is None:
            Path(data).mkdir(parents=True, exist_ok=True)
            _forget_dead_handles(Path(data))
            server = start_embedded(data)
            _servers[data] = server
        return server


def _forget_dead_handles(data: Path) -> None:
    """Drop the pids of processes that died without cleaning up (SIGKILL) from pgserver's list of
    handles: with them listed, the last live process would never stop the server at exit."""
    handles = data / ".handle_pids.json"
    if not handles.exists():
        return
    from queuelake.transport.embedded import quiet_runtime_dir

    try:
        import psutil

        with quiet_runtime_dir():
            from pgserver.postgres_server import PostgresServer

        with PostgresServer._lock:
            pids = json.loads(handles.read_text())
            alive = [p for p in pids if isinstance(p, int) and psutil.pid_exists(p)]
            if alive != pids:
                handles.write_text(json.dumps(alive))
    except Exception:  # best effort: pgserver's internals may change; starting still works
        pass


def resolved_transport(config: Config) -> TransportConfig:
    """The transport config with an embedded server's connection string filled in: a new object, never
    ``config.transport`` changed (a config is not changed after it is loaded; before, this rewrote it under
    a lock, and what a module saw depended on whether another had connected first)."""
    t = config.transport
    if t.connection or not t.embedded:
        return t
    from queuelake.transport.drivers import driver
    from queuelake.transport.embedded import odbc_from_uri

    uri = embedded_server(t.embedded).get_uri("postgres")
    connection = odbc_from_uri(uri) if driver(t.driver).connection_string == "odbc" else uri
    return dataclasses.replace(t, connection=connection)


def open_database(config: Config) -> QueueDatabase:
    """The queue database a command works on, opened once by the command and passed down (the drain,
    replay and publish stages take it as an argument; no pipeline module opens its own): the embedded
    server started when configured, its connection string in the handle's transport. What ships to
    Spark tasks and drain processes carries it, so none of them starts a server of its own; the
    loaded ``config`` is unchanged."""
    return QueueDatabase(resolved_transport(config))


def connect(config: Config, application_name: str = "queuelake", driver: str | None = None) -> Connection:
    """One connection for a script that holds a Config only (notebooks, examples run by hand); the
    library's commands and stages open the database once (``open_database``) and connect through it."""
    return open_database(config).connect(application_name, driver)
