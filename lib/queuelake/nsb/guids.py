"""Guids as text, a batch at once: what ``str(uuid.UUID(bytes=...))`` gives each row of a byte matrix.

Why: a replay sets one or two Guid headers on every message it sends (a replay's new MessageId, a
retry's ServiceControl unique id). Formatted one by one they were a Python call, a hex digest and a
slicing f-string per row; here numpy writes all the digits of a batch and Arrow takes the text as
it lies, without a Python string per Guid.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
_WIDTH = 36  # 8-4-4-4-12 digits and four dashes
_DIGITS_AT = np.array([i for i in range(_WIDTH) if i not in (8, 13, 18, 23)])
# .NET's Guid(byte[]) reads its first three fields little-endian (``uuid.UUID(bytes_le=...)``)
_BYTES_LE = np.array([3, 2, 1, 0, 5, 4, 7, 6, *range(8, 16)])


def texts(ids: np.ndarray) -> pa.StringArray:
    """The canonical text of each row of an (n, 16) uint8 matrix, read as ``uuid.UUID(bytes=row)``."""
    n = len(ids)
    digits = np.empty((n, 32), np.uint8)
    digits[:, 0::2] = _HEX[ids >> 4]
    digits[:, 1::2] = _HEX[ids & 0x0F]
    out = np.full((n, _WIDTH), ord("-"), np.uint8)
    out[:, _DIGITS_AT] = digits
    offsets = np.arange(0, _WIDTH * (n + 1), _WIDTH, dtype=np.int64)
    text = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(out.tobytes()))
    return text.cast(pa.string())


def texts_le(ids: np.ndarray) -> pa.StringArray:
    """As ``texts``, each row read as ``uuid.UUID(bytes_le=row)`` (the byte order of .NET's Guid)."""
    return texts(ids[:, _BYTES_LE])
