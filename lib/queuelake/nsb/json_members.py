"""Header maps written back as JSON in bulk: each row's chosen entries as the members of a JSON object
(``"name":"value","name":null``), built by Arrow's string kernels over the whole batch.

Why: a replay sends every selected message's headers again, ~20 entries each. Turning each entry into
two Python strings, a dict per row and ``orjson.dumps`` of it cost ~18 us a row, the largest step of a
replay (1.85 s of a 100,000-row retry, 23.6 s of a million). Here the entries are joined by Arrow;
each distinct name is written as JSON once, and Python touches only the few values JSON must escape
(a stack trace's newlines, a quote), escaped by ``orjson`` itself, so the text is what
``orjson.dumps`` of the dict writes.

A row in which a kept name appears twice is reported instead of joined (``repeated``): JSON readers
disagree on a repeated member, and the caller writes such a row through a dict (the last one wins).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.nsb.string_bytes import offsets_and_data, rows_holding

# bytes JSON must escape in a string: the quote, the backslash and the control characters
_QUOTE, _BACKSLASH, _SPACE = 0x22, 0x5C, 0x20


@dataclass(frozen=True)
class Members:
    text: pa.StringArray  # per row: its kept entries as JSON members joined by ",", "" for none
    repeated: np.ndarray  # bool per row: a kept name appears twice (``text`` is not to be used)


def members(values: pa.Array, codes: np.ndarray, names: list[str], counts: np.ndarray, keep: np.ndarray) -> Members:
    """Each row's entries where ``keep`` is set, in the row's own order, as JSON members. The entries
    are given flattened: ``values``, and each entry's name as ``codes`` into ``names`` (a batch has
    a few dozen distinct names: each is written as JSON once); ``counts``: entries per row."""
    n = len(counts)
    kept_row = np.repeat(np.arange(n, dtype=np.int64), counts)[keep]
    kept_codes = codes[keep]
    kept_values = values.filter(pa.array(keep, pa.bool_()))
    kept_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(kept_row, minlength=n), out=kept_offsets[1:])
    prefixes = pa.array([orjson.dumps(name).decode() + ":" for name in names], pa.string()).take(pa.array(kept_codes))
    member = pc.binary_join_element_wise(prefixes, '"', kept_values, '"', "")
    if kept_values.null_count:
        member = pc.if_else(pc.is_null(kept_values), pc.binary_join_element_wise(prefixes, "null", ""), member)
    escaped = _needs_escape(kept_values)
    if escaped.any():  # orjson's own escapes for these few
        mask = pa.array(escaped)
        texts = zip(prefixes.filter(mask).to_pylist(), kept_values.filter(mask).to_pylist(), strict=True)
        member = pc.replace_with_mask(member, mask, pa.array([p + orjson.dumps(v).decode() for p, v in texts]))
    text = pc.binary_join(pa.ListArray.from_arrays(pa.array(kept_offsets), member), ",")
    return Members(text, _rows_repeating_a_name(kept_codes, kept_row, len(names), n))


def strings(values: pa.Array) -> pa.Array:
    """Each value as a JSON string, quoted and escaped as ``orjson.dumps`` writes it (null stays
    null): Arrow adds the quotes, ``orjson`` escapes the few that need it."""
    quoted = pc.binary_join_element_wise('"', values, '"', "")
    escaped = _needs_escape(values)
    if escaped.any():
        mask = pa.array(escaped)
        texts = [orjson.dumps(v).decode() for v in values.filter(mask).to_pylist()]
        quoted = pc.replace_with_mask(quoted, mask, pa.array(texts, pa.string()))
    return quoted


def _needs_escape(strings: pa.Array, block: int = 1 << 18) -> np.ndarray:
    """True for each string holding a quote, a backslash or a control character. The text is
    scanned a block at a time: each check's temporary then stays in the cache."""
    n = len(strings)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    offsets, data = offsets_and_data(strings)
    hits = []
    for lo in range(int(offsets[0]), int(offsets[-1]), block):
        chunk = data[lo : min(lo + block, int(offsets[-1]))]
        found = np.flatnonzero((chunk < _SPACE) | (chunk == _QUOTE) | (chunk == _BACKSLASH))
        if len(found):
            hits.append(found + lo)
    if hits:
        out[rows_holding(offsets, np.concatenate(hits))] = True
    return out


def _rows_repeating_a_name(codes: np.ndarray, row: np.ndarray, distinct: int, n: int) -> np.ndarray:
    """True for each row in which a name appears twice (``codes``: the names, ``row``: their rows)."""
    repeated = np.zeros(n, dtype=bool)
    if not len(codes):
        return repeated
    cell = row * distinct + codes
    if n * distinct <= 1 << 21:  # a count per (row, name) cell: 16 MiB at most
        twice = np.flatnonzero(np.bincount(cell, minlength=n * distinct) > 1)
    else:
        ordered = np.sort(cell)
        twice = ordered[1:][ordered[1:] == ordered[:-1]]
    repeated[np.unique(twice // distinct)] = True
    return repeated
