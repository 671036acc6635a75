"""The headers of a batch's copies, built as Arrow columns: a template per row, an id per copy.

Why: publish wrote every copy through a headers dict, an ``orjson.dumps`` and an ``OutgoingMessage``,
then ``write_row``: Python per copy, so an event fanned out to 300 endpoints cost 300 times a row. A
copy's headers differ from its row's only in the MessageId (and the ConversationId and CorrelationId,
which default to it). So each row's headers are written once, as JSON text cut where the id goes
(up to three places, ``SLOTS``), and a copy's headers are its row's pieces joined with its id by one
Arrow kernel (``Templates.headers``). Rows without headers of their own (the usual) are written by
Arrow too, each distinct value (intent, type, TTBR) as JSON once; a row with headers of its own is
written in Python once per row (``row_headers``), in the order ``{**theirs, **ours}`` gives, which
keeps their names where they are. The text is byte for byte what ``orjson.dumps`` of the copy's
headers dict writes (``tests/pipeline/publish/test_outgoing.py`` holds a row-by-row reference).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.nsb import headers as hdr
from queuelake.nsb.timespan import timespan

SLOTS = 3  # the MessageId, then the ConversationId and the CorrelationId where they default to it
CONTENT_TYPE = "application/json"
VERSION = "9.2.0"


class CopyId:
    """Stands, in a row's headers, where each copy's own MessageId goes."""

    def __repr__(self) -> str:
        return "<the copy's MessageId>"


COPY_ID = CopyId()
Piece: TypeAlias = "pa.Array | str"  # a piece of every row's template: one text per row, or the same for all


@dataclass(frozen=True)
class Templates:
    """Each row's headers as JSON text cut at its id's places: ``pieces[0]``, an id where
    ``slots[:, 0]``, ``pieces[1]``, an id where ``slots[:, 1]``, ... ``pieces[SLOTS]``."""

    pieces: list[Piece]  # SLOTS + 1
    slots: np.ndarray  # (n, SLOTS) bool

    def headers(self, positions: np.ndarray | None, ids: pa.Array) -> pa.Array:
        """The headers of one copy of each row at ``positions`` (None: every row, in order), whose
        MessageIds are ``ids`` (``quoted_ids``)."""
        at = None if positions is None else pa.array(positions, pa.int64())
        slots = self.slots if positions is None else self.slots[positions]
        parts: list[Any] = [_take(self.pieces[0], at)]
        for j in range(SLOTS):
            used = slots[:, j]
            if used.all():
                parts.append(ids)
            elif used.any():
                parts.append(pc.if_else(pa.array(used, pa.bool_()), ids, ""))
            parts.append(_take(self.pieces[j + 1], at))
        return pc.binary_join_element_wise(*parts, "")


def _take(piece: Piece, at: pa.Array | None) -> Piece:
    return piece if isinstance(piece, str) or at is None else piece.take(at)


def _json(name: str) -> str:
    return orjson.dumps(name).decode()


def json_values(values: pa.Array) -> pa.Array:
    """Each value as JSON text (a string, or ``null``): each distinct value written by orjson once."""
    encoded = pc.dictionary_encode(values, null_encoding="encode")
    texts = pa.array([orjson.dumps(v).decode() for v in encoded.dictionary.to_pylist()], pa.string())
    return texts.take(encoded.indices)


def _given(values: pa.Array) -> np.ndarray:
    """True where a row gives its own id (not null, not empty: ``row.get(...) or mid``)."""
    present = pc.and_(pc.is_valid(values), pc.greater(pc.binary_length(values), 0))
    return pc.fill_null(present, False).to_numpy(zero_copy_only=False)


def _own_or_nothing(values: pa.Array, given: np.ndarray) -> Piece:
    """A row's own id as a JSON member's value where it gives one, else "" (its copy's id goes there)."""
    if not given.any():
        return ""
    return pc.if_else(pa.array(given, pa.bool_()), json_values(values), "")


def _ttbr_members(ttbr_ms: pa.Array) -> Piece:
    """``,"NServiceBus.TimeToBeReceived":"<TimeSpan>"`` where a row has a TTBR, else ""."""
    if ttbr_ms.null_count == len(ttbr_ms):
        return ""
    encoded = pc.dictionary_encode(ttbr_ms, null_encoding="encode")
    member = "," + _json(hdr.TIME_TO_BE_RECEIVED) + ":"
    texts = ["" if v is None else member + _json(timespan(int(v))) for v in encoded.dictionary.to_pylist()]
    return pa.array(texts, pa.string()).take(encoded.indices)


def templates(batch: pa.Table, sent: str, endpoint: str, machine: str) -> Templates:
    """Every row's template, as a row without headers of its own has it (``with_own_headers`` then
    rewrites the rows that have some). ``batch``: the sent columns (``rows.SENT_SCHEMA``), one chunk."""
    n = batch.num_rows
    conversation, correlation = batch["conversation_id"].chunk(0), batch["correlation_id"].chunk(0)
    own_conversation, own_correlation = _given(conversation), _given(correlation)
    after_id = pc.binary_join_element_wise(
        "," + _json(hdr.MESSAGE_INTENT) + ":",
        json_values(batch["intent"].chunk(0)),
        "," + _json(hdr.ENCLOSED_MESSAGE_TYPES) + ":",
        json_values(batch["message_type"].chunk(0)),
        f",{_json(hdr.CONTENT_TYPE)}:{_json(CONTENT_TYPE)},{_json(hdr.TIME_SENT)}:{_json(sent)},"
        + _json(hdr.CONVERSATION_ID)
        + ":",
        "",
    )
    fixed_tail = (
        f",{_json(hdr.ORIGINATING_ENDPOINT)}:{_json(endpoint)},{_json(hdr.ORIGINATING_MACHINE)}:{_json(machine)},"
        f"{_json(hdr.VERSION)}:{_json(VERSION)}"
    )
    ttbr = _ttbr_members(batch["ttbr_ms"].chunk(0))
    tail = _join(_join(fixed_tail, ttbr), "}")
    slots = np.ones((n, SLOTS), bool)
    slots[:, 1], slots[:, 2] = ~own_conversation, ~own_correlation
    return Templates(
        [
            "{" + _json(hdr.MESSAGE_ID) + ":",
            _join(after_id, _own_or_nothing(conversation, own_conversation)),
            _join("," + _json(hdr.CORRELATION_ID) + ":", _own_or_nothing(correlation, own_correlation)),
            tail,
        ],
        slots,
    )


def _join(a: Piece, b: Piece) -> Piece:
    if isinstance(a, str) and isinstance(b, str):
        return a + b
    return pc.binary_join_element_wise(a, b, "")


def row_headers(row: dict[str, Any], theirs: dict[str, Any], sent: str, endpoint: str, machine: str) -> dict[str, Any]:
    """One row's headers: the row's own (``theirs``) first, ours over them; ``COPY_ID`` where each
    copy's MessageId goes. The wire format's reference, for rows the columns do not write."""
    ours = {
        hdr.MESSAGE_ID: COPY_ID,
        hdr.MESSAGE_INTENT: row["intent"],
        hdr.ENCLOSED_MESSAGE_TYPES: row["message_type"],
        hdr.CONTENT_TYPE: theirs.get(hdr.CONTENT_TYPE) or CONTENT_TYPE,
        hdr.TIME_SENT: sent,
        hdr.CONVERSATION_ID: row.get("conversation_id") or theirs.get(hdr.CONVERSATION_ID) or COPY_ID,
        hdr.CORRELATION_ID: row.get("correlation_id") or theirs.get(hdr.CORRELATION_ID) or COPY_ID,
        hdr.ORIGINATING_ENDPOINT: endpoint,
        hdr.ORIGINATING_MACHINE: machine,
        hdr.VERSION: theirs.get(hdr.VERSION) or VERSION,
    }
    headers = {**theirs, **ours} if theirs else ours
    if row.get("ttbr_ms") is not None:
        headers[hdr.TIME_TO_BE_RECEIVED] = timespan(int(row["ttbr_ms"]))
    else:  # a TTBR of the row's own headers with no ttbr_ms: the copy never expires, and must not say it does
        headers.pop(hdr.TIME_TO_BE_RECEIVED, None)
    return headers


def template_of(headers: dict[str, Any]) -> tuple[list[str], list[bool]]:
    """A row's headers (``row_headers``) as its template's pieces and slots."""
    pieces: list[str] = []
    text = "{"
    for i, (name, value) in enumerate(headers.items()):
        text += ("," if i else "") + _json(name) + ":"
        if value is COPY_ID:
            pieces.append(text)
            text = ""
        else:
            text += orjson.dumps(value).decode()
    pieces.append(text + "}")
    used = len(pieces) - 1
    return pieces + [""] * (SLOTS - used), [True] * used + [False] * (SLOTS - used)


def text_of(headers: dict[str, Any], message_id: str) -> str:
    """One copy's headers text (a delayed copy: written one by one, ``store_delayed``)."""
    return orjson.dumps({k: message_id if v is COPY_ID else v for k, v in headers.items()}).decode()


def with_own_headers(base: Templates, positions: np.ndarray, rows: list[tuple[list[str], list[bool]]]) -> Templates:
    """``base`` with the rows at ``positions`` given their own templates (``template_of``)."""
    if not len(positions):
        return base
    n = len(base.slots)
    mask = np.zeros(n, bool)
    mask[positions] = True
    where = pa.array(mask, pa.bool_())
    pieces: list[Piece] = []
    for j, piece in enumerate(base.pieces):
        full = pa.array(np.full(n, piece, object), pa.string()) if isinstance(piece, str) else piece
        pieces.append(pc.replace_with_mask(full, where, pa.array([r[0][j] for r in rows], pa.string())))
    slots = base.slots.copy()
    slots[positions] = np.array([r[1] for r in rows], bool)
    return Templates(pieces, slots)


_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
# where the 32 hex digits go in '"xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"' (38 characters)
_DIGITS = np.array([i for i in range(1, 37) if i not in (9, 14, 19, 24)])


def quoted_ids(ids: np.ndarray) -> pa.Array:
    """Each uuid of an (n, 16) uint8 matrix as its JSON text, ``"8-4-4-4-12"`` in lower-case hex
    (``str(uuid.UUID(bytes=...))`` in quotes), written by numpy for all rows at once."""
    n = len(ids)
    text = np.empty((n, 38), np.uint8)
    text[:, [0, 37]] = ord('"')
    text[:, [9, 14, 19, 24]] = ord("-")
    digits = np.empty((n, 32), np.uint8)
    digits[:, 0::2] = _HEX[ids >> 4]
    digits[:, 1::2] = _HEX[ids & 0x0F]
    text[:, _DIGITS] = digits
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(38), n, [None, pa.py_buffer(text)])
    return fixed.cast(pa.binary()).cast(pa.string())
