"""A throwaway PostgreSQL for the demo and the tests (the ``pgserver`` package ships the binaries).

Here, in the transport layer, rather than in ``context``: the queue database's handle
(``transport/database.py``) starts the server itself, the first time a connection is needed, so that
a command with nothing to do for the database (an idle publish) never starts one."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from queuelake.config_sections import TransportConfig
from queuelake.report import log

# data folder -> its pgserver handle: one server per folder and process, stopped at process exit
_servers: dict[str, object] = {}
# drain workers of several queues ask for the server at once; pgserver's start is not thread-safe
# (its inter-process file lock is shared by the threads of a process), so one thread starts it.
# Across processes, pgserver's own inter-process lock and its per-folder list of handle pids
# make a second process reuse the running server, and the last one to exit stop it.
_servers_lock = threading.Lock()


def resolved_transport(t: TransportConfig) -> TransportConfig:
    """``t`` with an embedded server's connection string filled in (the server started if it is not
    running in this process yet): a new object, never ``t`` changed. A transport with a connection
    string, or with no embedded server, is returned as it is."""
    if t.connection or not t.embedded:
        return t
    from queuelake.transport.drivers import driver

    uri = embedded_server(t.embedded).get_uri("postgres")
    connection = odbc_from_uri(uri) if driver(t.driver).connection_string == "odbc" else uri
    return dataclasses.replace(t, connection=connection)


def embedded_server(data_dir: str | Path) -> Any:
    """The pgserver instance for this data folder, started once per process (thread-safe)."""
    data = str(Path(data_dir).resolve())
    with _servers_lock:
        server = _servers.get(data)
        if server is None:
            Path(data).mkdir(parents=True, exist_ok=True)
            _forget_dead_handles(Path(data))
            _forget_dead_postmaster(Path(data))
            server = start_embedded(data)
            _servers[data] = server
        return server


def _forget_dead_handles(data: Path) -> None:
    """Drop the pids of processes that died without cleaning up (SIGKILL) from pgserver's list of
    handles: with them listed, the last live process would never stop the server at exit."""
    handles = data / ".handle_pids.json"
    if not handles.exists():
        return
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


def _forget_dead_postmaster(data: Path) -> None:
    """Remove the ``postmaster.pid`` of a server killed outright whose process is a zombie (a
    container's first process that reaps no children): pgserver took the zombie for a running server
    and every next command failed to connect to it (found killing the postmaster in a test)."""
    pid_file = data / "postmaster.pid"
    try:
        import psutil

        lines = pid_file.read_text().splitlines()
        pid = int(lines[0])
        if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            return
        # its socket's lock file names the zombie too, and PostgreSQL refuses to start beside it
        socket = Path(lines[4]) / f".s.PGSQL.{int(lines[3])}"
        lock = socket.with_name(socket.name + ".lock")
        if lock.exists() and lock.read_text().split()[:1] == [str(pid)]:
            lock.unlink()
            socket.unlink(missing_ok=True)
        pid_file.unlink()
        log.info("the embedded PostgreSQL in %s had been killed; starting it again", data)
    except Exception:  # noqa: BLE001 - no file, no such process, a file being written: pgserver's own checks apply
        pass


def start_embedded(data_dir: str | Path | None = None) -> Any:
    """Start (or reuse) a pgserver instance; it stops when this process exits."""
    import subprocess

    from queuelake.errors import TransportError

    path = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="queuelake-pg-"))
    with quiet_runtime_dir():
        import pgserver

        try:
            server = pgserver.get_server(path, cleanup_mode="stop")
        except subprocess.CalledProcessError as exc:
            # a postmaster killed while it started (its crash recovery): pg_ctl's exit status was the
            # command's error, "unexpected" (a review). The server's log lines went to stderr already.
            raise TransportError(
                f"the embedded PostgreSQL in {path} did not start ({Path(str(exc.cmd[0])).name} exited with "
                f"{exc.returncode}); run the command again"
            ) from None
    # its stop at exit, unless its server is gone already (``_stop_at_exit``)
    atexit.unregister(server._cleanup)
    atexit.register(_stop_at_exit, server)
    return server


def _stop_at_exit(server: Any) -> None:
    """pgserver's stop at exit, skipped when the server's postmaster is gone already (killed, or the
    machine's OOM killer): pgserver then waited seconds for ``pg_ctl stop`` and printed its output and a
    traceback after the command's summary (a review). Said in one line instead."""
    if getattr(server, "pgdata", None) not in getattr(type(server), "_instances", {}):
        return  # stopped already (its ``cleanup``: the test suite's own server)
    info = getattr(server, "_postmaster_info", None)
    process = getattr(info, "process", None)
    try:
        gone = process is not None and (not process.is_running() or process.status() == "zombie")
    except Exception:  # noqa: BLE001 - psutil's NoSuchProcess and the like: gone
        gone = True
    if gone:
        log.warning("the embedded PostgreSQL in %s was gone before this command ended", server.pgdata)
        _release_handle(server)
        return
    try:
        server._cleanup()
    except Exception as exc:  # noqa: BLE001 - a stop that failed at exit: said, not a traceback
        log.warning("the embedded PostgreSQL in %s could not be stopped: %s", server.pgdata, exc)


def _release_handle(server: Any) -> None:
    """This process's handle on the data folder dropped, as pgserver's stop at exit drops it; the last
    handle stops the postmaster another command started again after this one's was killed. Without it,
    that postmaster outlived every command (a review): the command that restarted it ended first and left
    it to this one, whose pid was still in pgserver's list of handles."""
    import os

    try:
        with server._lock:
            pids = server.global_process_id_list.get_and_remove(os.getpid())
            if pids != [os.getpid()]:
                return  # another command holds the server: it stops it
            type(server)._instances.pop(server.pgdata, None)
        data = Path(server.pgdata)
        if not (data / "postmaster.pid").exists():
            return
        _forget_dead_postmaster(data)  # a zombie's file: nothing to stop
        if (data / "postmaster.pid").exists():
            from pgserver._commands import pg_ctl  # type: ignore[attr-defined]  # made by a loop there

            pg_ctl(["-w", "stop"], pgdata=data, user=server.system_user)
            log.info("stopped the embedded PostgreSQL in %s, started again while this command ran", data)
    except Exception as exc:  # noqa: BLE001 - at exit: said, not a traceback
        log.warning("the embedded PostgreSQL in %s could not be stopped: %s", server.pgdata, exc)


@contextlib.contextmanager
def quiet_runtime_dir() -> Iterator[None]:
    """Around pgserver's import and start: platformdirs warns, on every command where XDG_RUNTIME_DIR
    is unset or shared (containers, CI, cron), that it uses /tmp/runtime-<uid> instead: a fine choice
    for a throwaway server, and not the operator's business."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        yield


def odbc_from_uri(uri: str, driver: str = "PostgreSQL Unicode") -> str:
    """The psqlodbc connection string equivalent to a libpq URI (socket directory or host)."""
    parts = urlsplit(uri)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    host = query.get("host") or parts.hostname or "localhost"
    port = query.get("port") or (str(parts.port) if parts.port else "5432")
    database = unquote(parts.path.lstrip("/")) or "postgres"
    user = unquote(parts.username or "postgres")
    password = unquote(parts.password or "")
    fields = {
        "Driver": driver,
        "Servername": host,
        "Port": port,
        "Database": database,
        "Uid": user,
        "Pwd": password,
        # bytea as binary, not as escaped text; text as wide strings
        "ByteaAsLongVarBinary": "1",
        # never rewrite LF as CRLF in text (psqlodbc's default on Windows): headers come back as written
        "LFConversion": "0",
    }
    return ";".join(f"{k}={_odbc_value(v)}" for k, v in fields.items()) + ";"


def _odbc_value(value: str) -> str:
    """An ODBC attribute value: braced (``}`` doubled) when it holds ``;``, braces, ``=`` or spaces."""
    if value and (any(ch in value for ch in ";{}= ") or value != value.strip()):
        return "{" + value.replace("}", "}}") + "}"
    return value


def with_database(uri: str, database: str) -> str:
    """The same server URI pointing at another database."""
    parts = urlsplit(uri)
    return parts._replace(path="/" + database).geturl()
