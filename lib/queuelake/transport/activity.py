"""What a run holds on the PostgreSQL server, seen from the server: the connections to one database
(``pg_stat_activity``), polled while a run goes on.

Why here: ``drain.max_connections`` is a promise about what the server sees, and a run's own count
(``peak_connections`` in the drain's summary) can only say what the run planned. The tests and the
benches measure the promise the same way, with this one poller.
"""

from __future__ import annotations

import threading
import time

import psycopg

POLL_SECONDS = 0.01


class PeakConnections:
    """The most connections to the database of ``uri`` (other than the poller's own) seen while the
    ``with`` block runs, polled every 10 ms."""

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
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
                self.peak = max(self.peak, int(row[0]) if row else 0)
                time.sleep(POLL_SECONDS)
