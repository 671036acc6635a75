"""The bytes behind an Arrow string column, for numpy scans over a whole batch's text at once (the
header decoders look for quotes and control bytes, the replay's JSON writer for what it must escape).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def offsets_and_data(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a string array without copying: its n + 1 int32 offsets, which index into
    ``data``, the uint8 view of its whole value buffer (the array may be a slice of it)."""
    n = len(strings)
    _, offset_buffer, data_buffer = strings.buffers()
    offsets = np.frombuffer(offset_buffer, dtype=np.int32)[strings.offset : strings.offset + n + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return offsets, data


def rows_holding(offsets: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The index of the string holding each byte position (positions into ``data``)."""
    return np.searchsorted(offsets, positions, side="right") - 1
