"""The ``messages`` journal: turning a received batch into its rows (the schema is the catalogue's).

The header JSON of a batch is decoded natively by Arrow's JSON reader (``native_headers``, outside
the GIL) for the rows it reads exactly as the reference does, and with orjson row by row for the
rest; every typed column is then extracted from the map in Arrow. The split into landed / expired /
quarantined happens here, so one batch is one Delta commit.

``build_batch`` is total: nothing in a row's content can make it raise (design section 3). Both
paths refer doubtful rows to the reference decoder (``headers.decode``); should the build still
fail, the batch is bisected until the rows that fail are isolated and quarantined one by one, with
the error and the raw text.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.errors import HeaderError
from queuelake.lake import tables
from queuelake.pipeline import native_headers
from queuelake.transport import headers as hdr

log = logging.getLogger("queuelake")

MESSAGES = tables.MESSAGES.name
MESSAGES_SCHEMA: pa.Schema = tables.MESSAGES.schema
UTC_TS = tables.UTC_TS


_STRING_HEADERS = {
    "message_id": hdr.MESSAGE_ID,
    "content_type": hdr.CONTENT_TYPE,
    "conversation_id": hdr.CONVERSATION_ID,
    "correlation_id": hdr.CORRELATION_ID,
    "reply_to_address": hdr.REPLY_TO_ADDRESS,
    "originating_endpoint": hdr.ORIGINATING_ENDPOINT,
    "originating_machine": hdr.ORIGINATING_MACHINE,
    "processing_endpoint": hdr.PROCESSING_ENDPOINT,
    "failed_queue": hdr.FAILED_QUEUE,
    "exception_type": hdr.EXCEPTION_TYPE,
    "exception_message": hdr.EXCEPTION_MESSAGE,
}
_TIME_HEADERS = {
    "time_sent": hdr.TIME_SENT,
    "processing_started": hdr.PROCESSING_STARTED,
    "processing_ended": hdr.PROCESSING_ENDED,
    "time_of_failure": hdr.TIME_OF_FAILURE,
}


_STR_OR_NONE = {str, type(None)}
# The wire form, year 0001 at least: Arrow parses year 0000, Python's datetime (the reference) does not.
_WIRE_TIME = (
    r"^((?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-[0-9]{2}-[0-9]{2}) "
    r"([0-9]{2}:[0-9]{2}:[0-9]{2}):([0-9]{6}) Z$"
)


def _parse_fast(raw: str | None) -> dict[str, Any] | None:
    """The header object, or {} for no headers; None sends the row to the reference decoder, which
    gives the verdict and the reason. Value types and intents are checked later, vectorised."""
    if not raw or raw.isspace():
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return data if type(data) is dict else None


def _non_string_rows(maps: list[dict[str, Any] | None]) -> list[int]:
    return [i for i, m in enumerate(maps) if m and not set(map(type, m.values())) <= _STR_OR_NONE]


def _reason(raw: str | None, row_id: str | None) -> str | None:
    """Why ``headers.decode`` refuses this row, or None when it accepts it."""
    try:
        hdr.decode(raw, row_id)
    except HeaderError as exc:
        return str(exc)
    return None


def _texts(column: pa.Array | pa.ChunkedArray) -> list[str | None]:
    """A string column as Python text. Invalid UTF-8 (a driver handing over CESU-8 or WTF-8 for an
    nvarchar holding a lone surrogate, a SQL_ASCII database) is kept with its bytes surrogate-escaped,
    as ``queues._text`` does; the reference decoder then refuses it and ``_safe_text`` shows it."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        raw = column.cast(pa.binary()).to_pylist()
        return [None if b is None else b.decode("utf-8", errors="surrogateescape") for b in raw]


_DECODED = [*_STRING_HEADERS, "message_intent", "enclosed_message_types", "message_type", *_TIME_HEADERS]


def _type_name(first: str) -> str:
    return hdr.full_type_name(first) if ("[" in first or "\\" in first) else first.split(",", 1)[0].strip()


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


def _lookup(headers: pa.MapArray, names: list[str]) -> dict[str, pa.Array]:
    """Several headers as columns, straight from the map column's flattened entries (the map is
    built here, from offset 0, null rows without entries): one
    ``index_in`` over all keys, then a scatter per header. No Python object per row (the per-row
    dict comprehension it replaces was a third of the build's time)."""
    n = len(headers)
    which = pc.index_in(headers.keys, value_set=pa.array(names, pa.string()))
    which_np = which.fill_null(-1).to_numpy(zero_copy_only=False)
    # the row of each entry (pc.list_parent_indices aborts on a MapArray in pyarrow 26)
    offsets = headers.offsets.to_numpy(zero_copy_only=False)
    parents = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    out: dict[str, pa.Array] = {}
    for j, name in enumerate(names):
        entries = np.flatnonzero(which_np == j)
        pos = np.full(n, -1, dtype=np.int64)
        pos[parents[entries]] = entries  # keys are unique within a row (they come from dicts)
        out[name] = pc.take(headers.items, pa.array(pos, mask=pos < 0)).cast(pa.string())
    return out


def _blank_to_null(arr: pa.Array) -> pa.Array:
    return pc.if_else(pc.equal(arr, ""), pa.scalar(None, pa.string()), arr)


def _header_map(maps: list[dict[str, Any] | None]) -> pa.MapArray:
    """The ``headers`` column. Raises pa.ArrowTypeError/ArrowInvalid when a value is not a string."""
    offsets = [0]
    keys: list[str] = []
    values: list[str | None] = []
    for m in maps:
        if m:
            keys.extend(m.keys())
            values.extend(m.values())
        offsets.append(len(keys))
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.array(keys, pa.string()),
        pa.array(values, pa.string()),
        mask=pa.array([m is None for m in maps], pa.bool_()),
    )


_LOOKED_UP = [
    *_STRING_HEADERS.values(),
    hdr.MESSAGE_INTENT,
    *_TIME_HEADERS.values(),
    hdr.ENCLOSED_MESSAGE_TYPES,
]


def _typed_columns(
    headers: pa.MapArray, ids: pa.Array, by_name: Mapping[str, pa.Array] | None = None
) -> tuple[set[int], dict[str, Any]]:
    """Every decoded column, and the rows whose intent or times the reference decoder would refuse.
    ``by_name``: the headers already as columns (the native decode of a whole batch), which saves
    the lookup in the map."""
    if by_name is None:
        found = _lookup(headers, _LOOKED_UP)
    else:
        absent = pa.nulls(len(headers), pa.string())
        found = {key: by_name[key] if key in by_name else absent for key in _LOOKED_UP}
    columns: dict[str, Any] = {name: found[key] for name, key in _STRING_HEADERS.items()}
    columns["message_intent"], unknown = _intents(found[hdr.MESSAGE_INTENT])
    bad = set(unknown)
    for name, key in _TIME_HEADERS.items():
        columns[name], unparsable = _times(found[key])
        bad.update(unparsable)
    present = pc.is_valid(headers)
    message_id = pc.coalesce(_blank_to_null(columns["message_id"]), ids)
    columns["message_id"] = pc.if_else(present, message_id, pa.scalar(None, pa.string()))
    columns["enclosed_message_types"], columns["message_type"] = _enclosed_types(found[hdr.ENCLOSED_MESSAGE_TYPES])
    return bad, columns


_CANONICAL_INTENTS = pa.array(list(hdr.INTENTS.values()), pa.string())
_NULL_STRING = pa.scalar(None, pa.string())


def _intents(values: pa.Array) -> tuple[pa.Array, list[int]]:
    """MessageIntent in canonical case, and the rows whose intent the reference refuses. The exact
    canonical names are looked up in Arrow; any other spelling goes to the codec row by row (Arrow's
    case mapping differs from Python's for some letters, e.g. U+0130)."""
    index = pc.index_in(values, value_set=_CANONICAL_INTENTS)
    intent = pc.take(_CANONICAL_INTENTS, index)
    odd = pc.and_(pc.is_valid(values), pc.is_null(index))
    if not pc.any(odd).as_py():
        return intent, []
    out = intent.to_pylist()
    raw = values.to_pylist()
    bad = []
    for i in pc.indices_nonzero(odd).to_pylist():
        try:
            out[i] = hdr.normalize_intent(raw[i])
        except HeaderError:
            bad.append(i)
    return pa.array(out, pa.string()), bad


def _times(values: pa.Array) -> tuple[pa.Array, list[int]]:
    """Wire-form times to timestamp[us, UTC] in one vectorised pass, and the indexes of the rows the
    reference refuses (wrong shape, or right shape but impossible, e.g. 2024-02-30); those are null."""
    if values.null_count == len(values):  # a header the batch does not carry (most of the four)
        return pa.nulls(len(values), UTC_TS), []
    arr = _blank_to_null(values)
    wrong = pc.invert(pc.match_substring_regex(arr, _WIRE_TIME))  # null (absent) stays null
    bad: list[int] = []
    if pc.any(wrong).as_py():
        bad = pc.indices_nonzero(wrong).to_pylist()
        arr = pc.if_else(wrong, _NULL_STRING, arr)
    try:
        return _cast_times(arr), bad
    except pa.ArrowInvalid:  # right shape, impossible date: find the rows one by one
        impossible = []
        for i, v in enumerate(arr.to_pylist()):
            try:
                if v is not None:
                    hdr.parse_time(v)
            except HeaderError:
                impossible.append(i)
        refused = set(impossible)
        mask = pa.array([i in refused for i in range(len(arr))], pa.bool_())
        return _cast_times(pc.if_else(mask, _NULL_STRING, arr)), sorted(bad + impossible)


def _cast_times(arr: pa.Array) -> pa.Array:
    """Texts of the wire shape (``_WIRE_TIME``; anything else null) to timestamps: the fixed width
    makes two slices enough (``2024-05-01 13:45:10:123456 Z`` to ``2024-05-01 13:45:10.123456``),
    2.5x cheaper than a regex rewrite. Raises ArrowInvalid on an impossible date (2024-02-30)."""
    iso = pc.utf8_replace_slice(pc.utf8_slice_codeunits(arr, 0, 26), 19, 20, ".")
    return pc.cast(pc.cast(iso, pa.timestamp("us")), UTC_TS)


# characters Python's str.strip() removes but Arrow's utf8_trim_whitespace may not
_EXOTIC_SPACE = (
    r"[\t\n\x0b\x0c\r\x1c-\x1f\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]"
)
_NEEDS_PYTHON = r"(^ | ;|; | $|;;|^;|;$|^$|\[|\\|" + _EXOTIC_SPACE + ")"


def _enclosed_types(values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """EnclosedMessageTypes as a list, and the first type's full name. A queue carries a handful of
    message types, so the work is done once per distinct value and spread back to the rows: 1.2-1.7
    ms per 10,000 rows, against 6.6-8.4 when done per row (12-15 when odd values among them sent
    every row through the codec)."""
    encoded = pc.dictionary_encode(values)
    types, names = _split_enclosed_types(encoded.dictionary)
    return pc.take(types, encoded.indices), pc.take(names, encoded.indices)


def _split_enclosed_types(values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The common shape (no stray spaces or empty parts, no generics) is split in Arrow; the rest
    value by value with the codec."""
    types = pc.split_pattern(values, ";")
    first = pc.list_element(types, 0)
    names = pc.utf8_trim_whitespace(pc.list_element(pc.split_pattern(first, ",", max_splits=1), 0))
    odd = pc.match_substring_regex(values, _NEEDS_PYTHON).to_pylist()
    if not any(odd):
        return types, names
    py_types = types.to_pylist()
    py_names = names.to_pylist()
    raw = values.to_pylist()
    for i, flag in enumerate(odd):
        if flag:
            py_types[i] = hdr.split_types(raw[i])
            py_names[i] = hdr.full_type_name(py_types[i][0]) if py_types[i] else None
    return pa.array(py_types, pa.list_(pa.string())), pa.array(py_names, pa.string())


def build_batch(
    received: pa.Table, queue: str, batch_id: str, drained_at: dt.datetime, native: bool = True
) -> tuple[pa.Table, dict[str, int]]:
    """The journal rows of one received batch (``queues.RECEIVED_SCHEMA``), and counts per outcome.

    The header text is decoded natively for the bulk of the rows (``native_headers``; ``native``
    False turns that off, for the equivalence tests) and with orjson, row by row, for the rest; every
    typed column is extracted from the map in Arrow. Rows neither path can judge go to
    ``headers.decode``, the reference, which names the reason.

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
        reason = _reason(raw, row_id) if stage == "built" else None
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


def _native_maps(texts: pa.Array, candidates: np.ndarray) -> native_headers.NativeMaps | None:
    """The native decode of the candidate rows, or None to decode them all row by row. A failure of
    the native path is never a verdict on a row: the reference path below gives that."""
    if len(candidates) == 0:
        return None
    try:
        return native_headers.parse(texts if len(candidates) == len(texts) else texts.take(pa.array(candidates)))
    except Exception as exc:  # noqa: BLE001 - e.g. invalid UTF-8 in the regex pass
        log.debug("journal: native header decode declined a batch (%s)", _error_text(exc, 200))
        return None


def _build(
    received: pa.Table, queue: str, batch_id: str, drained_at: dt.datetime, native: bool = True
) -> tuple[pa.Table, dict[str, int]]:
    """The vectorised build (see ``build_batch``); may raise on inputs it does not foresee.

    Rows go one of two ways: the native decode (``native_headers``) for the bulk, and, for the rows
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
        data = _parse_fast(raw)
        if data is None:
            reason = _reason(raw, _text_at(ids, i))
            if reason is None:  # stricter than the reference: accept what it accepts
                data = hdr.decode_map(raw)
            else:
                reasons[i] = reason
        py_maps.append(data)
    try:
        py_headers = _header_map(py_maps)
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # a non-string value somewhere: find the rows
        for k in _non_string_rows(py_maps):
            i = int(python_rows[k])
            reasons[i] = _reason(raws[i], _text_at(ids, i)) or "header values must be strings"
            py_maps[k] = None
        py_headers = _header_map(py_maps)

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

    bad, typed = _typed_columns(headers, ids, by_name)
    refused = np.zeros(n, dtype=bool)
    while bad:  # typed columns are computed again without the refused rows, until none is left
        if refused[list(bad)].any():
            raise RuntimeError("journal: a row refused once was flagged again")
        for i in bad:
            reasons[i] = reasons.get(i) or _reason(raw_of(i), _text_at(ids, i)) or "headers could not be decoded"
        refused[list(bad)] = True
        headers = _null_rows(headers, refused)
        bad, typed = _typed_columns(headers, ids)
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
