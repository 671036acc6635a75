"""A synthetic journal of realistic shape, fast: Arrow batches built with numpy, landed through the lake
port as the drain lands them (one queue's batch of ``batch_size`` rows staged, then committed under the
queue worker's application transaction), so the files are the drain's: one per batch, in drain order.

Why not drain real traffic: 10,000,000 rows through PostgreSQL and the drain take hours on two
cores; ``queuelake find`` cares about the layout (files, ids, their spread over files), not the path
the rows came by. The rows:

- logical messages in conversations of 1 to 300 messages (log-uniform sizes: most short, some long),
  each conversation's messages sent over a few minutes at a random moment of one day;
- each message sent once (to Sales, Billing or Shipping), with an audit copy (80%), a failed copy in
  ``error`` (5%) and, for half of those, a retry sent to the queue it failed in;
- ids are GUID strings (``message_id`` shared by a message's copies, ``conversation_id`` by a
  conversation's rows, ``id`` fresh per row), six headers, bodies of ~200 B of JSON text (a real
  OrderPlaced body is ~1 KB: smaller bodies make the journal lighter, not the lookup's column scan).

Imports no queuelake at module level: the bench imports ``_tree`` first.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

QUEUES = ['"public"."Sales"', '"public"."Billing"', '"public"."Shipping"', '"public"."audit"', '"public"."error"']
SENT_TO = (0, 1, 2)  # a message's send goes to one of these queues
AUDIT, ERROR = 3, 4
KINDS = ("send", "audit", "error", "retry")
START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
DAY_US = 86_400_000_000
ORDER_PLACED = "Sales.Messages.Events.OrderPlaced"
ENCLOSED = [
    f"{ORDER_PLACED}, Sales.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null",
    "Sales.Messages.Events.IOrderEvent, Sales.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null",
]
HEADER_KEYS = [
    "NServiceBus.MessageId",
    "NServiceBus.MessageIntent",
    "NServiceBus.ConversationId",
    "NServiceBus.CorrelationId",
    "NServiceBus.OriginatingEndpoint",
    "NServiceBus.ContentType",
]
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_HEX_AT = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34]  # the 16 bytes' places in the text
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 that looks random."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (x ^ (x >> np.uint64(31))) & _MASK


def guids(numbers: np.ndarray, salt: int) -> pa.StringArray:
    """A version-4 GUID string per number, the same for the same (number, salt)."""
    n = len(numbers)
    with np.errstate(over="ignore"):
        base = numbers.astype(np.uint64) * np.uint64(2) + np.uint64(salt) * np.uint64(0x9E3779B97F4A7C15)
    halves = np.stack([_mix(base), _mix(base + np.uint64(1))], axis=1)
    raw = halves.view(np.uint8).reshape(n, 16).copy()
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    text = np.full((n, 36), ord("-"), dtype=np.uint8)
    for i, at in enumerate(_HEX_AT):
        text[:, at] = _HEX[raw[:, i] >> 4]
        text[:, at + 1] = _HEX[raw[:, i] & 0x0F]
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text.tobytes()))


@dataclass
class Skeleton:
    """One entry per journal row, numbers only (the strings are built per batch)."""

    message: np.ndarray  # logical message number (message_id's source)
    conversation: np.ndarray  # conversation number
    kind: np.ndarray  # index into KINDS
    queue: np.ndarray  # index into QUEUES
    sent_us: np.ndarray  # time_sent, microseconds after START
    moment_us: np.ndarray  # the row's own moment: processing or failure time (sent for sends)
    drained_us: np.ndarray

    def take(self, order: np.ndarray) -> Skeleton:
        return Skeleton(*(getattr(self, f)[order] for f in self.__dataclass_fields__))


def skeleton(rows: int, seed: int = 34) -> Skeleton:
    """``rows`` journal rows' numbers, in the order the drain would land them (queue by queue, batches
    interleaved by time)."""
    rng = np.random.default_rng(seed)
    messages = int(rows / 1.875) + 300  # 1 + 0.8 audit + 0.05 error + 0.025 retry rows per message
    sizes_all = np.clip(np.exp(rng.uniform(0, np.log(300), size=messages)).astype(np.int64), 1, 300)
    sizes = sizes_all[: int(np.searchsorted(np.cumsum(sizes_all), messages)) + 1]
    conversation = np.repeat(np.arange(len(sizes)), sizes)[:messages]
    starts = rng.integers(0, DAY_US, size=len(sizes))
    gaps = rng.exponential(2_000_000, size=messages).astype(np.int64)  # ~2 s between a conversation's messages
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])[conversation]
    cum = np.cumsum(gaps)
    sent = starts[conversation] + cum - cum[first]
    message = np.arange(messages)
    audit = rng.random(messages) < 0.8
    failed = rng.random(messages) < 0.05
    retried = failed & (rng.random(messages) < 0.5)
    send_queue = rng.choice(SENT_TO, size=messages)
    parts = []
    for kind, chosen, queue, delay in (
        (0, np.ones(messages, bool), send_queue, 0),
        (1, audit, np.full(messages, AUDIT), 400_000),
        (2, failed, np.full(messages, ERROR), 150_000),
        (3, retried, send_queue, 600_000_000),  # retried ten minutes later
    ):
        idx = np.flatnonzero(chosen)
        moment = sent[idx] + delay + rng.integers(0, 100_000, size=len(idx)) * (kind > 0)
        drained = moment + rng.integers(1_000_000, 60_000_000, size=len(idx))
        parts.append((message[idx], conversation[idx], np.full(len(idx), kind), queue[idx], sent[idx], moment, drained))
    columns = [np.concatenate([p[i] for p in parts]) for i in range(7)]
    keep = np.sort(rng.permutation(len(columns[0]))[:rows])  # every kind kept, whatever is cut to fit
    rows_ = Skeleton(*(c[keep] for c in columns))
    return rows_.take(np.lexsort((rows_.drained_us, rows_.queue)))


def batches(rows: Skeleton, batch_size: int) -> list[tuple[int, int, int]]:
    """(queue, start, stop) of each batch, in landing order (by each batch's first drain time), as
    the drain's workers of all queues land them."""
    cuts = []
    for q in range(len(QUEUES)):
        idx = np.flatnonzero(rows.queue == q)
        if len(idx):
            lo, hi = int(idx[0]), int(idx[-1]) + 1
            cuts += [(q, s, min(s + batch_size, hi)) for s in range(lo, hi, batch_size)]
    return sorted(cuts, key=lambda cut: int(rows.drained_us[cut[1]]))


def _times(us: np.ndarray) -> pa.Array:
    epoch = int(START.timestamp() * 1_000_000)
    return pa.array(us + epoch, pa.timestamp("us", tz="UTC"))


def batch_table(rows: Skeleton, start: int, stop: int, seq0: int) -> pa.Table:
    """Journal rows ``start:stop`` of the skeleton as Arrow, with the journal's column names."""
    part = rows.take(np.arange(start, stop))
    n = stop - start
    message_id = guids(part.message, 1)
    conversation_id = guids(part.conversation, 2)
    kind = part.kind
    queue = pa.DictionaryArray.from_arrays(pa.array(part.queue.astype(np.int32)), pa.array(QUEUES)).cast(pa.string())
    audit, failed = kind == 1, kind == 2
    endpoint = pa.array(np.array(["Sales", "Billing", "Shipping", "Billing", "Billing"])[part.queue])
    null_ts, null_text = pa.nulls(n, pa.timestamp("us", tz="UTC")), pa.nulls(n, pa.string())
    moment = _times(part.moment_us)
    body = pc.binary_join_element_wise(
        '{"OrderId":"order-',
        pc.cast(pa.array(part.message), pa.string()),
        '","CustomerId":"customer-0042","Total":123.45,"Currency":"EUR","Notes":"',
        pa.array(["x" * 120] * n),
        '"}',
        "",
    ).cast(pa.binary())
    values = [message_id, pa.array(["Publish"] * n), conversation_id, message_id, endpoint]
    values.append(pa.array(["application/json"] * n))
    items = pa.concat_arrays(values).take(pa.array(np.arange(n * 6).reshape(6, n).T.ravel()))
    keys = pa.array(HEADER_KEYS * n)
    headers = pa.MapArray.from_arrays(pa.array(np.arange(0, 6 * (n + 1), 6, dtype=np.int32)), keys, items)
    columns = {
        "queue": queue,
        "seq": pa.array(np.arange(seq0, seq0 + n, dtype=np.int64)),
        "id": guids(np.arange(seq0, seq0 + n) * 8 + part.queue, 3),
        "batch_id": pa.array([f"bench-{part.queue[0]}-{seq0}"] * n),
        "drained_at": _times(part.drained_us),
        "outcome": pa.array(["landed"] * n),
        "headers": headers,
        "body": body,
        "message_id": message_id,
        "message_intent": pa.array(["Publish"] * n),
        "enclosed_message_types": pa.array([ENCLOSED] * n, pa.list_(pa.string())),
        "message_type": pa.array([ORDER_PLACED] * n),
        "content_type": pa.array(["application/json"] * n),
        "conversation_id": conversation_id,
        "correlation_id": message_id,
        "originating_endpoint": pa.array(["Sales"] * n),
        "originating_machine": pa.array(["web-01"] * n),
        "time_sent": _times(part.sent_us),
        "processing_started": pc.if_else(pa.array(audit), moment, null_ts),
        "processing_ended": pc.if_else(pa.array(audit), moment, null_ts),
        "processing_endpoint": pc.if_else(pa.array(audit | failed), endpoint, null_text),
        "failed_queue": pc.if_else(pa.array(failed), pa.array(['"public"."Billing"'] * n), null_text),
        "exception_type": pc.if_else(pa.array(failed), pa.array(["System.TimeoutException"] * n), null_text),
        "time_of_failure": pc.if_else(pa.array(failed), moment, null_ts),
    }
    return pa.table(columns)


def build(lake, rows: int, batch_size: int = 10_000, seed: int = 34) -> Iterator[tuple[int, int]]:
    """Lands ``rows`` journal rows into ``messages`` through the lake port (stage, then commit under
    the queue worker's app id), yielding (batches landed, rows landed) after each batch. Returns
    the skeleton through ``build.last`` for the caller to pick targets from."""
    from queuelake.lake.record_tables import MESSAGES

    lake.create_table(MESSAGES.name, MESSAGES.schema)
    plan = skeleton(rows, seed)
    build.last = plan  # type: ignore[attr-defined]
    seqs = [0] * len(QUEUES)
    versions = [0] * len(QUEUES)
    landed = 0
    for i, (q, start, stop) in enumerate(batches(plan, batch_size)):
        table = batch_table(plan, start, stop, seqs[q] + 1)
        seqs[q] += stop - start
        versions[q] += 1
        staged = lake.stage(MESSAGES.name, table)
        lake.commit_staged(MESSAGES.name, staged, f"queuelake.drain/{QUEUES[q]}/0", versions[q])
        landed += stop - start
        yield i + 1, landed
