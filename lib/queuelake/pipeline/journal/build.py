"""The journal rows of a received batch: its header text decoded, typed columns extracted, and the
split into landed / expired / quarantined made here, so one batch is one Delta commit.

The header JSON of a batch is decoded natively (``nsb.batch_headers``, outside the GIL) for the rows it
reads exactly as the reference does, and with orjson row by row (``nsb.row_path``) for the rest;
every typed column is then extracted from the map in Arrow (``nsb.columns``).

``build_batch`` is total: nothing in a row's content can make it raise (design section 3). Both
paths refer doubtful rows to the reference decoder (``nsb.headers.decode``); should the build still
fail, the batch is bisected until the rows that fail are isolated and quarantined one by one, with
the error and the raw text (``quarantine``).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.nsb import batch_headers, row_path
from queuelake.nsb import columns as nsb_columns
from queuelake.nsb import headers as hdr
from queuelake.pipeline.journal.quarantine import quarantine_row, with_named_ids
from queuelake.pipeline.journal.schema import MESSAGES_SCHEMA, UTC_TS
from queuelake.pipeline.journal.text import as_array, error_text, raw_expires, safe_text, text_at, to_texts

log = logging.getLogger("queuelake")


def build_batch(
    received: pa.Table, queue: str, batch_id: str, drained_at: dt.datetime, native: bool = True
) -> tuple[pa.Table, dict[str, int]]:
    """The journal rows of one received batch (``queues.RECEIVED_SCHEMA``), and counts per outcome.

    The header text is decoded natively for the bulk of the rows (``nsb.batch_headers``; ``native``
    False turns that off, for the equivalence tests) and with orjson, row by row, for the rest; every
    typed column is extracted from the map in Arrow. Rows neither path can judge go to
    ``nsb.headers.decode``, the reference, which names the reason.

    Never raises because of a row's content: if the vectorised build fails anyway (a bug, or an input
    nobody foresaw), the batch is bisected, every half that builds is kept, and each single row that
    still fails is quarantined with the error and its raw text. Rows keep their order."""
    table, counts = _built(received, queue, batch_id, drained_at, native)
    _say_quarantined(table, counts, queue)
    return table, counts


def _say_quarantined(table: pa.Table, counts: dict[str, int], queue: str) -> None:
    """One line per batch that quarantined rows, naming the first (seq, id, reason): the journal keeps
    every one, but the command said only a count (a review)."""
    if not counts.get("quarantined"):
        return
    rows = table.select(["seq", "id", "error"]).filter(pc.equal(table["outcome"], "quarantined"))
    first = rows.slice(0, 1).to_pylist()[0]
    log.warning(
        "%s: %d row(s) quarantined in a batch, kept raw in the journal (outcome quarantined); the first, seq %s"
        " id %s: %s",
        queue,
        counts["quarantined"],
        first["seq"],
        first["id"],
        first["error"],
    )


def _built(
    received: pa.Table, queue: str, batch_id: str, drained_at: dt.datetime, native: bool
) -> tuple[pa.Table, dict[str, int]]:
    try:
        return _build(received, queue, batch_id, drained_at, native)
    except Exception as exc:
        log.warning(
            "journal: building a batch of %d rows of %s failed (%s); isolating the rows that fail",
            received.num_rows,
            queue,
            error_text(exc),
        )
    tables: list[pa.Table] = []
    counts = {"expired": 0, "quarantined": 0, "landed": 0}
    for table, part in _isolate(received, queue, batch_id, drained_at, native):
        tables.append(table)
        for outcome, count in part.items():
            counts[outcome] += count
    if not tables:
        return MESSAGES_SCHEMA.empty_table(), counts
    table = pa.concat_tables(tables)
    try:
        table = table.combine_chunks()
    except Exception:  # e.g. more than 2 GiB of bodies in one binary array: chunks are fine too
        pass
    return table, counts


def _isolate(received: pa.Table, queue: str, batch_id: str, drained_at: dt.datetime, native: bool):
    """Build each half of a batch whose build failed; recurse into a half that fails, down to
    single rows, which are quarantined. Yields (table, counts) in row order."""
    n = received.num_rows
    if n == 0:
        return
    if n == 1:
        try:
            yield _build(received, queue, batch_id, drained_at, native)
        except Exception as exc:
            yield quarantine_row(received, queue, batch_id, drained_at, exc)
        return
    for part in (received.slice(0, n // 2), received.slice(n // 2)):
        try:
            yield _build(part, queue, batch_id, drained_at, native)
        except Exception:
            yield from _isolate(part, queue, batch_id, drained_at, native)


def _null_rows(headers: pa.MapArray, rows: np.ndarray) -> pa.MapArray:
    """``headers`` with the rows where ``rows`` is True made null (refused rows keep no map)."""
    index = np.arange(len(headers), dtype=np.int64)
    return pc.take(headers, pa.array(index, mask=rows))


def _native_maps(texts: pa.Array, candidates: np.ndarray) -> batch_headers.NativeMaps | None:
    """The native decode of the candidate rows, or None to decode them all row by row. A failure of
    the native path is never a verdict on a row: the reference path below gives that."""
    if len(candidates) == 0:
        return None
    try:
        return batch_headers.parse(texts if len(candidates) == len(texts) else texts.take(pa.array(candidates)))
    except Exception as exc:  # noqa: BLE001 - e.g. invalid UTF-8 in the regex pass
        log.debug("journal: native header decode declined a batch (%s)", error_text(exc, 200))
        return None


def _build(
    received: pa.Table, queue: str, batch_id: str, drained_at: dt.datetime, native: bool = True
) -> tuple[pa.Table, dict[str, int]]:
    """The vectorised build (see ``build_batch``); may raise on inputs it does not foresee.

    Rows go one of two ways: the native decode (``nsb.batch_headers``) for the bulk, and, for the rows
    it leaves (and every row when it declines the batch), orjson row by row with the reference
    decoder's verdict on anything doubtful. Both give a map; the typed columns come from the merged
    map in Arrow."""
    n = received.num_rows
    texts = as_array(received["headers"])
    ids = as_array(received["id"])
    expired = np.asarray(received["expired"].to_numpy(), dtype=bool)
    reasons: dict[int, str] = {}
    raws: dict[int, str | None] = {}

    def raw_of(i: int) -> str | None:
        if i not in raws:
            raws[i] = text_at(texts, i)
        return raws[i]

    candidates = np.flatnonzero(~expired & _valid(texts))
    found = _native_maps(texts, candidates) if native else None
    in_native = np.zeros(n, dtype=bool)
    if found is not None:
        in_native[candidates[~found.referred]] = True

    python_rows = np.flatnonzero(~expired & ~in_native)
    py_texts = to_texts(texts.take(pa.array(python_rows, pa.int64())))
    py_maps: list[dict[str, Any] | None] = []
    for i, raw in zip(python_rows.tolist(), py_texts):
        raws[i] = raw
        data = row_path.parse_fast(raw)
        if data is None:
            reason = row_path.reason(raw, text_at(ids, i))
            if reason is None:  # stricter than the reference: accept what it accepts
                data = hdr.decode_map(raw)
            else:
                reasons[i] = reason
        py_maps.append(data)
    try:
        py_headers = row_path.header_map(py_maps)
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # a non-string value somewhere: find the rows
        for k in row_path.non_string_rows(py_maps):
            i = int(python_rows[k])
            reasons[i] = row_path.reason(raws[i], text_at(ids, i)) or "header values must be strings"
            py_maps[k] = None
        py_headers = row_path.header_map(py_maps)

    # one map column in row order: native rows, then row-by-row ones; expired rows null
    position = np.full(n, -1, dtype=np.int64)
    parts: list[pa.Array] = []
    if found is not None:
        position[candidates] = np.arange(len(candidates))
        parts.append(found.maps)
    position[python_rows] = sum(len(p) for p in parts) + np.arange(len(python_rows))
    parts.append(py_headers)
    by_name = None
    if found is not None and len(python_rows) == 0 and len(candidates) == n:
        headers = found.maps  # every row decoded natively, in order
        by_name = found.columns
    else:
        merged = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
        headers = pc.take(merged, pa.array(position, mask=position < 0))

    bad, typed = nsb_columns.typed_columns(headers, ids, by_name)
    refused = np.zeros(n, dtype=bool)
    while bad:  # typed columns are computed again without the refused rows, until none is left
        if refused[list(bad)].any():
            raise RuntimeError("journal: a row refused once was flagged again")
        for i in bad:
            reasons[i] = reasons.get(i) or row_path.reason(raw_of(i), text_at(ids, i)) or "headers could not be decoded"
        refused[list(bad)] = True
        headers = _null_rows(headers, refused)
        bad, typed = nsb_columns.typed_columns(headers, ids)
    quarantined = np.zeros(n, dtype=bool)
    quarantined[list(reasons)] = True

    counts = {"expired": int(expired.sum()), "quarantined": len(reasons)}
    counts["landed"] = n - counts["expired"] - counts["quarantined"]
    outcome = np.where(expired, 0, 2)
    outcome[quarantined] = 1
    errors: list[str | None] = [None] * n
    raw_headers: list[str | None] = [None] * n
    for i, reason in reasons.items():
        errors[i] = reason
        raw_headers[i] = safe_text(raw_of(i))

    columns: dict[str, Any] = {
        "queue": pa.repeat(pa.scalar(queue, pa.string()), n),
        "seq": received["seq"],
        "id": received["id"],
        "batch_id": pa.repeat(pa.scalar(batch_id, pa.string()), n),
        "drained_at": pa.repeat(pa.scalar(drained_at, UTC_TS), n),  # a list of n datetimes cost 0.6 us a row
        "outcome": pc.take(_OUTCOMES, pa.array(outcome)),
        "error": pa.array(errors, pa.string()),
        "headers": headers,
        "body": received["body"],
        "expires": received["expires"],
        "raw_expires": raw_expires(received),
        "raw_headers": pa.array(raw_headers, pa.string()),
    }
    if counts["expired"]:
        columns["body"] = pc.if_else(received["expired"], pa.scalar(None, pa.binary()), received["body"])
    columns.update(typed)
    if reasons:  # the ids a quarantined row's headers name, for find and where (nothing else is typed)
        with_named_ids(columns, {i: raw_of(i) for i in reasons}, n)
    arrays = [
        pa.array(columns[f.name], f.type)
        if not isinstance(columns[f.name], (pa.Array, pa.ChunkedArray))
        else columns[f.name]
        for f in MESSAGES_SCHEMA
    ]
    table = pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, MESSAGES_SCHEMA)], schema=MESSAGES_SCHEMA)
    return table, counts


_OUTCOMES = pa.array(["expired", "quarantined", "landed"], pa.string())


def _valid(column: pa.Array) -> np.ndarray:
    if column.null_count == 0:
        return np.ones(len(column), dtype=bool)
    return np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), dtype=bool)
