"""Found rows as an operator reads them: one JSON object per row (every column, whole bodies), or a
table of one line per row (the columns that tell a message's story, bodies cut short).

Why both: the table is for a person at a terminal, the JSON lines for ``jq`` and scripts
(``queuelake find ... --json | sed '$d' | jq``: the command's last line is its summary). A body is
shown as text when it is UTF-8 (NServiceBus bodies are JSON or XML text), else as base64, and the
JSON line says which (``body_encoding``).
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator
from typing import Any

import orjson
import pyarrow as pa

from queuelake.report import printable
from queuelake.timetext import shown_utc

BODY_CHARS = 60  # of a body in the table
TABLE = ("time_sent", "kind", "moment", "queue", "seq", "message_id", "message_type", "detail", "body")
HEADINGS = {"time_sent": "TIME SENT (UTC)", "moment": "AT (UTC)", "seq": "SEQ", "message_id": "MESSAGE ID"}


def kind(row: dict[str, Any]) -> str:
    """What a row is: ``failed`` (an error copy), ``audit`` (a processed copy), ``expired`` or
    ``quarantined`` (its outcome), else ``sent`` (a send or a retry drained from its queue)."""
    if row.get("outcome") in ("expired", "quarantined"):
        return str(row["outcome"])
    if row.get("failed_queue") or row.get("exception_type") or row.get("time_of_failure"):
        return "failed"
    if row.get("processing_started") or row.get("processing_ended"):
        return "audit"
    return "sent"


def kinds(rows: pa.Table) -> list[str]:
    """``kind`` of every row, reading only the columns it needs."""
    needed = ["outcome", "failed_queue", "exception_type", "time_of_failure", "processing_started", "processing_ended"]
    return [kind(row) for row in rows.select(needed).to_pylist()]


def body_text(body: bytes | None) -> tuple[str | None, str | None]:
    """(the body as text, its encoding: ``utf-8`` or ``base64``); (None, None) for no body."""
    if body is None:
        return None, None
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), "base64"


def _iso(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        value = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return value


def json_rows(rows: pa.Table) -> Iterator[dict[str, Any]]:
    """Each row as a JSON-ready dict: every column, ``kind``, times as ISO 8601 UTC, headers as an
    object, the whole body as text or base64 with ``body_encoding``."""
    for row in rows.to_pylist():
        out: dict[str, Any] = {"kind": kind(row)}
        for name, value in row.items():
            if name == "body":
                out["body"], out["body_encoding"] = body_text(value)
            elif name == "headers" and value is not None:
                out["headers"] = dict(value)
            else:
                out[name] = _iso(value)
        yield out


def json_lines(rows: pa.Table) -> Iterator[str]:
    for row in json_rows(rows):
        yield orjson.dumps(row).decode()


def _time(value: Any) -> str:
    if not isinstance(value, dt.datetime):
        return "-"
    return shown_utc(value)


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())  # line breaks and tabs of a body would break the table's lines
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cells(row: dict[str, Any]) -> dict[str, str]:
    what = kind(row)
    body, encoding = body_text(row.get("body"))
    detail = row.get("exception_type") if what == "failed" else row.get("processing_endpoint")
    if what == "quarantined":
        detail = row.get("error")
    return {
        "time_sent": _time(row.get("time_sent")),
        "kind": what,
        "moment": _time(row.get("moment")),
        "queue": str(row.get("queue")),
        "seq": str(row.get("seq")),
        "message_id": str(row.get("message_id") or "-"),
        "message_type": _short(str(row.get("message_type") or "-"), 40),
        "detail": _short(str(detail or row.get("originating_endpoint") or "-"), 40),
        "body": "-" if body is None else _short(("base64:" if encoding == "base64" else "") + body, BODY_CHARS),
    }


def table_lines(rows: pa.Table) -> list[str]:
    """The rows as aligned text lines under a heading; ``(nothing found)`` for none."""
    if not rows.num_rows:
        return ["(nothing found)"]
    cells = [{name: printable(text) for name, text in _cells(row).items()} for row in rows.to_pylist()]
    heads = {name: HEADINGS.get(name, name.upper().replace("_", " ")) for name in TABLE}
    widths = {name: max(len(heads[name]), *(len(c[name]) for c in cells)) for name in TABLE}
    right = {"seq"}

    def line(values: dict[str, str]) -> str:
        parts = [values[n].rjust(widths[n]) if n in right else values[n].ljust(widths[n]) for n in TABLE]
        return "  ".join(parts).rstrip()

    return [line(heads)] + [line(c) for c in cells]
