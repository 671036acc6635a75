"""Header texts decoded one row at a time with orjson: the path for the rows the native decoders
(``native``, ``plain``) leave, with the reference's verdict (``headers.decode``) on any row in doubt.

Why a module of its own: it is the other half of the bulk decode. ``parse_fast`` is stricter than
the reference and only ever sends a row on to it, never refuses one itself; ``header_map`` turns the
decoded rows into the same map column the native decoders give.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

from queuelake.errors import HeaderError
from queuelake.nsb import headers as hdr

_STR_OR_NONE = {str, type(None)}


def parse_fast(raw: str | None) -> dict[str, Any] | None:
    """The header object, or {} for no headers; None sends the row to the reference decoder, which
    gives the verdict and the reason. Value types and intents are checked later, vectorised."""
    if not raw or raw.isspace():
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return data if type(data) is dict else None


def non_string_rows(maps: list[dict[str, Any] | None]) -> list[int]:
    return [i for i, m in enumerate(maps) if m and not set(map(type, m.values())) <= _STR_OR_NONE]


def reason(raw: str | None, row_id: str | None) -> str | None:
    """Why ``headers.decode`` refuses this row, or None when it accepts it."""
    try:
        hdr.decode(raw, row_id)
    except HeaderError as exc:
        return str(exc)
    return None


def header_map(maps: list[dict[str, Any] | None]) -> pa.MapArray:
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
