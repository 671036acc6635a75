"""The typed-bodies tests' set-up: a config with a ``bodies`` section, messages sent to a queue, and a typed
table's rows in a stable order."""

from __future__ import annotations

from pathlib import Path

from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.transport import db
from queuelake.transport.table_refs import queue_ref


def config(uri: str, root: Path, engine: str, names: dict | None = None, **bodies: object):
    """``names``: more ``lake`` keys (``catalog``, ``schema``); ``bodies``: the ``bodies`` section."""
    return from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(root), "engine": engine, **(names or {})},
            "drain": {"queues": ["Sales", "audit"], "batch_size": 50},
            "bodies": bodies,
        },
        env={},
    )


def send(cfg, queue: str, messages) -> None:
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref(queue, cfg.transport), list(messages))


def rows(lake, table: str) -> list[dict]:
    return sorted(lake.read_arrow(table).to_pylist(), key=lambda r: (r.get("message_id") or "", r.get("queue") or ""))
