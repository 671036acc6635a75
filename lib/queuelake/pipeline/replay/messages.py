"""A batch of selected rows turned into the messages a replay sends.

Why: the headers were the largest step of a replay (2.9 s of a 100,000-row retry at first, 1.85 s
after the names were decided in bulk, beside 1.7 s for the COPY). Now only the headers the rewrite
reads (MessageId, ProcessingEndpoint, FailedQ, ...) and sets become Python values: which entries a
message keeps is decided per distinct name and spread to the entries as a mask, the kept entries
are joined into JSON by Arrow (``nsb.json_members``), and Python appends the few headers it sets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.nsb import headers as hdr
from queuelake.nsb import json_members
from queuelake.nsb.retry import (
    REPLAY_ID,
    REPLAY_KIND,
    REPLAY_ORIGINAL_MESSAGE_ID,
    REPLAY_SOURCE,
    REPLAY_SOURCE_ID,
    RETRY_ACKNOWLEDGEMENT_QUEUE,
    RETRY_UNIQUE_MESSAGE_ID,
    kept_mask,
    unique_id_of,
)
from queuelake.nsb.timespan import timespan_ms
from queuelake.pipeline.message_ids import name_uuid, name_uuid_bytes
from queuelake.pipeline.replay.rows import Row
from queuelake.transport import binary_copy


def _lookup(headers: pa.MapArray, name: str) -> list[str | None]:
    """Each row's value of header ``name``; the last one where a name repeats (as a dict keeps it)."""
    return pc.map_lookup(headers, name, "last").to_pylist()


@dataclass(frozen=True)
class Built:
    """A batch's messages, in the order of its rows."""

    rows: list[Row]
    messages: binary_copy.Messages


def build(replay_id: str, rows: list[Row], content: pa.Table, ack_queue: str | None) -> Built:
    """The message of each row. ``content`` holds each row's ``headers`` and ``body``
    (``Content.read``). A retry (or redirect) keeps the message's identity, strips what ServiceControl
    strips and sets its unique id; a replay gets a new MessageId naming the original. Each message's
    row id is a uuid5 of the replay and the journal row: a batch sent again has the same ids."""
    headers: pa.MapArray = content.column("headers").combine_chunks()
    offsets = np.asarray(headers.offsets.to_numpy(), dtype=np.int64)
    first, entries = int(offsets[0]), int(offsets[-1] - offsets[0])
    names, values = headers.keys.slice(first, entries), headers.items.slice(first, entries)
    message_ids = _lookup(headers, hdr.MESSAGE_ID)
    extras = [
        _set_by_the_rewrite(replay_id, row, ack_queue, message_id, *found)
        for row, message_id, *found in zip(
            rows,
            message_ids,
            _lookup(headers, RETRY_UNIQUE_MESSAGE_ID),
            _lookup(headers, hdr.PROCESSING_ENDPOINT),
            _lookup(headers, hdr.FAILED_QUEUE),
            _lookup(headers, hdr.REPLY_TO_ADDRESS),
            strict=True,
        )
    ]
    counts = np.diff(offsets)
    encoded = pc.dictionary_encode(names)
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    distinct = encoded.dictionary.to_pylist()
    keep = _kept_entries(codes, distinct, counts, rows, extras)
    joined = json_members.members(values, codes, distinct, counts, keep)
    texts = joined.text
    repeated = np.flatnonzero(joined.repeated).tolist()
    if repeated:  # a name twice: the last one, as a dict keeps it
        rewritten = []
        for i in repeated:
            a, b = int(offsets[i]) - first, int(offsets[i + 1]) - first
            at = [a + j for j in np.flatnonzero(keep[a:b]).tolist()]
            out = dict(zip(names.take(at).to_pylist(), values.take(at).to_pylist(), strict=True))
            rewritten.append(orjson.dumps(out).decode()[1:-1])
        mask = np.zeros(len(rows), bool)
        mask[repeated] = True
        texts = pc.replace_with_mask(texts, pa.array(mask), pa.array(rewritten, pa.string()))
    # each row's kept headers, then the ones the rewrite sets: joined by Arrow, the kept text (most
    # of a message's bytes) never a Python string
    more = pa.array([orjson.dumps(m).decode() for m in extras], pa.string())
    json_texts = pc.if_else(
        pc.fill_null(pc.equal(pc.binary_length(texts), 0), True),
        more,
        pc.binary_join_element_wise("{", texts, ",", pc.utf8_slice_codeunits(more, 1), ""),
    )
    ttbr = pc.dictionary_encode(pc.map_lookup(headers, hdr.TIME_TO_BE_RECEIVED, "last"), null_encoding="encode")
    ttbr_ms = [timespan_ms(t) for t in ttbr.dictionary.to_pylist()]
    of_row = ttbr.indices.to_numpy(zero_copy_only=False)
    ids = name_uuid_bytes([f"replay-row\n{replay_id}\n{r.queue}\n{r.seq}\n{r.id}" for r in rows])
    return Built(
        rows,
        binary_copy.Messages(
            ids,
            np.array([t or 0 for t in ttbr_ms], np.int64)[of_row],
            np.array([t is not None for t in ttbr_ms], bool)[of_row],
            json_texts,
            content.column("body").combine_chunks(),
        ),
    )


def _set_by_the_rewrite(
    replay_id: str,
    row: Row,
    ack_queue: str | None,
    message_id: str | None,
    existing: str | None,
    endpoint: str | None,
    failed_queue: str | None,
    reply_to: str | None,
) -> dict[str, str]:
    """The headers the rewrite sets on this row's message (they replace any of the same name)."""
    assert row.target is not None
    out: dict[str, str] = {}
    if row.kind == "replay":
        out[hdr.MESSAGE_ID] = name_uuid(f"replay\n{replay_id}\n{row.message_id}\n{row.target.canonical}")
        if row.message_id is not None:
            out[REPLAY_ORIGINAL_MESSAGE_ID] = row.message_id
    else:  # retry, redirect: the message's own identity, as ServiceControl sends it back
        # of the MessageId the retry carries: the drained row's when the headers had none (a review)
        carried = message_id or row.message_id or message_id
        unique = unique_id_of(existing, carried, endpoint, failed_queue, reply_to)
        if unique is not None:
            out[RETRY_UNIQUE_MESSAGE_ID] = unique
        if ack_queue:
            out[RETRY_ACKNOWLEDGEMENT_QUEUE] = ack_queue
        if not message_id and row.message_id:
            out[hdr.MESSAGE_ID] = row.message_id  # it had none: the drained row's id
    out[REPLAY_ID] = replay_id
    out[REPLAY_KIND] = row.kind
    out[REPLAY_SOURCE] = f"{row.queue}@{row.seq}"
    out[REPLAY_SOURCE_ID] = row.id
    return out


_SETTABLE = (
    hdr.MESSAGE_ID,
    REPLAY_ORIGINAL_MESSAGE_ID,
    RETRY_UNIQUE_MESSAGE_ID,
    RETRY_ACKNOWLEDGEMENT_QUEUE,
    REPLAY_ID,
    REPLAY_KIND,
    REPLAY_SOURCE,
    REPLAY_SOURCE_ID,
)


def _kept_entries(
    codes: np.ndarray, names: list[str], counts: np.ndarray, rows: list[Row], extras: list[dict[str, str]]
) -> np.ndarray:
    """True for each header entry (its name as ``codes`` into ``names``) the row's message keeps: a
    replay keeps every one, a retry what ServiceControl keeps; neither keeps one the rewrite sets
    itself. Decided per distinct name and spread to the entries by their codes."""
    n = len(rows)
    if not len(codes):
        return np.zeros(0, dtype=bool)
    entry_row = np.repeat(np.arange(n, dtype=np.int64), counts)
    replays = np.fromiter((row.kind == "replay" for row in rows), dtype=bool, count=n)
    keep = kept_mask(pa.array(names, pa.string()))[codes] | replays[entry_row]
    for code, name in enumerate(names):
        if name in _SETTABLE:
            setting = np.fromiter((name in e for e in extras), dtype=bool, count=n)
            keep &= ~((codes == code) & setting[entry_row])
    return keep
