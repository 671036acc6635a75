"""Journal rows made quickly through the lake port, with the ``drained_at`` a test chooses: what the
retention and erase tests (and their measurement) start from."""

from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa
from queuelake.lake.port import LakeEngine
from queuelake.lake.record_tables import MESSAGES

UTC = dt.timezone.utc
APP = "tests.journal_rows"  # the application id of the commits ``append`` makes


def batch(
    queue: str,
    seqs: range,
    drained_at: list[dt.datetime] | dt.datetime,
    outcome: str = "landed",
    message_ids: list[str] | None = None,
) -> pa.Table:
    """Journal rows of one queue: ``seqs`` in order, each with its ``drained_at`` (one for all, or one
    per row), a fresh message id unless given, and a small body that names it."""
    n = len(seqs)
    times = drained_at if isinstance(drained_at, list) else [drained_at] * n
    ids = message_ids or [str(uuid.uuid4()) for _ in range(n)]
    columns = {
        "queue": pa.array([queue] * n, pa.string()),
        "seq": pa.array(list(seqs), pa.int64()),
        "id": pa.array(ids, pa.string()),
        "batch_id": pa.array([f"b{seqs.start}"] * n, pa.string()),
        "drained_at": pa.array(times, MESSAGES.schema.field("drained_at").type),
        "outcome": pa.array([outcome] * n, pa.string()),
        "message_id": pa.array(ids, pa.string()),
        "body": pa.array([None if outcome == "expired" else f'{{"id":"{i}"}}'.encode() for i in ids], pa.binary()),
    }
    return pa.table(
        {f.name: columns.get(f.name, pa.nulls(n, f.type)) for f in MESSAGES.schema},
        schema=MESSAGES.schema,
    )


def append(lake: LakeEngine, data: pa.Table) -> None:
    """One commit (one file) of journal rows, their ``batch_id`` its transaction's, as the drain writes."""
    version = (lake.last_version(MESSAGES.name, APP) or 0) + 1
    index = data.schema.get_field_index("batch_id")
    data = data.set_column(index, "batch_id", pa.array([f"{APP}:{version}"] * data.num_rows, pa.string()))
    assert lake.append(MESSAGES.name, data, APP, version)
