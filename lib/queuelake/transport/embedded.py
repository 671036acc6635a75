"""A throwaway PostgreSQL for the demo and the tests (the ``pgserver`` package ships the binaries)."""

from __future__ import annotations

import contextlib
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


def start_embedded(data_dir: str | Path | None = None) -> Any:
    """Start (or reuse) a pgserver instance; it stops when this process exits."""
    path = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="queuelake-pg-"))
    with quiet_runtime_dir():
        import pgserver

        return pgserver.get_server(path, cleanup_mode="stop")


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
