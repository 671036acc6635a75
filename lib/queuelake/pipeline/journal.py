"""The ``messages`` journal: turning a received batch into its rows (the schema is the catalogue's).

The header JSON of a batch is decoded natively (``nsb.native``, outside the GIL) for the rows it
reads exactly as the reference does, and with orjson row by row (``nsb.row_path``) for the rest;
every typed column is then extracted from the map in Arrow (``nsb.columns``). The split into landed /
expired / quarantined happens here, so one batch is one Delta commit.

``build_batch`` is total: nothing in a row's content can make it raise (design section 3). Both
paths refer doubtful rows to the reference decoder (``nsb.headers.decode``); should the build still
fail, the batch is bisected until the rows that fail are isolated and quarantined one by one, with
the error and the raw text.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.lake import tables
from queuelake.nsb import columns as nsb_columns
from queuelake.nsb import headers as hdr
from queuelake.nsb import native as nsb_native
from queuelake.nsb import row_path

log = logging.getLogger("queuelake")

MESSAGES = tables.MESSAGES.name
MESSAGES_SCHEMA: pa.Schema = tables.MESSAGES.schema
UTC_TS = tables.UTC_TS


def _texts(column: pa.Array | pa.ChunkedArray) -> list[str | None]:
    """A string column as Python text. Invalid UTF-8 (a driver handing over CESU-8 or WTF-8 for an
    nvarchar holding a lone surrogate, a SQL_ASCII database) is kept with its bytes surrogate-escaped,
    as ``queues._text`` does; the reference decoder then refuses it and ``_safe_text`` shows it."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        raw = column.cast(pa.binary()).to_pylist()
        return [None if b is None else b.decode("utf-8", errors="surrogateescape") for b in raw]


def _safe_text(raw: str | None) -> str | None:
    """Raw header text as valid UTF-8 for the quarantine column; undecodable bytes escaped (``\\xff``),
    and lone surrogates that are not escaped bytes (UTF-16 text from nvarchar) as ``\\ud800``."""
    if raw is None:
        return None
    try:
        return raw.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="backslashreplace")
    except UnicodeEncodeError:
        return "".join(_escape_surrogate(c) if "\ud800" <= c <= "\udfff" else c for c in raw)


def _escape_surrogate(c: str) -> str:
    code = ord(c)
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def build_batch(
    received: pa.Table, queue: str, batch_id: str, drained_at: dt.datetime, native: bool = True
) -> tuple[pa.Table, dict[str, int]]:
    """The journal rows of one received batch (``queues.RECEIVED_SCHEMA``), and counts per outcome.

    The header text is decoded natively for the bulk of the rows (``nsb.native``; ``native``
    False turns that off, for the equivalence tests) and with orjson, row by row, for the rest; every
    typed column is extracted from the map in Arrow. Rows neither path can judge go to
    ``nsb.headers.decode``, the reference, which names the reason.

    Never raises because of a row's content: if the vectorised build fails anyway (a bug, or an input
    nobody foresaw), the batch is bisected, every half that builds is kept, and each single row that
    still fails is quarantined with the error and its raw text. Rows keep their order."""
    try:
        return _build(received, queue, batch_id, drained_at, native)
    except Exception as exc:
        log.warning(
            "journal: building a batch of %d rows of %s failed (%s); isolating the rows that fail",
            received.num_rows,
            queue,
            _error_text(exc),
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


def _error_text(exc: BaseException, limit: int = 1000) -> str:
    """``Type: message``, cut to ``limit`` characters (Arrow quotes the offending value), as valid text."""
    text = f"{type(exc).__name__}: {exc}"
    if len(text) > limit:
        text = text[:limit] + f"... ({len(text) - limit} more characters)"
    return _safe_text(text) or type(exc).__name__


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
            yield _quarantine_row(received, queue, batch_id, drained_at, exc)
        return
    for part in (received.slice(0, n // 2), received.slice(n // 2)):
        try:
            yield _build(part, queue, batch_id, drained_at, native)
        except Exception:
            yield from _isolate(part, queue, batch_id, drained_at, native)


def _quarantine_row(
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
    (raw,) = _texts(received["headers"])
    (row_id,) = _texts(received["id"])
    try:
        reason = row_path.reason(raw, row_id) if stage == "built" else None
    except Exception:  # the reference failing too: the original error says more
        reason = None
    if not reason:
        reason = f"journal could not be {stage} for this row: {_error_text(exc)}"
    expires, raw_expires = received["expires"], _raw_expires(received)
    if stage != "built":
        raw_expires = pc.coalesce(raw_expires, _timestamp_text(expires))
        expires = pa.nulls(1, UTC_TS)
    columns: dict[str, Any] = {
        "queue": pa.array([queue], pa.string()),
        "seq": received["seq"],
        "id": received["id"],
        "batch_id": pa.array([batch_id], pa.string()),
        "drained_at": pa.array([drained_at], UTC_TS),
        "outcome": pa.array(["quarantined"], pa.string()),
        "error": pa.array([_safe_text(reason)], pa.string()),
        "body": received["body"],
        "expires": expires,
        "raw_expires": raw_expires,
        "raw_headers": pa.array([_safe_text(raw)], pa.string()),
    }
    arrays = [columns[f.name].cast(f.type) if f.name in columns else pa.nulls(1, f.type) for f in MESSAGES_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=MESSAGES_SCHEMA), {"expired": 0, "quarantined": 1, "landed": 0}


def _timestamp_text(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Timestamps as ISO text in Arrow (any int64 instant, where Python's datetime stops at 9999)."""
    try:
        return pc.cast(_column(values).cast(pa.timestamp("us")), pa.string())
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
        _error_text(error, 300),
    )
    parts: list[pa.Table] = []
    start = 0
    for i, exc in bad:
        if i > start:
            parts.append(table.slice(start, i - start))
        row, _ = _quarantine_row(received.slice(i, 1), queue, batch_id, drained_at, exc, stage="stored")
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
        log.debug("journal: a part failed only whole (%s)", _error_text(failure, 200))
    return found


def _column(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):  # combine_chunks copies even a single chunk
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _text_at(column: pa.Array, i: int) -> str | None:
    (text,) = _texts(column.slice(i, 1))
    return text


def _null_rows(headers: pa.MapArray, rows: np.ndarray) -> pa.MapArray:
    """``headers`` with the rows where ``rows`` is True made null (refused rows keep no map)."""
    index = np.arange(len(headers), dtype=np.int64)
    return pc.take(headers, pa.array(index, mask=rows))


def _native_maps(texts: pa.Array, candidates: np.ndarray) -> nsb_native.NativeMaps | None:
    """The native decode of the candidate rows, or None to decode them all row by row. A failure of
    the native path is never a verdict on a row: the reference path below gives that."""
    if len(candidates) == 0:
        return None
    try:
        return nsb_native.parse(texts if len(candidates) == len(texts) else texts.take(pa.array(candidates)))
    except Exception as exc:  # noqa: BLE001 - e.g. invalid UTF-8 in the regex pass
        log.debug("journal: native header decode declined a batch (%s)", _error_text(exc, 200))
        return None


def _build(
    received: pa.Table, queue: str, batch_id: str, drained_at: dt.datetime, native: bool = True
) -> tuple[pa.Table, dict[str, int]]:
    """The vectorised build (see ``build_batch``); may raise on inputs it does not foresee.

    Rows go one of two ways: the native decode (``nsb.native``) for the bulk, and, for the rows
    it leaves (and every row when it declines the batch), orjson row by row with the reference
    decoder's verdict on anything doubtful. Both give a map; the typed columns come from the merged
    map in Arrow."""
    n = received.num_rows
    texts = _column(received["headers"])
    ids = _column(received["id"])
    expired = np.asarray(received["expired"].to_numpy(), dtype=bool)
    reasons: dict[int, str] = {}
    raws: dict[int, str | None] = {}

    def raw_of(i: int) -> str | None:
        if i not in raws:
            raws[i] = _text_at(texts, i)
        return raws[i]

    candidates = np.flatnonzero(~expired & _valid(texts))
    found = _native_maps(texts, candidates) if native else None
    in_native = np.zeros(n, dtype=bool)
    if found is not None:
        in_native[candidates[~found.referred]] = True

    python_rows = np.flatnonzero(~expired & ~in_native)
    py_texts = _texts(texts.take(pa.array(python_rows, pa.int64())))
    py_maps: list[dict[str, Any] | None] = []
    for i, raw in zip(python_rows.tolist(), py_texts):
        raws[i] = raw
        data = row_path.parse_fast(raw)
        if data is None:
            reason = row_path.reason(raw, _text_at(ids, i))
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
            reasons[i] = row_path.reason(raws[i], _text_at(ids, i)) or "header values must be strings"
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
            reasons[i] = (
                reasons.get(i) or row_path.reason(raw_of(i), _text_at(ids, i)) or "headers could not be decoded"
            )
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
        raw_headers[i] = _safe_text(raw_of(i))

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
        "raw_expires": _raw_expires(received),
        "raw_headers": pa.array(raw_headers, pa.string()),
    }
    if counts["expired"]:
        columns["body"] = pc.if_else(received["expired"], pa.scalar(None, pa.binary()), received["body"])
    columns.update(typed)
    arrays = [
        pa.array(columns[f.name], f.type)
        if not isinstance(columns[f.name], (pa.Array, pa.ChunkedArray))
        else columns[f.name]
        for f in MESSAGES_SCHEMA
    ]
    table = pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, MESSAGES_SCHEMA)], schema=MESSAGES_SCHEMA)
    return table, counts


_OUTCOMES = pa.array(["expired", "quarantined", "landed"], pa.string())


def _raw_expires(received: pa.Table) -> pa.Array | pa.ChunkedArray:
    """The original text of a clamped Expires (``queues.ReceivedRow.raw_expires``); all null for a
    batch received without the column (tests and benches that build batches by hand)."""
    if "raw_expires" in received.column_names:
        return received["raw_expires"]
    return pa.nulls(received.num_rows, pa.string())


def _valid(column: pa.Array) -> np.ndarray:
    if column.null_count == 0:
        return np.ones(len(column), dtype=bool)
    return np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), dtype=bool)
