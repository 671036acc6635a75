"""A batch of selected rows turned into the messages a replay sends.

Why: the headers were the largest step of a replay (2.9 s of a 100,000-row retry, and reading them
into Python 1.7 s more, beside 2.6 s for the COPY). Here the header names a retry strips are found
once per batch by Arrow over the flattened map and only the kept names and values become Python
strings; the headers a retry reads (MessageId, ProcessingEndpoint, FailedQ, ...) are looked up
column-wise; Python zips each row's slice into the dict it serialises. (Building each row's JSON
text in Arrow instead was tried: its string kernels cost more per header than the dict does.)
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.pipeline.outgoing import name_uuid
from queuelake.pipeline.replay.headers import (
    REPLAY_ID,
    REPLAY_KIND,
    REPLAY_ORIGINAL_MESSAGE_ID,
    REPLAY_SOURCE,
    RETRY_ACKNOWLEDGEMENT_QUEUE,
    RETRY_UNIQUE_MESSAGE_ID,
    STAGING_HEADERS,
    STRIPPED_PREFIXES,
    timespan_ms,
    unique_id_of,
)
from queuelake.pipeline.replay.rows import Row
from queuelake.transport import headers as hdr
from queuelake.transport.queues import OutgoingMessage


def _lookup(headers: pa.MapArray, name: str) -> list[str | None]:
    """Each row's value of header ``name``; the last one where a name repeats (as a dict keeps it)."""
    return pc.map_lookup(headers, name, "last").to_pylist()


def _kept_mask(keys: pa.Array) -> np.ndarray:
    """True for each header name a retry keeps (not a failure or ServiceControl staging header)."""
    dropped = pc.is_in(keys, value_set=pa.array(STAGING_HEADERS, pa.string()))
    for prefix in STRIPPED_PREFIXES:
        dropped = pc.or_(dropped, pc.starts_with(keys, prefix))
    return np.asarray(pc.invert(pc.fill_null(dropped, False)).to_numpy(zero_copy_only=False), dtype=bool)


def build(
    replay_id: str, rows: list[Row], content: pa.Table, ack_queue: str | None
) -> Iterator[tuple[Row, OutgoingMessage]]:
    """(row, its message) for each row, in order. ``content`` holds each row's ``headers`` and ``body``
    (``Content.read``). A retry (or redirect) keeps the message's identity, strips what ServiceControl
    strips and sets its unique id; a replay gets a new MessageId naming the original."""
    headers: pa.MapArray = content.column("headers").combine_chunks()
    bodies = content.column("body").to_pylist()
    keys_array, values_array = headers.keys, headers.items
    offsets = np.asarray(headers.offsets.to_numpy(), dtype=np.int64)
    replays = any(row.kind == "replay" for row in rows)  # only a replay keeps every header
    keys = keys_array.to_pylist() if replays else []
    values = values_array.to_pylist() if replays else []
    starts = offsets.tolist()
    kept = _kept_mask(keys_array)
    mask = pa.array(kept, pa.bool_())
    kept_keys, kept_values = keys_array.filter(mask).to_pylist(), values_array.filter(mask).to_pylist()
    kept_starts = np.concatenate([[0], np.cumsum(kept)])[offsets].tolist()
    message_ids = _lookup(headers, hdr.MESSAGE_ID)
    existing = _lookup(headers, RETRY_UNIQUE_MESSAGE_ID)
    endpoints = _lookup(headers, hdr.PROCESSING_ENDPOINT)
    failed = _lookup(headers, hdr.FAILED_QUEUE)
    reply_to = _lookup(headers, hdr.REPLY_TO_ADDRESS)
    ttbrs = _lookup(headers, hdr.TIME_TO_BE_RECEIVED)
    ttbr_ms: dict[str | None, int | None] = {}
    for i, row in enumerate(rows):
        assert row.target is not None
        if row.kind == "replay":
            a, b = starts[i], starts[i + 1]
            out = dict(zip(keys[a:b], values[a:b]))  # noqa: B905 - one map's names and values
            out[hdr.MESSAGE_ID] = name_uuid(f"replay\n{replay_id}\n{row.message_id}\n{row.target.canonical}")
            if row.message_id is not None:
                out[REPLAY_ORIGINAL_MESSAGE_ID] = row.message_id
        else:  # retry, redirect: the message's own identity, as ServiceControl sends it back
            a, b = kept_starts[i], kept_starts[i + 1]
            out = dict(zip(kept_keys[a:b], kept_values[a:b]))  # noqa: B905
            unique = unique_id_of(existing[i], message_ids[i], endpoints[i], failed[i], reply_to[i])
            if unique is not None:
                out[RETRY_UNIQUE_MESSAGE_ID] = unique
            if ack_queue:
                out[RETRY_ACKNOWLEDGEMENT_QUEUE] = ack_queue
            if not out.get(hdr.MESSAGE_ID) and row.message_id:
                out[hdr.MESSAGE_ID] = row.message_id  # it had none: the drained row's id
        out[REPLAY_ID] = replay_id
        out[REPLAY_KIND] = row.kind
        out[REPLAY_SOURCE] = f"{row.queue}@{row.seq}"
        ttbr = ttbrs[i]
        if ttbr not in ttbr_ms:
            ttbr_ms[ttbr] = timespan_ms(ttbr)
        message = OutgoingMessage(
            orjson.dumps(out).decode(),  # names and values are strings already (map<string,string>)
            bodies[i],
            id=name_uuid(f"replay-row\n{replay_id}\n{row.queue}\n{row.seq}\n{row.id}"),
            ttbr_ms=ttbr_ms[ttbr],
        )
        yield row, message
