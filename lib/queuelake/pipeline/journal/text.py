"""The text of a received batch as the journal keeps it: string columns read as Python text even
when they are not valid UTF-8, and raw header text and errors made valid text for the quarantine
columns (``error``, ``raw_headers``, ``raw_expires``).

Why a module of its own: the build and the quarantine both read a row's raw text and must show it
the same way, whatever bytes a driver handed over.
"""

from __future__ import annotations

import pyarrow as pa


def to_texts(column: pa.Array | pa.ChunkedArray) -> list[str | None]:
    """A string column as Python text. Invalid UTF-8 (a driver handing over CESU-8 or WTF-8 for an
    nvarchar holding a lone surrogate, a SQL_ASCII database) is kept with its bytes surrogate-escaped,
    as ``queues._text`` does; the reference decoder then refuses it and ``safe_text`` shows it."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        raw = column.cast(pa.binary()).to_pylist()
        return [None if b is None else b.decode("utf-8", errors="surrogateescape") for b in raw]


def text_at(column: pa.Array, i: int) -> str | None:
    (text,) = to_texts(column.slice(i, 1))
    return text


def as_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):  # combine_chunks copies even a single chunk
        return values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
    return values


def safe_text(raw: str | None) -> str | None:
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


def error_text(exc: BaseException, limit: int = 1000) -> str:
    """``Type: message``, cut to ``limit`` characters (Arrow quotes the offending value), as valid text."""
    text = f"{type(exc).__name__}: {exc}"
    if len(text) > limit:
        text = text[:limit] + f"... ({len(text) - limit} more characters)"
    return safe_text(text) or type(exc).__name__


def raw_expires(received: pa.Table) -> pa.Array | pa.ChunkedArray:
    """The original text of a clamped Expires (``queues.ReceivedRow.raw_expires``); all null for a
    batch received without the column (tests and benches that build batches by hand)."""
    if "raw_expires" in received.column_names:
        return received["raw_expires"]
    return pa.nulls(received.num_rows, pa.string())
