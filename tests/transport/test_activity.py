"""What ``PeakConnections`` counts, against a real PostgreSQL: the connections that take a slot of
the server's ``max_connections``, whoever opened them, and nothing else."""

from __future__ import annotations

import threading
import time

import psycopg
from queuelake.transport.activity import UNNAMED, PeakConnections


def test_a_querys_parallel_workers_are_not_connections(fresh_pg_uri: str) -> None:
    """A parallel query's workers show in ``pg_stat_activity`` under the database, and take no slot of
    ``max_connections``: one connection running parallel counts beside another is two connections."""
    with psycopg.connect(fresh_pg_uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE numbers AS SELECT g FROM generate_series(1, 2000000) g")
        for setting in ("max_parallel_workers_per_gather = 2", "parallel_setup_cost = 0", "parallel_tuple_cost = 0"):
            conn.execute(f"SET {setting}")
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN SELECT count(*) FROM numbers").fetchall())
        assert "Workers Planned: 2" in plan, plan

        def counts() -> None:
            until = time.monotonic() + 1.5
            while time.monotonic() < until:
                conn.execute("SELECT count(*) FROM numbers").fetchone()

        workers_seen = 0
        # named from its start: named by a SET after it, the watch could see it unnamed at the peak
        with (
            PeakConnections(fresh_pg_uri) as watch,
            psycopg.connect(fresh_pg_uri, autocommit=True, application_name="the-other-one") as other,
        ):
            counting = threading.Thread(target=counts)
            counting.start()
            while counting.is_alive():
                (running,) = other.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'parallel worker'"
                ).fetchone()
                workers_seen = max(workers_seen, running)
            counting.join()
    assert workers_seen > 0  # the workers were there to be miscounted
    assert watch.peak == 2 and watch.at_peak == {UNNAMED: 1, "the-other-one": 1}, watch.at_peak
