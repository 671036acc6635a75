"""Journal rows that cannot be built or stored, quarantined one by one: the reason (the reference
decoder's, else the error), the raw header text and the body, nothing typed.

Why: nothing in a row's content may stop its queue (design section 3). The build quarantines the
single rows its bisection isolates (``quarantine_row``); the drain, when writing a batch's rows
fails, finds the rows to blame by bisecting the write (``isolate_unstorable``).
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.nsb import headers as hdr
from queuelake.nsb import row_path
from queuelake.pipeline.journal.schema import MESSAGES_SCHEMA, UTC_TS
from queuelake.pipeline.journal.text import as_array, error_text, raw_expires, safe_text, to_texts

log = logging.getLogger("queuelake")
NULL_ID_NAMESPACE = uuid.UUID("5f0c1a52-7d1e-4c55-9a47-6b7e1d0c9f31")  # the stand-in ids of rows whose id is NULL


def quarantine_row(
    received: pa.Table,
    queue: str,
    batch_id: str,
    drained_at: dt.datetime,
    exc: Exception,
    stage: str = "built",
) -> tuple[pa.Table, dict[str, int]]:
    """One row the journal builder cannot handle, as a quarantined row: the reference decoder's
    reason if it refuses the row, else the error; the raw header text, the body; no typed columns.

    ``stage`` "stored": the row was built but its journal row could not be written (``isolate_unstorable``);
    then even ``expires`` is kept only as text (``raw_expires``), so that nothing typed is left that
    could fail the write again."""
    (raw,) = to_texts(received["headers"])
    (row_id,) = to_texts(received["id"])
    try:
        reason = row_path.reason(raw, row_id) if stage == "built" else None
    except Exception:  # the reference failing too: the original error says more
        reason = None
    if not reason:
        reason = f"journal could not be {stage} for this row: {error_text(exc)}"
    row_ids = received["id"]
    if row_ids.null_count:
        # a table not made by the transport may hold a NULL id, and the journal's id takes none: the row
        # is kept under an id made from its queue and seq (the same in every attempt), and says so. It
        # was refused again as quarantined, and blocked its queue for good (a review)
        stand_in = str(uuid.uuid5(NULL_ID_NAMESPACE, f"{queue}\x00{received['seq'][0].as_py()}"))
        row_ids = pa.array([stand_in], pa.string())
        reason = f"the row's id is NULL (kept under the id {stand_in}); {reason}"
    expires, raw_text = received["expires"], raw_expires(received)
    if stage != "built":
        raw_text = pc.coalesce(raw_text, _timestamp_text(expires))
        expires = pa.nulls(1, UTC_TS)
    columns: dict[str, Any] = {
        "queue": pa.array([queue], pa.string()),
        "seq": received["seq"],
        "id": row_ids,
        "batch_id": pa.array([batch_id], pa.string()),
        "drained_at": pa.array([drained_at], UTC_TS),
        "outcome": pa.array(["quarantined"], pa.string()),
        "error": pa.array([safe_text(reason)], pa.string()),
        "body": received["body"],
        "expires": expires,
        "raw_expires": raw_text,
        "raw_headers": pa.array([safe_text(raw)], pa.string()),
        # the ids its headers name, where it was built; a row that could not be stored keeps nothing
        # of its content typed, so that nothing of it can fail the write again
        **{
            column: pa.array([text], pa.string())
            for column, text in (named_ids(raw) if stage == "built" else {}).items()
        },
    }
    arrays = [columns[f.name].cast(f.type) if f.name in columns else pa.nulls(1, f.type) for f in MESSAGES_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=MESSAGES_SCHEMA), {"expired": 0, "quarantined": 1, "landed": 0}


def named_ids(raw: str | None) -> dict[str, str]:
    """The message and conversation ids a quarantined row's headers name, where they are a JSON object
    whose values for those names are text: nothing else of such a row is typed, and ``find``, ``where``
    and ``conversation`` found it nowhere by its id (a review). Best effort: none where they do not
    parse."""
    try:
        headers = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(headers, dict):
        return {}
    out = {}
    for column, name in (("message_id", hdr.MESSAGE_ID), ("conversation_id", hdr.CONVERSATION_ID)):
        value = headers.get(name)
        if isinstance(value, str) and value:
            out[column] = safe_text(value) or value
    return out


def with_named_ids(columns: dict[str, Any], raws: dict[int, str | None], n: int) -> None:
    """``columns``' message and conversation ids of the quarantined rows ``raws`` (row -> its header
    text) set where their headers name them (``named_ids``)."""
    named = {i: named_ids(raw) for i, raw in raws.items()}
    for column in ("message_id", "conversation_id"):
        found = {i: ids[column] for i, ids in named.items() if column in ids}
        if not found:
            continue
        mask = np.zeros(n, dtype=bool)
        mask[list(found)] = True
        values = pa.array([found[i] for i in sorted(found)], pa.string())
        current = columns[column]
        if isinstance(current, pa.ChunkedArray):
            current = current.combine_chunks()
        columns[column] = pc.replace_with_mask(current.cast(pa.string()), pa.array(mask), values)


def _timestamp_text(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Timestamps as ISO text in Arrow (any int64 instant, where Python's datetime stops at 9999)."""
    try:
        return pc.cast(as_array(values).cast(pa.timestamp("us")), pa.string())
    except pa.ArrowException:
        return pa.nulls(len(values), pa.string())


def isolate_unstorable(
    received: pa.Table,
    table: pa.Table,
    check: Callable[[pa.Table], None],
    queue: str,
    batch_id: str,
    drained_at: dt.datetime,
    error: Exception,
) -> tuple[pa.Table, dict[str, int]]:
    """A batch's journal rows (``table``, built from ``received`` row for row) whose writing failed
    with ``error``: the rows that ``check`` (the write without the storage) refuses are found by
    bisection and quarantined with the error and their raw text, the rest kept. Returns the rows to
    write and their counts per outcome. Re-raises ``error`` when no row is to blame (the lake, not
    the data), or every row of the batch alike (a fault of ours, not of one row's value): that
    failure is the run's, and the batch goes back to the queue whole.

    Why: the build's own fallback protects only the build. A value at the edge of its type failed
    later stages (the file statistics of a time in the last millisecond of 9999), and since the same
    rows come back first, such a row blocked its queue on every run."""
    bad = _refused_rows(table, check, 0)
    if not bad or (len(bad) == table.num_rows > 1):  # none to blame, or all alike: not about a row
        raise error
    log.warning(
        "journal: %d row(s) of a batch of %s could not be written (%s); quarantining them",
        len(bad),
        queue,
        error_text(error, 300),
    )
    parts: list[pa.Table] = []
    start = 0
    for i, exc in bad:
        if i > start:
            parts.append(table.slice(start, i - start))
        row, _ = quarantine_row(received.slice(i, 1), queue, batch_id, drained_at, exc, stage="stored")
        parts.append(row)
        start = i + 1
    if start < table.num_rows:
        parts.append(table.slice(start))
    kept = pa.concat_tables(parts)
    outcomes = collections.Counter(kept["outcome"].to_pylist())
    return kept, {k: outcomes.get(k, 0) for k in ("expired", "quarantined", "landed")}


def _refused_rows(table: pa.Table, check: Callable[[pa.Table], None], offset: int) -> list[tuple[int, Exception]]:
    """(index, error) of every row ``check`` refuses alone, found by bisection, in row order."""
    try:
        check(table)
        return []
    except Exception as exc:  # noqa: BLE001 - any failure of a part: look inside it
        if table.num_rows == 1:
            return [(offset, exc)]
        failure = exc
    half = table.num_rows // 2
    found = _refused_rows(table.slice(0, half), check, offset)
    found += _refused_rows(table.slice(half), check, offset + half)
    if not found:  # the halves pass where the whole failed: not a row's doing
        log.debug("journal: a part failed only whole (%s)", error_text(failure, 200))
    return found
