"""What a run holds on the PostgreSQL server, seen from the server: the connections to one database
(``pg_stat_activity``), polled while a run goes on.

Why here: ``drain.max_connections`` is a promise about what the server sees, and a run's own count
(``peak_connections`` in the drain's summary) can only say what the run planned. The tests and the
benches measure the promise the same way, with this one poller.

Every connection to the database counts, whoever opened it: the poller filters on the database and
the backend's type only, never on ``application_name`` (ADBC's connections set none), so with
``drain.on: executors`` the Spark tasks' connections, opened from other processes, count beside the
driver's. Only client backends count, as only they take a slot of the server's ``max_connections``:
autovacuum's workers and a query's parallel workers show in ``pg_stat_activity`` under the database
too: a one-queue drain of 500,000 rows was seen holding 7 where it held 5, two of them a parallel
query's workers.
"""

from __future__ import annotations

import threading
import time

import psycopg

POLL_SECONDS = 0.01
UNNAMED = "(unnamed)"  # connections that set no application_name (ADBC's)


class PeakConnections:
    """The most connections to the database of ``uri`` (other than the poller's own) seen while the
    ``with`` block runs, polled every 10 ms; ``at_peak``: those connections by ``application_name``
    at the first poll that saw the peak (which part of a run held them)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.peak = 0
        self.at_peak: dict[str, int] = {}
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
                rows = conn.execute(
                    "SELECT application_name, count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend'"
                    " GROUP BY application_name"
                ).fetchall()
                seen = sum(int(n) for _, n in rows)
                if seen > self.peak:
                    self.peak = seen
                    self.at_peak = {(name or UNNAMED): int(n) for name, n in sorted(rows, key=lambda r: r[0] or "")}
                time.sleep(POLL_SECONDS)
