"""A lake with typed body tables, made for real: a PostgreSQL queue seeded with the bodies corpus,
drained, and the bodies stage run on it (the engine given: delta-rs or delta-spark). Shared by the
erase and retention tests of the typed tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.pipeline.bodies import run as bodies_run
from queuelake.transport import db, installer

from tests.helpers.bodies import send
from tests.helpers.bodies_corpus import corpus as c
from tests.helpers.stages import drain

ORDERS = "body_sales_contracts_orderplaced"


def typed_lake(uri: str, root: Path, spark: Any, engine: str, **lake: Any) -> tuple[Any, Any]:
    """(config, lake) after drain and bodies over the corpus on the queue ``Sales``."""
    cfg = from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(root), "engine": engine, **lake},
            "drain": {"queues": ["Sales"], "batch_size": 50},
        },
        env={},
    )
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    send(cfg, "Sales", list(c.corpus()))
    opened = open_lake(cfg.lake, spark)
    assert drain(cfg, opened)["status"] == "ok"
    out = bodies_run.bodies(cfg, spark, opened)
    assert out["status"] == "ok", out
    return cfg, opened


def ids_of(lake: Any, table: str) -> list[str]:
    return lake.read_arrow(table, columns=["message_id"]).column("message_id").to_pylist()
