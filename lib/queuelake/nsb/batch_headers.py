"""Header JSON of a whole batch to a map column in native code, GIL released.

Why: decoding headers row by row with orjson was the drain's largest client cost, and it held the
GIL, so two drain workers queued for it while the database waited. Two native paths now take the
rows, and whatever neither takes is left to the caller's row-by-row path, which gives the verdict:
1. rows in NServiceBus's compact form without escapes (nearly all of a business queue's) are
   decoded from their quotes' positions (``plain``): ~12 ms per 10,000 rows;
2. the rest go through Arrow's JSON reader (~26 ms per 10,000 for a whole batch), which parses them
   as newline-delimited JSON; the map column is then assembled from the inferred struct.

The reader is not the reference (``headers.decode``) and differs from it in places, so
it only takes rows it is known to read the same way:
- refused up front, by Arrow kernels (RE2 per row for the patterns): rows not shaped ``{...}``, a
  ``null`` value (a struct cannot tell null from absent), an escaped surrogate (the reader and
  the reference judge lone ones differently), or a raw control byte (a line break or a TAB, e.g. from
  a program that pretty-prints its headers: one such row made the whole batch go row by row, 3x
  slower);
- refused after the read: rows holding a value of any type but string (numbers, booleans, objects,
  arrays, and strings the reader chose to read as timestamps);
- all the rows it was given are left to the caller when the reader fails (duplicate keys, invalid
  JSON, a key that is a string in one row and a number in another), when it yields a different
  number of rows (two objects on one line), or when they hold too many distinct keys for the dense
  key matrix to be cheap. The plain rows stay decoded.
The whole batch is left to the caller when its text is not valid UTF-8.
Entries of plain rows keep the row's own order; the reader's come in the order of the batch's first
sight of each key. A map's order carries no meaning for NServiceBus, which reads headers into a
dictionary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from queuelake.nsb import compact_headers as plain_form
from queuelake.nsb.string_bytes import offsets_and_data, rows_holding

HEADER_MAP = pa.map_(pa.string(), pa.string())
MAX_DISTINCT_KEYS = 512  # the key matrix is rows x keys booleans
# a null value: the colon, JSON whitespace, null (also matches inside a string: that row is only referred)
_NULL_VALUE = r":[ \t\r\n]*null"
_SURROGATE_ESCAPE = r"\\u[dD][89abAB]"


@dataclass(frozen=True)
class NativeMaps:
    maps: pa.MapArray  # one entry per input row; null where ``referred``
    referred: np.ndarray  # bool per input row: the caller decodes these rows itself
    # each header as a column (null where a row lacks it), when every row was read natively: the
    # caller's typed columns come from these instead of a lookup in the map
    columns: Mapping[str, pa.Array] | None = None


def parse(texts: pa.Array) -> NativeMaps | None:
    """Decode non-null header texts (a string array without nulls) into a map column; None when the
    whole batch should take the row-by-row path (its text is not valid UTF-8).

    Rows in NServiceBus's own compact form go through ``plain`` (their quotes' positions
    are enough); the rest through Arrow's JSON reader, after the up-front checks. A reader that
    fails on them refers those rows, not the batch, to the caller."""
    n = len(texts)
    try:
        texts.validate(full=True)  # the reader passes invalid UTF-8 in strings through unchecked
    except pa.ArrowInvalid:
        return None
    shaped = pc.and_(pc.starts_with(texts, "{"), pc.ends_with(texts, "}"))
    referred = ~_bools(shaped)
    referred |= _control_byte_rows(texts)
    plain = plain_form.decode(texts, ~referred)
    if plain.taken.all():
        return NativeMaps(plain.maps, ~plain.taken, plain.columns)
    referred |= plain.taken  # from here on: the rows left to the reader, or to the caller
    rest = np.flatnonzero(~referred)
    if len(rest):
        # RE2 per row (Arrow) scans ~3x faster than one Python ``re`` pass over the rows' bytes
        left = texts if len(rest) == n else texts.take(pa.array(rest))
        for pattern in (_NULL_VALUE, _SURROGATE_ESCAPE):
            referred[rest] |= _bools(pc.match_substring_regex(left, pattern), null_as=False)
    take = np.flatnonzero(~referred)
    parsed = None
    if len(take):  # no copy when the reader gets the whole batch (a queue of escaped headers)
        parsed = _read(texts if len(take) == n else texts.take(pa.array(take)))
    if parsed is not None and len(take) == n and not parsed[1].any():  # the reader read every row
        return NativeMaps(parsed[0], np.zeros(n, dtype=bool), parsed[2])
    position = np.full(n, -1, dtype=np.int64)
    position[plain.taken] = np.flatnonzero(plain.taken)
    parts = [plain.maps]
    if parsed is not None:
        maps, non_string, _ = parsed
        read = take[~non_string]
        position[read] = n + np.flatnonzero(~non_string)
        parts.append(maps)
    merged = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
    return NativeMaps(pc.take(merged, pa.array(position, mask=position < 0)), position < 0)


def _control_byte_rows(texts: pa.Array) -> np.ndarray:
    """Rows holding a raw control byte (below 0x20: CR, LF, TAB and the rest). Outside a string it is
    whitespace, a line break that the reader takes for the end of a row; inside one it is invalid
    JSON, which fails the reader for the whole batch. Either way the batch went row by row for one
    such row. A numpy pass over the batch's bytes (a control byte is never part of a multi-byte
    UTF-8 sequence), where Arrow's substring kernels took ~30 ms per 10,000 typical rows: first their
    minimum, 0.3 ms and no memory; only a batch holding a control byte pays for the comparison, whose
    batch-sized temporary cost 1 ms and, inside the drain, fresh pages (8% of its page faults)."""
    n = len(texts)
    rows = np.zeros(n, dtype=bool)
    if n == 0:
        return rows
    offsets, whole = offsets_and_data(texts)
    data = whole[offsets[0] : offsets[-1]]
    if len(data) == 0 or data.min() >= 0x20:
        return rows
    hits = np.flatnonzero(data < 0x20)
    if len(hits):
        rows[rows_holding(offsets, hits + offsets[0])] = True
    return rows


def _bools(arr: pa.Array, null_as: bool = True) -> np.ndarray:
    return np.asarray(arr.fill_null(null_as).to_numpy(zero_copy_only=False), dtype=bool).copy()


def _read(texts: pa.Array) -> tuple[pa.MapArray, np.ndarray, dict[str, pa.Array]] | None:
    """The map column of ``texts`` (each one JSON object on one line), which rows hold a value
    that is not a string, and the string-valued headers as columns."""
    n = len(texts)
    lines = pc.binary_join_element_wise(texts, pa.scalar("", pa.string()), "\n")  # each text + "\n"
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
    start, end = int(offsets[lines.offset]), int(offsets[lines.offset + n])
    data = lines.buffers()[2].slice(start, end - start)
    try:
        table = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(data) // 2 + 1)),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if table.num_rows != n or table.num_columns > MAX_DISTINCT_KEYS:
        return None
    names: list[str] = []
    values: list[pa.Array] = []
    present: list[np.ndarray] = []
    non_string = np.zeros(n, dtype=bool)
    for name, column in zip(table.column_names, table.columns):
        column = column.combine_chunks()
        valid = _bools(pc.is_valid(column)) if column.null_count else np.ones(n, dtype=bool)
        if pa.types.is_null(column.type):
            return None  # a null value the up-front regex missed: let the reference read the batch
        if not pa.types.is_string(column.type):
            non_string |= valid
            continue
        names.append(name)
        values.append(column)
        present.append(valid)
    if not names:
        no_entries = pa.array(np.zeros(n + 1, dtype=np.int32))
        empty = pa.MapArray.from_arrays(no_entries, pa.array([], pa.string()), pa.array([], pa.string()))
        return empty, non_string, {}
    matrix = np.column_stack(present)
    matrix[non_string] = False
    rows, fields = np.nonzero(matrix)  # row-major: each row's entries together, rows in order
    offsets_out = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(matrix.sum(axis=1), out=offsets_out[1:])
    keys = pc.take(pa.array(names, pa.string()), pa.array(fields))
    items = pc.take(pa.concat_arrays(values), pa.array(fields.astype(np.int64) * n + rows))
    maps = pa.MapArray.from_arrays(pa.array(offsets_out), keys, items)
    return maps, non_string, dict(zip(names, values))
