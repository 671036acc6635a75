"""``failures`` holds its failed copies compactly: the whole table as Python dicts at once, each row its
own copy of its queue, type and exception texts, peaked at 1.7 GB on 500,000 failures (a review)."""

from __future__ import annotations

import datetime as dt
import tracemalloc
import uuid

import pyarrow as pa
from queuelake.pipeline.failures import groups, read

ROWS = 10_000


def _failed(n: int) -> pa.Table:
    """``n`` failed copies as ``read.read_failed`` gives them: a few endpoints, types and exceptions."""
    schema = read._empty().schema
    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    values = {
        "queue": ['"public"."error"'] * n,
        "seq": list(range(n)),
        "id": [uuid.uuid4().hex for _ in range(n)],
        "outcome": ["landed"] * n,
        "message_id": [str(uuid.uuid4()) for _ in range(n)],
        "message_type": [
            f"Sales.Messages.Events.OrderPlaced{i % 7}, Sales.Messages, Version=1.0.0.0" for i in range(n)
        ],
        "processing_endpoint": [f"Billing{i % 5}" for i in range(n)],
        "failed_queue": [f"Billing{i % 5}@host" for i in range(n)],
        "exception_type": ["System.InvalidOperationException"] * n,
        "exception_message": [f"Order {i % 1000} could not be billed: the account is locked" for i in range(n)],
        "drained_at": [now - dt.timedelta(seconds=i) for i in range(n)],
        "at": [now - dt.timedelta(seconds=i) for i in range(n)],
        "fingerprint": [f"fp{i % 3}" for i in range(n)],
        "is_retry": [False] * n,
    }
    return pa.table(
        {f.name: pa.array(values[f.name], f.type) if f.name in values else pa.nulls(n, f.type) for f in schema},
        schema=schema,
    )


def test_grouping_holds_about_a_kilobyte_per_failed_copy() -> None:
    failed = _failed(ROWS)
    tracemalloc.start()
    try:
        grouping = groups.group(failed, [])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(g.summary()["copies"] for g in grouping.groups) == ROWS
    assert peak / ROWS < 1_500, f"{peak / ROWS:.0f} bytes per failed copy (2,100 before the rows were shared)"
