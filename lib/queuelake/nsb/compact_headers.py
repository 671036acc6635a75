"""Header JSON in its plain form, decoded from the positions of its quotes: no JSON parser at all.

Why: NServiceBus writes its headers compactly, ``{"key":"value","key":"value"}``, and most rows hold
no backslash. In such a row every ``"`` delimits a string, so the quotes' positions alone give every
key and value, and the bytes between them are the text itself (no escape to undo). One numpy scan
for quotes and a few vectorised checks replace Arrow's JSON reader for those rows: ~12 ms per
10,000 typical rows against ~26 for the reader and the map's assembly from its struct.

A row is taken only when it is exactly that form, so that it reads the same as the reference
(``headers.decode``) would:
- ``{}``, or ``{"`` then pairs ``"k":"v"`` joined by ``","`` then ``"}``: no whitespace between
  tokens, no other value type (a number, ``null``, ``true``, an object would show as something else
  between two quotes);
- no backslash anywhere in the row (an escape would change the text, and ``\\"`` hides a quote);
- no key twice in the row (the reference keeps the last one; such rows are left to it).
The caller guarantees valid UTF-8 and no control byte (``native`` checks both first). Every
other row is left to the caller, which reads it as before. Entries keep each row's own order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_QUOTE, _BACKSLASH, _COLON, _COMMA = 0x22, 0x5C, 0x3A, 0x2C
# rows x distinct keys up to which the duplicate check counts cells (an int64 each: 16 MiB at most);
# beyond it (a batch of garbage with many distinct keys) it sorts the cells instead
_BINCOUNT_LIMIT = 1 << 21
_POSITIONS_LIMIT = 1 << 20  # rows x distinct keys, for one position matrix of the header columns


@dataclass(frozen=True)
class PlainMaps:
    taken: np.ndarray  # bool per row: decoded here
    maps: pa.MapArray  # one entry per row; null where not taken
    columns: Mapping[str, pa.Array]  # each header as a column over all rows (null where absent or not taken)


def decode(texts: pa.Array, eligible: np.ndarray) -> PlainMaps:
    """The rows of ``texts`` (a string array without nulls, valid UTF-8, no control byte, each
    ``{...}``) that are in the plain form, among the ``eligible`` ones, as maps."""
    n = len(texts)
    _, offset_buffer, data_buffer = texts.buffers()
    # int32 like the quotes' positions: a search between two dtypes converts the longer array first
    offsets = np.frombuffer(offset_buffer, dtype=np.int32)[texts.offset : texts.offset + n + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    quotes, slashes = _scan(data, int(offsets[0]) if n else 0, int(offsets[-1]) if n else 0)
    taken = eligible.copy()
    taken[np.searchsorted(offsets, slashes, side="right") - 1] = False
    first = np.searchsorted(quotes, offsets)  # index of each row's first quote; n + 1 entries
    counts = np.diff(first)
    taken &= (counts % 4 == 0) & ((counts > 0) | (ends - starts == 2))  # {} is the one row without quotes
    pairs = np.where(taken, counts // 4, 0)
    if not taken.all():  # only the taken rows' quotes: four per pair, each row's pairs together
        keep = np.repeat(taken, counts)
        quotes = quotes[keep]
    pair_row = np.repeat(np.arange(n, dtype=np.int32), pairs)
    quad = quotes.reshape(-1, 4)  # key opens, key closes, value opens, value closes
    key_open, key_close, value_open, value_close = quad.T
    # each pair: "k":"v" exactly; the first right after the row's {, each next one after "," and
    # the last one right before its }
    pair_first = np.zeros(len(quad), dtype=bool)
    pair_first[(np.cumsum(pairs) - pairs)[pairs > 0]] = True
    expected_open = np.empty_like(key_open)
    expected_open[1:] = value_close[:-1] + 2
    expected_open[pair_first] = starts[pair_row[pair_first]] + 1
    pair_last = np.zeros(len(quad), dtype=bool)
    pair_last[(np.cumsum(pairs) - 1)[pairs > 0]] = True
    wrong = (key_open != expected_open) | (value_open != key_close + 2) | (data[key_close + 1] != _COLON)
    wrong |= pair_last & (value_close != ends[pair_row] - 2)
    between = ~pair_last
    wrong[between] |= data[value_close[between] + 1] != _COMMA
    bad_rows = np.unique(pair_row[wrong])
    # every string between two quotes: offsets one past each opening quote, at each closing one,
    # over the texts' own bytes: no copy until the take
    bounds = quotes.copy()  # int32, like the texts' own offsets
    bounds[0::2] += 1
    strings = pa.StringArray.from_buffers(max(len(bounds) - 1, 0), pa.py_buffer(bounds), data_buffer)
    key_at = np.arange(0, len(bounds), 4, dtype=np.int32)
    keys = strings.take(pa.array(key_at))
    codes, dictionary = _encode(keys)
    bad_rows = np.union1d(bad_rows, _rows_repeating_a_key(pair_row, codes, len(dictionary), n))
    if len(bad_rows):  # rare: drop those rows' pairs
        taken[bad_rows] = False
        kept = taken[pair_row]
        pairs = np.where(taken, pairs, 0)
        key_at, pair_row, codes = key_at[kept], pair_row[kept], codes[kept]
        keys = keys.filter(pa.array(kept))
    map_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(pairs, out=map_offsets[1:])
    values = strings.take(pa.array(key_at + 2))
    maps = pa.MapArray.from_arrays(pa.array(map_offsets), keys, values, mask=pa.array(~taken))
    return PlainMaps(taken, maps, _Columns(n, pair_row, codes, dictionary, values))


def _scan(data: np.ndarray, lo: int, hi: int, block: int = 1 << 18) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the quotes and backslashes in ``data[lo:hi]``, by blocks that reuse one buffer
    (a batch-sized temporary would be fresh memory, page-faulted in, on every batch)."""
    buffer = np.empty(min(block, max(hi - lo, 1)), dtype=bool)
    quotes, slashes = [np.zeros(0, dtype=np.int32)], [np.zeros(0, dtype=np.int64)]
    for at in range(lo, hi, block):
        part = data[at : min(at + block, hi)]
        found = buffer[: len(part)]
        np.equal(part, _QUOTE, out=found)
        positions = np.flatnonzero(found).astype(np.int32)  # the texts' offsets are int32 too
        positions += at
        quotes.append(positions)
        np.equal(part, _BACKSLASH, out=found)
        if found.any():
            slashes.append(np.flatnonzero(found) + at)
    return np.concatenate(quotes), np.concatenate(slashes)


def _encode(keys: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """The keys as codes into their distinct values (a queue's rows share a few keys)."""
    if not len(keys):
        return np.zeros(0, dtype=np.int32), pa.array([], pa.string())
    encoded = pc.dictionary_encode(keys)
    return encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary


def _rows_repeating_a_key(pair_row: np.ndarray, codes: np.ndarray, distinct: int, n: int) -> np.ndarray:
    if not len(codes):
        return np.zeros(0, dtype=np.int64)
    cell = pair_row.astype(np.int64) * distinct + codes
    if n * distinct <= _BINCOUNT_LIMIT:
        twice = np.flatnonzero(np.bincount(cell, minlength=n * distinct) > 1)
    else:
        ordered = np.sort(cell)
        twice = ordered[1:][ordered[1:] == ordered[:-1]]
    return np.unique(twice // distinct)


class _Columns(Mapping[str, pa.Array]):
    """Headers as columns, made when asked for: the journal wants a few of the keys a batch holds."""

    def __init__(self, n: int, pair_row: np.ndarray, codes: np.ndarray, dictionary: pa.Array, values: pa.Array):
        self._n, self._pair_row, self._codes, self._values = n, pair_row, codes, values
        self._code_of = {name: i for i, name in enumerate(dictionary.to_pylist())}
        self._positions: np.ndarray | None = None  # per key, each row's entry (-1: none)

    def __getitem__(self, name: str) -> pa.Array:
        code = self._code_of[name]
        if len(self._code_of) * self._n <= _POSITIONS_LIMIT:
            if self._positions is None:  # one scatter for all keys, not a scan of the codes per column
                self._positions = np.full((len(self._code_of), self._n), -1, dtype=np.int32)
                self._positions[self._codes, self._pair_row] = np.arange(len(self._codes), dtype=np.int32)
            position = self._positions[code]
        else:
            entries = np.flatnonzero(self._codes == code)
            position = np.full(self._n, -1, dtype=np.int32)
            position[self._pair_row[entries]] = entries
        if position.min(initial=0) >= 0:  # a header every row carries (most that NServiceBus writes)
            return self._values.take(pa.array(position))
        return self._values.take(pa.array(position, mask=position < 0))

    def __contains__(self, name: object) -> bool:
        return name in self._code_of

    def __iter__(self) -> Iterator[str]:
        return iter(self._code_of)

    def __len__(self) -> int:
        return len(self._code_of)
