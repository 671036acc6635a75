"""``binary_copy.Stream``: a batch's COPY stream assembled before its transaction is, once its
Expires are written for the transaction's now(), byte for byte the stream ``rows`` assembles then.

Why: publish and replay build the next batch's stream in a builder thread while the previous batch
is sent; only Expires (now() plus the TTBR) waits for the transaction. A row's Expires written at the
wrong place would corrupt the row silently (the server reads a wrong length), so the two ways are
compared on every shape of row: with and without a TTBR, with a null body, given and drawn ids.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from queuelake.transport import binary_copy

NOW_US = 1_795_000_000_123_456  # microseconds since 1970 (2026-11-18)


def _messages(ids: np.ndarray | None) -> binary_copy.Messages:
    has = np.array([True, False, True, False, True])
    return binary_copy.Messages(
        ids,
        np.array([60_000, 0, 1, 0, 86_400_000 * 365], np.int64),
        has,
        pa.array(['{"a":"1"}', "{}", '{"b":"\u00e9"}', '{"c":""}', "{}"], pa.string()),
        pa.array([b"body", None, b"", b"x" * 1000, b"y"], pa.binary()),
    )


def test_a_stream_built_ahead_is_the_stream_built_in_the_transaction() -> None:
    ids = np.arange(5 * 16, dtype=np.uint8).reshape(5, 16)
    messages = _messages(ids)
    stream = binary_copy.stream_of(messages)
    assert len(stream) == 5 and list(stream.expires_at) != []
    assert bytes(stream.at(NOW_US)) == bytes(binary_copy.rows(messages, NOW_US))
    assert bytes(stream.at(NOW_US + 1)) != bytes(binary_copy.rows(messages, NOW_US))


def test_a_stream_without_ttbr_is_final_and_not_copied() -> None:
    messages = _messages(np.zeros((5, 16), np.uint8))
    untimed = binary_copy.Messages(messages.ids, messages.ttbr_ms, np.zeros(5, bool), messages.headers, messages.bodies)
    stream = binary_copy.stream_of(untimed)
    assert stream.at(NOW_US) is stream.data
    assert bytes(stream.data) == bytes(binary_copy.rows(untimed, NOW_US))


def test_ids_drawn_when_assembled_are_version_4() -> None:
    stream = binary_copy.stream_of(_messages(None))
    data = bytes(stream.at(NOW_US))
    assert data[:2] == b"\x00\x04" and data[2:6] == b"\x00\x00\x00\x10"
    assert data[6 + 6] >> 4 == 4 and data[6 + 8] >> 6 == 2  # version 4, RFC 4122 variant


def test_prepared_is_the_stream_only_for_a_driver_with_binary_copy() -> None:
    messages = _messages(None)
    assert isinstance(binary_copy.prepared(messages, True), binary_copy.Stream)
    assert binary_copy.prepared(messages, False) is messages
