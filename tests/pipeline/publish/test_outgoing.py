"""The batch builder of outgoing messages against a plain, row-by-row statement of the wire format.

``Router.build`` is written for speed (one loop per batch, cached routes, hand-formatted ids); the
reference below says the same thing the obvious way. Any row, whatever headers, TTBR, delivery time
or routing it has, must give byte-identical headers, the same bodies and due times, the same tables
and the same undeliverable copies in the same order. No database: routing verdicts are preset.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from queuelake.config import from_dict
from queuelake.nsb import headers as hdr
from queuelake.nsb.times import format_time
from queuelake.nsb.timespan import timespan
from queuelake.pipeline.message_ids import NAMESPACE, message_id
from queuelake.pipeline.publish.routing import Router
from queuelake.transport.table_refs import queue_ref

NOW = dt.datetime(2026, 11, 24, 8, 0, 0, 123456, tzinfo=dt.timezone.utc)
SENT = format_time(NOW)
CFG = from_dict(
    {
        "transport": {"connection": "postgresql://unused/db"},
        "lake": {"root": "/unused"},
        "publish": {"endpoint": "Lakehouse", "outputs": ["out"]},
    },
    env={},
)
QUEUES = ["Billing", "Shipping", "Audit.Copy"]
EVENT = "Sales.OrderPlaced, Sales"


def router() -> Router:
    r = Router(CFG, machine="bench-host")
    for name in QUEUES:
        ref = queue_ref(name, CFG.transport)
        r.verdicts[(name, False)] = (ref, None)
        r.verdicts[(name, True)] = (ref, None)
    for delayed in (False, True):
        r.verdicts[("Nowhere", delayed)] = (None, "table does not exist")
        r.verdicts[(None, delayed)] = (None, "queue address is empty")
    # Billing twice: one copy per distinct queue
    r.subscribers_of[EVENT] = ["Billing", "Nowhere", "Shipping", "Billing"]
    r.subscribers_of["Other.Event, Other"] = []
    r.subscribers_of['Quoted"Type\n'] = ["Shipping"]
    r.frozen = True
    return r


def reference(r: Router, pipeline: str, rows: list[dict[str, Any]]) -> tuple[list[tuple], list[tuple]]:
    """Each row on its own: its routes, then per distinct queue one message with our headers over
    the row's own (theirs keep their place in the order, ours win)."""
    sent, lost = [], []
    for row in rows:
        body = row["body"].encode() if isinstance(row["body"], str) else row["body"]
        theirs = dict(row.get("headers") or [])
        deliver_at, delay = row.get("deliver_at"), None
        if deliver_at is not None:
            deliver_at = deliver_at if deliver_at.tzinfo else deliver_at.replace(tzinfo=dt.timezone.utc)
            delay = max(deliver_at, NOW)  # the copy's Due: deliver_at to the microsecond, or now once passed
        targets, bad = r.routes(None, row["intent"], row.get("destination"), row["message_type"], delay is not None)
        lost += [(row["key"], address, reason) for address, reason in bad]
        for target in targets.values():
            mid = str(uuid.uuid5(NAMESPACE, f"{pipeline}\n{row['key']}\n{target.canonical}"))
            headers = {
                **theirs,
                hdr.MESSAGE_ID: mid,
                hdr.MESSAGE_INTENT: row["intent"],
                hdr.ENCLOSED_MESSAGE_TYPES: row["message_type"],
                hdr.CONTENT_TYPE: theirs.get(hdr.CONTENT_TYPE) or "application/json",
                hdr.TIME_SENT: SENT,
                hdr.CONVERSATION_ID: row.get("conversation_id") or theirs.get(hdr.CONVERSATION_ID) or mid,
                hdr.CORRELATION_ID: row.get("correlation_id") or theirs.get(hdr.CORRELATION_ID) or mid,
                hdr.ORIGINATING_ENDPOINT: "Lakehouse",
                hdr.ORIGINATING_MACHINE: "bench-host",
                hdr.VERSION: theirs.get(hdr.VERSION) or "9.2.0",
            }
            if row.get("ttbr_ms") is not None:
                headers[hdr.TIME_TO_BE_RECEIVED] = timespan(int(row["ttbr_ms"]))
            if delay is not None:
                headers[hdr.DELIVER_AT] = format_time(deliver_at)
                headers[hdr.FORWARD_DESTINATION] = target.canonical
                table = target.delayed().canonical
            else:
                table = target.canonical
            ttbr = row.get("ttbr_ms") if delay is None else None  # a delayed copy keeps it in its headers only
            sent.append((table, orjson.dumps(headers).decode(), body, delay, ttbr))
    return sent, lost


def built(r: Router, pipeline: str, rows: list[dict[str, Any]]) -> tuple[list[tuple], list[tuple]]:
    out, lost = r.build(None, pipeline, rows, NOW, SENT)
    sent = [
        (table, m.headers, m.body, None, m.ttbr_ms) for table, (_, messages) in out.direct.items() for m in messages
    ]
    sent += [(table, h, b, due, None) for table, (_, items) in out.delayed.items() for h, b, due in items]
    assert out.copies == len(sent)
    assert all(m.id is None for _, messages in out.direct.values() for m in messages)  # the COPY makes one
    return sent, [(row["key"], address, reason) for row, address, reason in lost]


def by_table(sent: list[tuple]) -> list[tuple]:
    """The builder groups copies by table (the reference keeps row order): compare per table, in order."""
    return sorted(sent, key=lambda item: item[0])


texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
header_names = st.sampled_from(
    [hdr.CONTENT_TYPE, hdr.CONVERSATION_ID, hdr.CORRELATION_ID, hdr.VERSION, hdr.MESSAGE_ID, "Custom", "x-é"]
)
rows_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "key": texts,
            "intent": st.sampled_from(["Send", "Publish"]),
            "message_type": st.sampled_from([EVENT, "Other.Event, Other", 'Quoted"Type\n']),
            "destination": st.sampled_from([*QUEUES, "Nowhere", None]),
            "body": st.one_of(st.binary(max_size=8), texts, st.none()),
        },
        optional={
            "headers": st.lists(st.tuples(header_names, st.one_of(texts, st.none())), max_size=4),
            "ttbr_ms": st.one_of(st.none(), st.integers(0, 10 * 86_400_000)),
            "deliver_at": st.one_of(
                st.none(),
                st.datetimes(dt.datetime(2026, 1, 1), dt.datetime(2027, 12, 31)),
                st.datetimes(dt.datetime(2026, 1, 1), dt.datetime(2027, 12, 31), timezones=st.just(dt.timezone.utc)),
            ),
            "conversation_id": st.one_of(st.none(), texts),
            "correlation_id": st.one_of(st.none(), texts),
        },
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(rows_strategy)
def test_build_matches_the_row_by_row_reference(rows: list[dict[str, Any]]) -> None:
    r = router()
    want_sent, want_lost = reference(r, "Lakehouse/out", rows)
    got_sent, got_lost = built(r, "Lakehouse/out", rows)
    assert by_table(got_sent) == by_table(want_sent)
    assert got_lost == want_lost


def test_build_fans_an_event_out_once_per_distinct_queue_and_keeps_the_lost_copies() -> None:
    """The hand-written case the property covers at random, spelled out: one event, four
    subscriptions (one twice, one to a missing table): two copies, one undeliverable."""
    r = router()
    row = {"key": "k1", "intent": "Publish", "message_type": EVENT, "destination": None, "body": b"{}"}
    out, lost = r.build(None, "Lakehouse/out", [row], NOW, SENT)
    assert sorted(out.direct) == sorted(queue_ref(q, CFG.transport).canonical for q in ("Billing", "Shipping"))
    assert out.copies == 2
    assert [(address, reason) for _, address, reason in lost] == [("Nowhere", "table does not exist")]
    for table, (_, messages) in out.direct.items():
        (message,) = messages
        headers = orjson.loads(message.headers)
        assert headers[hdr.MESSAGE_ID] == message_id("Lakehouse/out", "k1", table)
        assert headers[hdr.CONVERSATION_ID] == headers[hdr.CORRELATION_ID] == headers[hdr.MESSAGE_ID]
        assert headers[hdr.TIME_SENT] == SENT


def test_a_rerun_batch_records_the_copies_its_own_attempt_found_undeliverable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A batch whose records were written and whose commit then failed is sent again by the next run:
    keyed by the batch alone, its records were the first attempt's, and a copy only the rerun found
    undeliverable (a refusal that depends on the data or the hour) was neither sent nor recorded (a
    review). Each copy is recorded once, whichever attempt found it."""
    from queuelake.lake import stage_tables
    from queuelake.lake.delta_rs.engine import DeltaRsEngine
    from queuelake.pipeline.publish.undeliverable import record_batch, undeliverable_record

    lake = DeltaRsEngine(str(tmp_path))
    lake.create_table(stage_tables.UNDELIVERABLE.name_for("scores"), stage_tables.UNDELIVERABLE.schema)
    now = dt.datetime(2026, 11, 30, tzinfo=dt.timezone.utc)

    def records(*keys: str) -> list[dict[str, Any]]:
        row = {"intent": "Send", "message_type": "Scores.Scored"}
        return [undeliverable_record({**row, "key": k}, "Billing", "refused", "r1:b0", now) for k in keys]

    appended = [record_batch(lake, "scores", "r1:b0", records(*keys)) for keys in (["a"], ["a", "b"], ["a", "b"])]
    table = lake.read_arrow(stage_tables.UNDELIVERABLE.name_for("scores"))
    assert sorted(table.column("key").to_pylist()) == ["a", "b"]  # b: the rerun's own refusal
    assert appended == [1, 1, 0]
