"""A whole system in one drain (issue 32, bounded connections): hundreds of queues, and never more
database connections than ``drain.max_connections``, against a real PostgreSQL whose own
``max_connections`` is the default 100 (a drain of 100 queues opened ~300 and 39 queues failed)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.lake.reading import read_table
from queuelake.pipeline.drain.run import connection_plan, drain
from queuelake.transport import db, installer
from queuelake.transport.queues import OutgoingMessage, send
from queuelake.transport.tables import queue_ref


class PeakConnections:
    """Polls pg_stat_activity for the connections to one database (other than its own) while a
    drain runs, and keeps the highest count seen."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> PeakConnections:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        with psycopg.connect(self.uri, autocommit=True) as conn:
            while not self._stop.is_set():
                (count,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
                self.peak = max(self.peak, count)
                time.sleep(0.01)


def test_the_plan_never_exceeds_the_budget() -> None:
    for budget in range(4, 60):
        for workers in (1, 2, 3, 8, 32):
            for shared in (None, object()):
                plan = connection_plan(budget, workers, 500, shared)
                held = plan.at_once * (1 + 2 * plan.workers) + (shared is not None)
                assert held <= budget and plan.at_once >= 1 and 1 <= plan.workers <= workers, (budget, workers)
    assert connection_plan(24, 2, 500, object()) == connection_plan(24, 2, 500, object())
    assert connection_plan(24, 2, 3, None).at_once == 3  # a few queues: all at once, as before


@pytest.mark.slow
@pytest.mark.parametrize(("queues", "max_connections"), [(150, 24), (40, 6)])
def test_hundreds_of_queues_within_the_connection_budget(
    fresh_pg_uri: str, tmp_path: Path, queues: int, max_connections: int
) -> None:
    names = [f"Endpoint{i:03d}" for i in range(queues)]
    settings = {
        "transport": {"connection": fresh_pg_uri},
        "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
        "drain": {"queues": names, "batch_size": 50, "max_connections": max_connections},
    }
    cfg = from_dict(settings, env={})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        for i, name in enumerate(names):  # every third queue empty: it costs one check
            if i % 3:
                send(conn, queue_ref(name, cfg.transport), [OutgoingMessage("{}", b"x")] * 4)
        conn.commit()
    with PeakConnections(fresh_pg_uri) as watch:
        summary = drain(cfg, open_lake(cfg.lake))
    assert summary["status"] == "ok", [q for q in summary["queues"] if q["status"] != "ok"][:3]
    expected = 4 * sum(1 for i in range(queues) if i % 3)
    assert summary["dequeued"] == expected and read_table(str(tmp_path / "lake" / "messages")).num_rows == expected
    assert 0 < watch.peak <= max_connections, watch.peak
