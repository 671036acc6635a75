"""The delta-rs engine's Spark data source is registered safely from threads and on every session.

Why: ``bodies`` appends its types' tables from a thread pool, and each write registers the data source.
Spark refuses a registration (DATA_SOURCE_ALREADY_EXISTS) when the JVM thread's active session holds the
name but the session written with does not; the second scheduled ``queuelake run`` failed so for 3 of
4 types (issue 57). These tests put a thread in exactly that state, on a real local Spark."""

from __future__ import annotations

import threading

import pytest
from queuelake.lake.delta_spark.datasource import activate, register, registered

pytestmark = pytest.mark.slow


def test_a_session_is_registered_while_another_is_active(spark) -> None:
    register(spark)
    other = spark.newSession()
    activate(spark)  # the thread's active session holds the source; ``other`` does not yet
    assert not registered(other)
    register(other)
    assert registered(other) and registered(spark)


def test_threads_register_one_new_session_at_once(spark) -> None:
    register(spark)
    failures: list[str] = []
    for _ in range(5):
        target = spark.newSession()
        start = threading.Barrier(4)

        def write(target=target, start=start) -> None:
            activate(spark)  # a pool thread whose JVM thread carries another active session
            start.wait()
            try:
                register(target)
            except Exception as exc:  # noqa: BLE001 - collected, asserted below
                failures.append(str(exc)[:200])

        threads = [threading.Thread(target=write) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert registered(target)
    assert failures == []
