"""Replay and retry from the journal against real PostgreSQL, Spark and Delta files."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import os
import random
import subprocess
import sys
import time
import uuid
from contextlib import redirect_stdout
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from queuelake import cli
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.errors import QueuelakeError
from queuelake.lake.engines import open_lake
from queuelake.lake.reading import read_table
from queuelake.nsb import headers as hdr
from queuelake.nsb.retry import retry_headers, unique_message_id
from queuelake.nsb.timespan import timespan_ms
from queuelake.pipeline.replay.predicate import check_predicate
from queuelake.pipeline.replay.replayer import ReplayOptions
from queuelake.transport import db, installer, queues
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import queue_ref

from tests.helpers.publish import drain_all
from tests.helpers.stages import drain, replay

TIMEOUT = "System.TimeoutException"
DECLINED = "Billing.CardDeclinedException"
WHEN = dt.datetime(2026, 11, 2, 8, 30, tzinfo=dt.timezone.utc)
STRIPPED = {
    "NServiceBus.FailedQ",
    "NServiceBus.TimeOfFailure",
    "NServiceBus.ExceptionInfo.ExceptionType",
    "NServiceBus.ExceptionInfo.Message",
    "NServiceBus.ExceptionInfo.Source",
    "NServiceBus.ExceptionInfo.StackTrace",
    "NServiceBus.Retries",
    "NServiceBus.Retries.Timestamp",
    "ServiceControl.EditOf",
}


def make_config(uri: str, lake_root: Path, queues_: list[str]):
    return from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(lake_root), "engine": "delta-rs"},
            "drain": {"queues": queues_, "batch_size": 500},
        },
        env={},
    )


def install(cfg, extra: list[str]) -> None:
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=extra))


def send(cfg, queue: str, messages: list[OutgoingMessage]) -> None:
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref(queue, cfg.transport), messages)


def failed(message: OutgoingMessage, queue: str, exception: str, **extra: str) -> OutgoingMessage:
    copy = traffic.failed_copy(message, queue, exception, "it broke", WHEN)
    if not extra:
        return copy
    headers = hdr.decode_map(copy.headers)
    headers.update(extra)
    headers = {k: v for k, v in headers.items() if v != "<drop>"}
    return OutgoingMessage(hdr.encode(headers), copy.body, id=copy.id)


def sql(cfg, query: str) -> list[tuple]:
    with db.connect(cfg.transport) as conn:
        return conn.raw.execute(query).fetchall()


def run(cfg, spark, where: str, **kw) -> dict:
    return replay(cfg, spark, open_lake(cfg.lake, spark), ReplayOptions(predicate=where, **kw))


def lake_snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


# --- headers, ids, predicates (no database) -------------------------------------------------------


def test_unique_message_id_matches_servicecontrol() -> None:
    """The value in ServiceControl's own approval file (HeaderFilterTests.RemovesHeaders.approved.txt),
    a retried message's ServiceControl.Retry.UniqueMessageId = DeterministicGuid.MakeId(MessageId,
    ProcessingEndpoint)."""
    headers = {
        hdr.MESSAGE_ID: "caf68027-acce-4260-8442-ac6500e46afc",
        hdr.PROCESSING_ENDPOINT: "SeasNve.Market.Crm.PowerSupplySalesOrderManager.1.0",
    }
    assert unique_message_id(headers) == "a5f6da09-5f3f-5394-c09c-dffbe99c357a"
    # a retry that failed again keeps the id it was given
    assert unique_message_id({**headers, "ServiceControl.Retry.UniqueMessageId": "kept"}) == "kept"
    # no ProcessingEndpoint: the queue part of FailedQ
    by_queue = {hdr.MESSAGE_ID: "m", hdr.FAILED_QUEUE: "Sales@[dbo]@[nsb]"}
    assert unique_message_id(by_queue) == unique_message_id({hdr.MESSAGE_ID: "m", hdr.PROCESSING_ENDPOINT: "Sales"})


@settings(max_examples=300, deadline=None)
@given(message_id=st.text(), endpoint=st.text(min_size=1))
def test_unique_message_id_is_the_dotnet_guid_of_the_md5(message_id: str, endpoint: str) -> None:
    """The Guid is formatted by hand (speed): the same text as the uuid module's ``bytes_le`` form,
    the byte order .NET's ``new Guid(byte[])`` reads, for any text."""
    import hashlib
    import uuid

    try:
        data = f"{message_id}{endpoint}".encode()
    except UnicodeEncodeError:  # a lone surrogate: not text a header can hold (the journal refuses it)
        return
    digest = hashlib.md5(data, usedforsecurity=False).digest()
    headers = {hdr.MESSAGE_ID: message_id, hdr.PROCESSING_ENDPOINT: endpoint}
    assert unique_message_id(headers) == str(uuid.UUID(bytes_le=digest))


@settings(max_examples=300, deadline=None)
@given(name=st.text())
def test_name_uuid_is_uuid5(name: str) -> None:
    """Replay's row and message ids come from ``name_uuid``, formatted by hand: uuid5's text."""
    import uuid

    from queuelake.pipeline.message_ids import NAMESPACE, name_uuid

    try:
        expected = str(uuid.uuid5(NAMESPACE, name))
    except UnicodeEncodeError:
        return
    assert name_uuid(name) == expected


def test_retry_headers_strip_what_servicecontrol_strips() -> None:
    original = {
        hdr.MESSAGE_ID: "m1",
        hdr.PROCESSING_ENDPOINT: "Billing",
        **{name: "x" for name in STRIPPED},
        "NServiceBus.ExceptionInfo.Data.Custom": "x",
        "ServiceControl.Retry.StagingId": "s",
        "NServiceBus.Retriesque": "prefix match, as HeaderFilter does",
        "NServiceBus.Timeout.Expire": "2026-11-29 10:00:00:000000 Z",  # in ServiceControl's approved test
        "Custom": "kept",
    }
    out = retry_headers(original, "error")
    assert set(out) == {
        hdr.MESSAGE_ID,
        hdr.PROCESSING_ENDPOINT,
        "Custom",
        "ServiceControl.Retry.UniqueMessageId",
        "ServiceControl.Retry.AcknowledgementQueue",
    }
    assert out["ServiceControl.Retry.AcknowledgementQueue"] == "error"
    assert "ServiceControl.Retry.AcknowledgementQueue" not in retry_headers(original, None)


_NAMES = st.sampled_from(
    [
        hdr.MESSAGE_ID,
        hdr.PROCESSING_ENDPOINT,
        hdr.FAILED_QUEUE,
        hdr.REPLY_TO_ADDRESS,
        hdr.TIME_TO_BE_RECEIVED,
        "NServiceBus.ExceptionInfo.StackTrace",
        "NServiceBus.Retries",
        "ServiceControl.Retry.StagingId",
        "ServiceControl.Retry.UniqueMessageId",
        "ServiceControl.Retry.AcknowledgementQueue",
        "queuelake.Replay.Id",
        "queuelake.Replay.Source",
        "queuelake.Replay.SourceId",
        "queuelake.Replay.OriginalMessageId",
        "Custom",
        'with "quotes" \\ and \n',
    ]
)
_VALUES = st.one_of(st.none(), st.sampled_from(["", "Billing", "00:10:00", "m-1", "q@machine"]), st.text(max_size=8))


@settings(max_examples=200, deadline=None)
@given(
    maps=st.lists(st.one_of(st.none(), st.lists(st.tuples(_NAMES, _VALUES), max_size=8)), min_size=1, max_size=6),
    kinds=st.lists(st.sampled_from(["retry", "redirect", "replay"]), min_size=6, max_size=6),
    message_ids=st.lists(st.one_of(st.none(), st.just("drained-id")), min_size=6, max_size=6),
    ack=st.one_of(st.none(), st.just("Acks")),
    queue=st.sampled_from(["error", '"public"."error"', "[dbo].[error]@[db]", 'we\\ird "q"\n', "é"]),
)
def test_batch_headers_are_the_per_message_rules(maps, kinds, message_ids, ack, queue) -> None:
    """The bulk header rewrite gives each message exactly what the per-message rules give
    (``retry_headers``; a replay's new MessageId), whatever the map holds: repeated names (the last
    wins), names the replay sets itself, null values, text JSON must escape, no headers at all; and
    whatever the journal's queue name holds (a canonical name's quotes go into Replay.Source)."""
    import pyarrow as pa
    from queuelake.config import from_dict as config_from
    from queuelake.pipeline.message_ids import name_uuid
    from queuelake.pipeline.replay import messages
    from queuelake.pipeline.replay.rows import HEADERS_TYPE, Row

    cfg = config_from({"transport": {"connection": "postgresql://x@localhost/y"}, "lake": {"root": "/l"}}, env={})
    target = queue_ref("Billing", cfg.transport)
    rows = [
        Row(queue, i, f"row-{i}", message_ids[i], "T", kinds[i], "Billing", "f", i, target=target)
        for i in range(len(maps))
    ]
    content = pa.table(
        {"headers": pa.array(maps, HEADERS_TYPE), "body": pa.array([b"b%d" % i for i in range(len(maps))])}
    )
    built = messages.build("r-1", rows, content, ack)
    assert built.rows == rows
    for row, message, pairs in zip(rows, built.messages.outgoing(), maps, strict=True):
        assert message.id == name_uuid(f"replay-row\nr-1\n{queue}\n{row.seq}\n{row.id}")
        original = dict(pairs or [])
        if row.kind == "replay":
            expected = dict(original)
            expected[hdr.MESSAGE_ID] = name_uuid(f"replay\nr-1\n{row.message_id}\n{target.canonical}")
            if row.message_id is not None:
                expected["queuelake.Replay.OriginalMessageId"] = row.message_id
        else:
            carried = original.get(hdr.MESSAGE_ID) or row.message_id  # the unique id is of what it carries
            expected = retry_headers({**original, hdr.MESSAGE_ID: carried} if carried else original, ack)
        expected |= {"queuelake.Replay.Id": "r-1", "queuelake.Replay.Kind": row.kind}
        expected["queuelake.Replay.Source"] = f"{queue}@{row.seq}"
        expected["queuelake.Replay.SourceId"] = row.id
        assert orjson.loads(message.headers) == expected
        assert message.ttbr_ms == timespan_ms(original.get(hdr.TIME_TO_BE_RECEIVED))
        assert message.body == b"b%d" % row.seq


def test_timespans() -> None:
    assert timespan_ms("00:00:10") == 10_000
    assert timespan_ms("1.00:00:00") == 86_400_000
    assert timespan_ms("00:00:01.5000000") == 1500
    assert timespan_ms("10675199.02:48:05.4775807") is None  # TimeSpan.MaxValue: no expiry
    assert timespan_ms("-00:00:10") is None and timespan_ms("00:00:00") is None
    assert timespan_ms("soon") is None and timespan_ms(None) is None


@pytest.mark.parametrize(
    ("predicate", "problem"),
    [
        ("x = 1; DROP TABLE y", "second statement"),
        ("exception_type = 'a' ; SELECT 1", "second statement"),
        ("seq IN (SELECT seq FROM messages)", "subquery"),
        ("rand() < 0.5", "random"),
        ("time_of_failure > current_timestamp - INTERVAL 1 DAY", "time-dependent"),
        ("reflect('java.lang.System', 'exit', '0') IS NULL", "Java"),
        ("", "required"),
        ("exception_type = 'unterminated", "unterminated"),
    ],
)
def test_what_is_not_a_predicate_is_refused(predicate: str, problem: str) -> None:
    with pytest.raises(QueuelakeError, match=problem):
        check_predicate(predicate)


def test_quoted_text_is_not_code() -> None:
    assert check_predicate("exception_message = 'a; SELECT rand()' -- ; select") == (
        "exception_message = 'a; SELECT rand()' -- ; select"
    )


def test_cli_refuses_a_second_statement(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["replay", "-c", "conf/local.yaml", "--where", "x = 1; DROP TABLE y"])
    out = capsys.readouterr()
    summary = json.loads(out.out.strip().splitlines()[-1])
    assert code == 1 and summary["status"] == "failed"
    assert "single boolean expression" in summary["error"] and "second statement" in summary["error"]


# --- against PostgreSQL, Spark and Delta -----------------------------------------------------------


@pytest.fixture
def failures(fresh_pg_uri: str, tmp_path: Path):
    """An error queue holding messages failed from Billing and Shipping with two exception types, a few
    that cannot be retried, an audit queue, all drained into the journal."""
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["error", "audit"])
    install(cfg, ["Billing", "Shipping", "TestEndpoint"])
    orig = list(traffic.order_events(60, seed=11))
    errors = []
    for i, m in enumerate(orig[:40]):
        queue = "Billing" if i % 2 else "Shipping"
        extra = {}
        if i % 5 == 0:
            extra = {"NServiceBus.Retries": "3", "NServiceBus.Retries.Timestamp": "x", "ServiceControl.EditOf": "y"}
        if i % 4 == 0:
            extra[hdr.TIME_TO_BE_RECEIVED] = "00:10:00"
        errors.append(failed(m, queue, TIMEOUT if i < 30 else DECLINED, **extra))
    unsendable = {
        "missing table": failed(orig[40], "NoSuchQueue", TIMEOUT),
        "malformed": failed(orig[41], '"un"terminated', TIMEOUT),
        "no FailedQ": failed(orig[42], "Billing", TIMEOUT, **{hdr.FAILED_QUEUE: "<drop>"}),
    }
    audited = [traffic.audit_copy(m, "Billing", WHEN, 30) for m in orig[45:55]]
    send(cfg, "error", errors + list(unsendable.values()))
    send(cfg, "audit", audited)
    lake = open_lake(cfg.lake)
    assert drain(cfg, lake)["landed"] == len(errors) + len(unsendable) + len(audited)
    return cfg, errors, unsendable, audited


@pytest.mark.parametrize("from_rows", [None, 1], ids=["driver", "executors"])
def test_retry_round_trip(failures, spark, from_rows: int | None) -> None:
    cfg, errors, unsendable, _ = failures
    cfg.replay.executors_from_rows = from_rows  # 1: every batch is sent by a Spark task
    summary = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    assert summary["status"] == "ok", summary
    rid = summary["replay_id"]
    assert rid and summary["selected"] == 33 and summary["rows_sent"] == 30
    assert summary["destinations"] == {'"public"."Billing"': 15, '"public"."Shipping"': 15}
    assert summary["sent_by_destination"] == summary["destinations"]
    reasons = summary["skipped_reasons"]
    assert summary["skipped"] == 3 and len(reasons) == 3, reasons
    assert any("NoSuchQueue" in r and "does not exist" in r for r in reasons)
    assert any("un" in r and "not a queue address" in r for r in reasons)
    assert any("no NServiceBus.FailedQ" in r for r in reasons)

    sent = {hdr.decode_map(m.headers)[hdr.MESSAGE_ID]: m for m in errors[:30]}
    with db.connect(cfg.transport) as conn:
        now = queues.db_utc_now(conn)
    for queue in ("Billing", "Shipping"):
        got = drain_all(cfg, queue)
        assert len(got) == 15
        for r in got:
            headers = hdr.decode_map(r.headers)
            original = hdr.decode_map(sent[headers[hdr.MESSAGE_ID]].headers)
            assert original[hdr.FAILED_QUEUE] == queue
            assert r.body == sent[headers[hdr.MESSAGE_ID]].body  # the same bytes
            expected = {k: v for k, v in original.items() if k not in STRIPPED}
            expected["ServiceControl.Retry.UniqueMessageId"] = unique_message_id(original)
            expected["queuelake.Replay.Id"] = rid
            expected["queuelake.Replay.Kind"] = "retry"
            assert headers.pop("queuelake.Replay.Source").startswith('"public"."error"@')
            assert headers.pop("queuelake.Replay.SourceId")
            assert headers == expected, set(headers) ^ set(expected)
            assert not STRIPPED & set(headers)
            if hdr.TIME_TO_BE_RECEIVED in original:  # Expires from the TTBR, by the database clock
                assert r.expires is not None and abs((r.expires - now).total_seconds() - 600) < 120
            else:
                assert r.expires is None

    again = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7, replay_id=rid)
    assert again["status"] == "ok" and again["rows_sent"] == 0 and again["total_sent"] == 30, again
    assert again["batches_done_before"] == again["batches"] == 5
    assert drain_all(cfg, "Billing") == [] and drain_all(cfg, "Shipping") == []

    lake_root = Path(cfg.lake.root)
    replays = read_table(str(lake_root / "replays")).to_pylist()
    assert sorted((r["replay_id"], r["rows_sent"], r["status"]) for r in replays) == [(rid, 0, "ok"), (rid, 30, "ok")]
    first = next(r for r in replays if r["rows_sent"] == 30)
    assert first["predicate"] == f"exception_type = '{TIMEOUT}'" and first["journal_version"] is not None
    assert dict(first["destinations"]) == {'"public"."Billing"': 15, '"public"."Shipping"': 15}
    assert first["skipped"] == 3 and len(dict(first["skipped_reasons"])) == 3
    skipped = read_table(str(lake_root / "replay_skipped")).to_pylist()
    assert len(skipped) == 3 and {s["replay_id"] for s in skipped} == {rid}
    runs = [r for r in read_table(str(lake_root / "runs")).to_pylist() if r["command"] == "replay"]
    assert sum(r["published"] for r in runs) == 30

    with pytest.raises(QueuelakeError, match="different --where"):
        run(cfg, spark, f"exception_type = '{DECLINED}'", replay_id=rid)


def test_a_row_recorded_as_skipped_stays_unsent_when_its_queue_appears(failures, spark) -> None:
    """The skip record is final for the replay id: a rerun whose batches are still to send (as after a
    stop right after the plan) sends every other row and still not the one recorded as skipped,
    although its queue exists by then."""
    cfg, *_ = failures
    first = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    rid = first["replay_id"]
    assert first["rows_sent"] == 30 and first["skipped"] == 3, first
    with db.connect(cfg.transport) as conn:  # the batches as if never sent: only the plan stays
        conn.raw.execute(
            "DELETE FROM queuelake_publish_ledger WHERE pipeline = %s AND batch_key NOT LIKE 'plan:%%'",
            (f"replay/{rid}",),
        )
        conn.commit()
    assert len(drain_all(cfg, "Billing")) == len(drain_all(cfg, "Shipping")) == 15
    install(cfg, ["NoSuchQueue"])
    again = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7, replay_id=rid)
    assert again["status"] == "ok" and again["rows_sent"] == 30 and again["skipped"] == 3, again
    assert again["skipped_reasons"]["recorded as skipped by an earlier run of this replay"] == 1
    assert drain_all(cfg, "NoSuchQueue") == []
    assert len(drain_all(cfg, "Billing")) == len(drain_all(cfg, "Shipping")) == 15


@pytest.mark.parametrize("raised", ["OSError", "DeltaError"])
def test_a_replay_whose_records_fail_after_sending_names_its_id_and_its_rerun_sends_nothing(
    failures, spark, monkeypatch: pytest.MonkeyPatch, raised: str
) -> None:
    """Object storage reset the PUT of the ``replays`` commit after every batch went out: the command
    failed "unexpected", with no replay id, and the same command again sent every message a second
    time (a review). The summary now names the id; its rerun sends nothing and writes the records.
    deltalake's own ``DeltaError`` (not an ``OSError``: "Error getting list response body") too (a review)."""
    from deltalake.exceptions import DeltaError
    from queuelake.lake.delta_rs import engine

    cfg, *_ = failures
    real = engine.exactly_once
    error = {"OSError": OSError, "DeltaError": DeltaError}[raised]

    def reset(table_uri, table, *args, **kwargs):  # type: ignore[no-untyped-def]
        if table == "replays":
            raise error("Generic S3 error: Error after 0 retries: connection reset by peer")
        return real(table_uri, table, *args, **kwargs)

    monkeypatch.setattr(engine, "exactly_once", reset)
    first = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    assert first["status"] == "failed" and first["rows_sent"] == 30, first
    rid = first["replay_id"]
    assert f"--replay-id {rid}" in first["error"] and "connection reset" in first["error"], first
    monkeypatch.setattr(engine, "exactly_once", real)
    again = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7, replay_id=rid)
    assert again["status"] == "ok" and again["rows_sent"] == 0, again
    assert len(drain_all(cfg, "Billing")) == len(drain_all(cfg, "Shipping")) == 15
    replays = read_table(str(Path(cfg.lake.root) / "replays")).to_pylist()
    assert [r["replay_id"] for r in replays] == [rid], replays


def test_a_stop_whose_error_replaced_it_after_sending_stays_a_stop(failures, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second SIGTERM lands in a batch's send and the send's error replaces it (the stop is that error's
    context, as when a Spark job is cancelled): the replay is interrupted, its records are written, and
    the summary the stop carries names the replay and what it sent. It said failed, ``unexpected``, and
    the stop was lost (a review of the change that kept the replay id on any error)."""
    from queuelake import stopping
    from queuelake.pipeline.replay import executors

    cfg, *_ = failures
    real, calls = executors.send_built, []

    def send_built(conn, key, prepared):  # type: ignore[no-untyped-def]
        calls.append(key)
        if len(calls) == 2:
            try:
                raise stopping.Interrupted("SIGTERM")
            except stopping.Interrupted:
                raise RuntimeError("Job 3 cancelled as part of cancellation of all jobs") from None
        return real(conn, key, prepared)

    monkeypatch.setattr(executors, "send_built", send_built)
    with pytest.raises(RuntimeError) as raised:
        run(cfg, None, f"exception_type = '{TIMEOUT}'", batch_size=7)
    stop = stopping.stop_within(raised.value)
    assert stop is not None, "the stop was lost"
    done = stopping.done_before(stop)  # flat, as a first signal's summary (the command adds its status)
    assert done["rows_sent"] == 7 and done["replay_id"] and "status" not in done, done
    replays = read_table(str(Path(cfg.lake.root) / "replays")).to_pylist()
    assert [r["replay_id"] for r in replays] == [done["replay_id"]], replays


@pytest.mark.parametrize("order", ["unsendable-first", "sendable-first"])
def test_two_rows_of_one_queue_and_seq_are_each_sent_or_skipped(
    fresh_pg_uri: str, tmp_path: Path, spark, order
) -> None:
    """The error table dropped and re-created between two drains: two journal rows share (queue, seq),
    one whose FailedQ has no table, one to Billing. Keyed by (queue, seq), the skip took one of the
    two at random: the other was sent or not, and neither sent nor recorded (two reviews). The row id
    tells them apart: one sent, one skipped."""
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["error"])
    install(cfg, ["Billing"])
    orig = list(traffic.order_events(2, seed=5))
    lives = [failed(orig[0], "NoSuchQueue", TIMEOUT), failed(orig[1], "Billing", TIMEOUT)]
    if order == "sendable-first":
        lives.reverse()
    lake = open_lake(cfg.lake)
    for life in lives:
        with db.connect(cfg.transport) as conn:
            conn.raw.execute('DROP TABLE IF EXISTS "public"."error"')
            conn.commit()
        install(cfg, ["Billing"])
        send(cfg, "error", [life])
        assert drain(cfg, lake)["landed"] == 1
    assert lake.read_arrow("messages", columns=["seq"]).column("seq").to_pylist() == [1, 1]
    summary = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    assert summary["rows_sent"] == 1 and summary["skipped"] == 1, summary
    assert len(drain_all(cfg, "Billing")) == 1


@pytest.mark.parametrize("from_rows", [None, 1], ids=["driver", "executors"])
def test_a_queue_table_refusing_its_rows_is_skipped_and_the_others_are_sent(failures, spark, from_rows) -> None:
    """A destination table that refuses the rows themselves (a CHECK constraint; the catalog cannot tell
    beforehand) failed every batch holding a row for it, on every rerun, and the other destinations got
    nothing. Now its rows in the batches left are recorded as skipped with the database's reason, and
    the batches go on without them; the record is final for the replay id, as every skip is."""
    cfg, *_ = failures
    cfg.replay.executors_from_rows = from_rows  # 1: every batch is sent by a Spark task
    with db.connect(cfg.transport) as conn:
        conn.raw.execute('ALTER TABLE "public"."Shipping" ADD CONSTRAINT "no_bodies" CHECK (body IS NULL)')
        conn.commit()
    first = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    assert first["status"] == "ok" and first["failed_batches"] == [] and first["rows_sent"] == 15, first
    assert first["destinations"] == {'"public"."Billing"': 15} and first["skipped"] == 3 + 15, first
    refused = [r for r in first["skipped_reasons"] if "no_bodies" in r]
    assert len(refused) == 1 and first["skipped_reasons"][refused[0]] == 15, first["skipped_reasons"]
    assert len(drain_all(cfg, "Billing")) == 15 and drain_all(cfg, "Shipping") == []
    skipped = read_table(str(Path(cfg.lake.root) / "replay_skipped")).to_pylist()
    recorded = [s for s in skipped if "no_bodies" in s["reason"]]
    assert len(recorded) == 15 and {s["destination"] for s in recorded} == {"Shipping"}
    with db.connect(cfg.transport) as conn:
        conn.raw.execute('ALTER TABLE "public"."Shipping" DROP CONSTRAINT "no_bodies"')
        conn.commit()
    again = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7, replay_id=first["replay_id"])
    assert again["status"] == "ok" and again["rows_sent"] == 0, again
    assert drain_all(cfg, "Shipping") == []


def test_a_destination_dropped_during_the_replay_is_skipped_and_the_others_are_sent(
    failures, spark, monkeypatch
) -> None:
    """A destination table dropped after the replay planned it (an endpoint taken down mid-run): its COPY
    failed with "does not exist", and so did every batch holding a row for it; the other destination got
    nothing of those batches (a review). Its rows in the batches left are recorded as skipped, saying
    why, and the batches go on without them."""
    from queuelake.transport import binary_copy

    cfg, *_ = failures
    real, gone = binary_copy.send, []

    def send_then_drop(conn, ref, messages, *args, **kwargs):  # type: ignore[no-untyped-def]
        if ref.canonical == '"public"."Shipping"' and not gone:
            with db.connect(cfg.transport) as other:
                other.raw.execute('DROP TABLE "public"."Shipping"')
                other.commit()
            gone.append(ref.canonical)
        return real(conn, ref, messages, *args, **kwargs)

    monkeypatch.setattr(binary_copy, "send", send_then_drop)
    first = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    assert first["status"] == "ok" and first["failed_batches"] == [] and first["rows_sent"] == 15, first
    assert first["skipped"] == 3 + 15 and len(drain_all(cfg, "Billing")) == 15, first
    dropped = [r for r in first["skipped_reasons"] if r.startswith("the table was dropped during the run")]
    assert len(dropped) == 1 and first["skipped_reasons"][dropped[0]] == 15, first["skipped_reasons"]


def _replay_stopped_during_the_tasks(cfg, spark, monkeypatch) -> tuple[dict, list[int]]:  # type: ignore[no-untyped-def]
    """The replay of the timeouts from Spark tasks, a stop asked while each Spark job runs (the first
    SIGTERM): its summary, and the units each job was given."""
    from queuelake import stopping
    from queuelake.pipeline.replay import executors

    real, passes = executors.send_units, []

    def send_units(session, job, units):  # type: ignore[no-untyped-def]
        passes.append(len(units))
        outcomes = real(session, job, units)
        stopping.request()
        return outcomes

    monkeypatch.setattr(executors, "send_units", send_units)
    try:
        return run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7), passes
    finally:
        stopping.reset()


def test_a_stop_asked_while_spark_tasks_send_starts_no_second_pass(failures, spark, monkeypatch) -> None:
    """From Spark tasks, a refused table's batches are sent again by a second Spark job: a stop asked
    while the first ran (the first SIGTERM) must end the replay "interrupted" without it (a review)."""
    cfg, *_ = failures
    cfg.replay.executors_from_rows = 1
    with db.connect(cfg.transport) as conn:
        conn.raw.execute('ALTER TABLE "public"."Shipping" ADD CONSTRAINT "no_bodies" CHECK (body IS NULL)')
        conn.commit()
    summary, passes = _replay_stopped_during_the_tasks(cfg, spark, monkeypatch)
    assert passes == [5] and summary["status"] == "interrupted", (passes, summary)
    assert drain_all(cfg, "Billing") == []  # every batch held a Shipping row: nothing sent before the stop
    monkeypatch.undo()
    again = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7, replay_id=summary["replay_id"])
    assert again["status"] == "ok" and again["rows_sent"] == 15, again


def test_a_stop_asked_while_spark_tasks_send_cancels_them(failures, spark) -> None:
    """A first SIGTERM while Spark tasks sent a replay let them send every batch (a review: 80 batches
    after the signal): the tasks never see the command's stop. They are cancelled now; the summary counts
    what the ledger holds once they have ended, and a rerun with the replay id sends the rest, once."""
    import threading

    from queuelake import stopping

    cfg, *_ = failures
    cfg.replay.executors_from_rows = 1
    with db.connect(cfg.transport) as conn:  # each batch's COPY takes 0.2 s
        conn.raw.execute(
            "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(0.2); RETURN NULL; END $$"
        )
        for queue in ("Billing", "Shipping"):
            conn.raw.execute(
                f'CREATE TRIGGER slow AFTER INSERT ON "public"."{queue}" FOR EACH STATEMENT EXECUTE FUNCTION slow()'
            )
        conn.commit()
    ledger_rows = "SELECT count(*) FROM queuelake_publish_ledger WHERE pipeline LIKE 'replay/%'"

    def stop_after_the_first_batches() -> None:
        deadline = time.monotonic() + 120
        while sql(cfg, ledger_rows)[0][0] < 4 and time.monotonic() < deadline:  # the plan's row and 3 batches
            time.sleep(0.1)
        stopping.request()  # the scheduler's SIGTERM

    asking = threading.Thread(target=stop_after_the_first_batches, daemon=True)
    asking.start()
    try:
        summary = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=1)
    finally:
        asking.join()
        stopping.reset()
    sent = sql(cfg, ledger_rows)[0][0] - 1
    assert summary["status"] == "interrupted" and 3 <= sent < 30, (sent, summary)
    assert summary["rows_sent"] == sent, ("what went, from the ledger", summary)
    again = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=1, replay_id=summary["replay_id"])
    assert again["status"] == "ok" and again["rows_sent"] == 30 - sent, again
    got = [hdr.decode_map(m.headers)[hdr.MESSAGE_ID] for q in ("Billing", "Shipping") for m in drain_all(cfg, q)]
    assert len(got) == len(set(got)) == 30


def test_a_stop_asked_after_spark_tasks_sent_everything_leaves_the_replay_ok(failures, spark, monkeypatch) -> None:
    """The stop check between the Spark passes ended a replay "interrupted" when nothing was left to
    send (no table refused a row), and logged that a rerun sends the rest (a review)."""
    cfg, *_ = failures
    cfg.replay.executors_from_rows = 1
    summary, _ = _replay_stopped_during_the_tasks(cfg, spark, monkeypatch)
    assert summary["status"] == "ok" and summary["rows_sent"] == 30, summary


def test_a_stop_now_between_batches_keeps_what_was_sent_in_the_summary(failures, spark, monkeypatch) -> None:
    """A second signal (``Interrupted`` raised in the send) ended a replay with "interrupted" alone: no
    count of the batches sent before it, though they were in the ledger and the queues (a review)."""
    from queuelake import stopping

    cfg, *_ = failures
    _stop_at_batch(monkeypatch, 3)
    with pytest.raises(stopping.Interrupted) as stopped:
        run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    done = stopping.done_before(stopped.value)
    assert done["rows_sent"] == 14 and done["batches_sent"] == 2, done
    assert len(drain_all(cfg, "Billing")) + len(drain_all(cfg, "Shipping")) == 14


def test_a_second_stop_while_the_records_are_written_keeps_the_counts(failures, spark, monkeypatch) -> None:
    """A second signal during the replay's final records (after the first ended the sending) left a summary
    of "interrupted" alone: no replay id, no counts (a review). They go with the stop."""
    from queuelake import stopping
    from queuelake.pipeline.replay import replayer

    def stopped(self, result):  # type: ignore[no-untyped-def]
        raise stopping.Interrupted("stopped by signal SIGINT")

    cfg, *_ = failures
    monkeypatch.setattr(replayer.Replayer, "record", stopped)
    with pytest.raises(stopping.Interrupted) as raised:
        run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    done = stopping.done_before(raised.value)
    assert done["replay_id"] and done["rows_sent"] == 30 and "status" not in done, done


def test_a_stop_asked_during_the_selection_sends_nothing(failures, spark, monkeypatch) -> None:
    """A Ctrl-C during a replay's selection (seconds over thousands of journal files) was honoured only
    by a second signal, after the selection (a review): asked while the files are read, the replay stops
    there; asked once they are read, before the first batch. Nothing sent, nothing in the ledger."""
    from queuelake import stopping
    from queuelake.lake import round_files

    cfg, *_ = failures
    real = round_files.read_piece

    def stopped_while_reading(*args, **kwargs):  # type: ignore[no-untyped-def]
        stopping.request()
        return real(*args, **kwargs)

    ledger = "SELECT count(*) FROM queuelake_publish_ledger"
    before = sql(cfg, ledger)
    monkeypatch.setattr(round_files, "read_piece", stopped_while_reading)
    try:
        with pytest.raises(stopping.Interrupted, match="while selecting"):
            run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    finally:
        stopping.reset()
    monkeypatch.undo()
    from queuelake.pipeline.replay import selection

    real_planned = selection.Selection.planned

    def stopped_after_reading(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        stopping.request()
        return real_planned(self, *args, **kwargs)

    monkeypatch.setattr(selection.Selection, "planned", stopped_after_reading)
    try:
        summary = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    finally:
        stopping.reset()
    assert summary["status"] == "interrupted" and summary["rows_sent"] == 0 and summary["selected"] == 33, summary
    assert sql(cfg, ledger) == before and drain_all(cfg, "Billing") == [] and drain_all(cfg, "Shipping") == []


def test_a_connection_lost_mid_replay_is_the_queue_databases_failure(failures, spark, monkeypatch) -> None:
    """A replay whose session was terminated mid-send said ``error_kind`` ``replay`` (null in its own
    summary): the batch's error is the queue database's, ``transport``, as publish says (a review)."""
    from queuelake.errors import TransportError
    from queuelake.pipeline.replay import executors

    cfg, *_ = failures
    real, calls = executors.send_built, {"n": 0}

    def lost_on_the_second(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:
            raise TransportError("ledger_insert failed: terminating connection due to administrator command")
        return real(*args, **kwargs)

    monkeypatch.setattr(executors, "send_built", lost_on_the_second)
    summary = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    assert summary["status"] == "failed" and summary["error_kind"] == "transport", summary
    assert "terminating connection" in summary["error"]


def _stop_at_batch(monkeypatch: pytest.MonkeyPatch, call: int, killed: bool = False) -> None:
    """The replay's ``call``-th batch raises a second signal's ``Interrupted`` as it goes (``killed``: the run
    writes nothing of its records, as a SIGKILL leaves it)."""
    from queuelake import stopping
    from queuelake.pipeline.replay import executors, replayer

    real, calls = executors.send_built, {"n": 0}

    def stopped_there(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == call:
            raise stopping.Interrupted("stopped by signal SIGTERM")
        return real(*args, **kwargs)

    monkeypatch.setattr(executors, "send_built", stopped_there)
    if killed:
        monkeypatch.setattr(replayer.Replayer, "record", lambda self, result: None)


def _replay_stopped_at(cfg, errors, spark, monkeypatch, call: int, killed: bool = False) -> str:  # type: ignore[no-untyped-def]
    """A retry stopped as its ``call``-th batch goes (``killed``: having written nothing of its records, as a
    SIGKILL leaves it), then one journal row erased (its purge deletes every earlier version's files):
    the replay id."""
    from queuelake import stopping
    from queuelake.pipeline.store.erase import erase

    _stop_at_batch(monkeypatch, call, killed)
    with pytest.raises(stopping.Interrupted) as stopped:
        run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    monkeypatch.undo()
    summary = stopping.done_before(stopped.value)
    if not killed:  # what the stopped run sent per destination, beside what it planned (a review read one as the other)
        sent = summary["sent_by_destination"]
        assert sum(sent.values()) == summary["rows_sent"] < sum(summary["destinations"].values()), summary
    gone = hdr.decode_map(errors[1].headers)[hdr.MESSAGE_ID]
    assert erase(cfg, open_lake(cfg.lake), f"message_id = '{gone}'", dry_run=False)["tables"]["messages"]["rows"] == 1
    return str(summary["replay_id"])


def test_a_replay_planned_before_an_erase_says_it_cannot_resume(failures, spark, monkeypatch) -> None:
    """An erase's purge deletes the files of every version before it: a replay interrupted before the
    erase, rerun with its id, failed with a bare FileNotFoundError ("unexpected") on the plan's version
    (a review). It now says why, and what to do."""
    from queuelake.errors import ReplayError

    cfg, errors, *_ = failures
    replay_id = _replay_stopped_at(cfg, errors, spark, monkeypatch, 2)
    with pytest.raises(ReplayError, match=f"replay {replay_id} cannot resume: the journal's files at version"):
        run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7, replay_id=replay_id)


def test_a_replay_killed_before_its_lineage_then_an_erase_says_which_batches_are_unnamed(
    failures, spark, monkeypatch
) -> None:
    """A replay killed (SIGKILL) after sending batches and before writing their lineage, then an erase:
    its rerun cannot cut the plan any more, and said the lineage named the rows it sent, which it did not
    (a review: a new replay then sent them again). It says which batches are unnamed and how their
    copies are marked."""
    from queuelake.errors import ReplayError
    from queuelake.nsb.retry import REPLAY_ID

    cfg, errors, *_ = failures
    replay_id = _replay_stopped_at(cfg, errors, spark, monkeypatch, 3, killed=True)
    with pytest.raises(ReplayError) as refused:
        run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7, replay_id=replay_id)
    said = str(refused.value)
    assert "2 batch(es) it sent (0, 1) are NOT in replay_lineage" in said, said
    assert f"{REPLAY_ID}: {replay_id}" in said and "replay_lineage names their rows" not in said, said


def test_a_killed_replay_whose_destination_is_gone_at_its_rerun_names_every_row_it_sent(
    failures, spark, monkeypatch, fresh_pg_uri
) -> None:
    """A replay killed after sending two batches and before writing their lineage; one destination's
    table renamed before the rerun: the lineage left out that destination's copies for good, for it was
    written from the rerun's verdicts (a review). It names every row the killed run sent, and not the
    rows a run recorded as skipped."""
    import psycopg
    import pyarrow.compute as pc
    from queuelake import stopping
    from queuelake.pipeline.replay import lineage

    cfg, *_ = failures
    _stop_at_batch(monkeypatch, 3, killed=True)  # killed before its lineage
    with pytest.raises(stopping.Interrupted) as stopped:
        run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    monkeypatch.undo()
    replay_id = str(stopping.done_before(stopped.value)["replay_id"])
    with psycopg.connect(fresh_pg_uri, autocommit=True) as conn:
        conn.execute('ALTER TABLE "Billing" RENAME TO "Billing_moved"')

    again = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7, replay_id=replay_id)
    assert again["batches_done_before"] == 2 and again["rows_sent"] == 8, again  # Shipping's rows of batches 2-4
    # the plan counts the rows sent where they went: the renamed table's 7 were left out (a review)
    assert again["destinations"] == {'"public"."Shipping"': 15, '"public"."Billing"': 7}, again
    assert again["to_send"] == 22 and again["sent_by_destination"] == {'"public"."Shipping"': 8}, again

    rows = lineage.lineage_of(open_lake(cfg.lake), replay_id)
    first_two = rows.filter(pc.less(rows["batch"], 2))
    assert first_two.num_rows == 14
    assert sorted(first_two["destination"].to_pylist()) == ['"public"."Billing"'] * 7 + ['"public"."Shipping"'] * 7
    assert rows.num_rows == 14 + 8  # nothing of the rows skipped (the missing tables, the renamed one since)


def test_a_rerun_with_no_row_left_to_send_starts_no_spark_job(failures, spark, monkeypatch, fresh_pg_uri) -> None:
    """A rerun whose rows left are all skipped (their tables renamed since) started a Spark job of empty
    tasks when the plan's rows reached ``replay.executors_from_rows`` (a review): the rows left to send
    decide, and none are left."""
    import psycopg
    from queuelake import stopping

    cfg, *_ = failures
    _stop_at_batch(monkeypatch, 2)
    with pytest.raises(stopping.Interrupted) as stopped:
        run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    monkeypatch.undo()
    replay_id = str(stopping.done_before(stopped.value)["replay_id"])
    with psycopg.connect(fresh_pg_uri, autocommit=True) as conn:
        for queue in ("Billing", "Shipping"):
            conn.execute(f'ALTER TABLE "{queue}" RENAME TO "{queue}_moved"')

    cfg.replay.executors_from_rows = 1
    again = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7, replay_id=replay_id)
    assert again["status"] == "ok" and again["rows_sent"] == 0 and again["batches_done_before"] == 1, again
    assert "executors" not in again["seconds_by_step"], again  # no Spark job
    assert again["to_send"] == 7 == sum(again["destinations"].values()), again  # the batch sent before


def test_the_ack_queue_is_checked_and_written_as_its_canonical_address(failures) -> None:
    """``--ack-queue`` was written as given and unchecked: an endpoint that handles a retry sends
    ServiceControl.Retry.Successful there, and a missing table failed every retried message again (a
    review). It is resolved as ``--to`` is, and its table must exist (a dry run sends nothing)."""
    from queuelake.commands.replay import _ack_queue
    from queuelake.context import open_database
    from queuelake.errors import TransportError

    cfg, *_ = failures
    database = open_database(cfg)
    assert _ack_queue(database, "Billing", dry_run=False) == '"public"."Billing"'
    with pytest.raises(TransportError, match='queue table "Particular"."ServiceControl" does not exist'):
        _ack_queue(database, "Particular.ServiceControl", dry_run=False)
    assert _ack_queue(database, "Nowhere", dry_run=True) == '"public"."Nowhere"'


def test_a_mistyped_to_is_refused_before_anything_is_recorded(failures, tmp_path: Path) -> None:
    """``--to Sales.Tset``: every row was recorded skipped ("queue table does not exist"), for good under the
    replay id, and the command said "ok" (a review). Its table must exist, as ``--ack-queue``'s."""
    from tests.helpers.cli import run_cli

    cfg, *_ = failures
    conf = tmp_path / "replay.json"
    conf.write_text(
        json.dumps({"transport": {"connection": "${QUEUELAKE_CONNECTION}"}, "lake": {"root": str(cfg.lake.root)}})
    )
    where = f"exception_type = '{TIMEOUT}'"
    typo = run_cli(
        ["replay", "-c", str(conf), "--where", where, "--to", "Biling"], cfg.transport.connection, cwd=tmp_path
    )
    assert typo.returncode == 1 and 'queue table "public"."Biling" does not exist' in typo.summary["error"], typo
    assert not (Path(cfg.lake.root) / "replay_skipped").exists(), "rows recorded skipped for a typo"
    unknown = run_cli(
        ["replay", "-c", str(conf), "--where", where, "--to", "Billing", "--replay-id", "replay-typo", "--limit", "2"],
        cfg.transport.connection,
        cwd=tmp_path,
    )
    assert unknown.returncode == 0 and unknown.summary["rows_sent"] == 2, unknown
    assert "replay-typo: no replay of this id in the ledger: a new replay under it" in unknown.stderr


def test_a_finished_replay_run_again_after_an_erase_has_nothing_to_do(failures, spark) -> None:
    """A replay whose every batch was sent, run again with its id after an erase purged its plan's
    version: it failed "cannot resume", and a scheduled retry went red for good (two reviews). It says
    every batch was sent and sends nothing."""
    from queuelake.pipeline.store.erase import erase

    cfg, errors, *_ = failures
    first = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7)
    assert first["status"] == "ok" and first["rows_sent"] > 0, first
    replay_id = first["replay_id"]
    gone = hdr.decode_map(errors[1].headers)[hdr.MESSAGE_ID]
    assert erase(cfg, open_lake(cfg.lake), f"message_id = '{gone}'", dry_run=False)["tables"]["messages"]["rows"] == 1
    again = run(cfg, spark, f"exception_type = '{TIMEOUT}'", batch_size=7, replay_id=replay_id)
    assert again["status"] == "ok" and again["rows_sent"] == 0, again
    assert again["batches_done_before"] == again["batches"] == first["batches"], again
    assert again["total_sent"] == first["rows_sent"], again


def test_a_replay_after_an_erase_rewrote_the_journal_file(failures, spark) -> None:
    """An erase (or retention) rewrites the journal file it deletes rows from, and delta-rs stores its
    text columns as ``string_view``: every replay then failed (``equal(string, string_view)`` has no
    kernel) until a compaction merged the file away (found by a review)."""
    from queuelake.pipeline.store.erase import erase

    cfg, errors, *_ = failures
    gone = hdr.decode_map(errors[1].headers)[hdr.MESSAGE_ID]
    assert erase(cfg, open_lake(cfg.lake), f"message_id = '{gone}'", dry_run=False)["tables"]["messages"]["rows"] == 1
    summary = run(cfg, spark, f"exception_type = '{TIMEOUT}' AND queue = '\"public\".\"error\"'", batch_size=7)
    assert summary["status"] == "ok" and summary["rows_sent"] == 29, summary
    got = [hdr.decode_map(r.headers)[hdr.MESSAGE_ID] for q in ("Billing", "Shipping") for r in drain_all(cfg, q)]
    assert len(got) == len(set(got)) == 29 and gone not in got


def test_dry_run_writes_nothing(failures, spark) -> None:
    cfg, *_ = failures
    lake_root = Path(cfg.lake.root)
    before = lake_snapshot(lake_root)
    ledger_before = sql(cfg, "SELECT count(*) FROM queuelake_publish_ledger")
    summary = run(cfg, spark, "exception_type IS NOT NULL", dry_run=True)
    assert summary["status"] == "ok" and summary["dry_run"] is True, summary
    assert summary["destinations"] == {'"public"."Billing"': 20, '"public"."Shipping"': 20}
    types = summary["message_types"]['"public"."Billing"']
    assert types == {"Sales.Messages.Events.OrderPlaced": 20}
    assert summary["skipped"] == 3
    assert lake_snapshot(lake_root) == before, "a dry run wrote to the lake"
    assert sql(cfg, "SELECT count(*) FROM queuelake_publish_ledger") == ledger_before
    assert drain_all(cfg, "Billing") == [] and drain_all(cfg, "Shipping") == []


def test_a_retry_to_a_queue_this_job_drains_is_sent_with_a_warning(failures, spark, caplog) -> None:
    """A FailedQ the job drains (the shipped configs drain ``Sales``, the queue their failed messages
    name): the retry is sent, and the log says the next drain takes it back into the lake unless its
    endpoint receives it first (a review found it counted retried with no word said)."""
    cfg, *_ = failures
    queues = ["error", "audit", "Shipping", "Billing"]  # two FailedQs drained: one line names both (were one each)
    drained = dataclasses.replace(cfg, drain=dataclasses.replace(cfg.drain, queues=queues))
    with caplog.at_level("WARNING", logger="queuelake"):
        summary = run(drained, spark, "exception_type IS NOT NULL", dry_run=True)
    assert summary["destinations"] == {'"public"."Billing"': 20, '"public"."Shipping"': 20}, summary
    warned = [r.getMessage() for r in caplog.records if "drained by this job" in r.getMessage()]
    assert len(warned) == 1 and "2 destination(s)" in warned[0] and "'Billing', 'Shipping'" in warned[0], warned


def test_spark_refuses_what_is_not_a_boolean_over_messages(failures, spark) -> None:
    cfg, *_ = failures
    with pytest.raises(QueuelakeError, match="not a predicate over messages"):
        run(cfg, spark, "no_such_column = 1", dry_run=True)
    with pytest.raises(QueuelakeError, match="not a predicate|not a boolean"):
        run(cfg, spark, "seq", dry_run=True)
    with pytest.raises(QueuelakeError, match="not a predicate over messages"):
        run(cfg, spark, "count(*) > 1", dry_run=True)
    # a trailing word was the column's alias: the predicate before it ran, wider than typed (a review)
    for cut_short in (f"exception_type = '{TIMEOUT}' AND", f"exception_type = '{TIMEOUT}' Billing"):
        with pytest.raises(QueuelakeError, match="not a predicate over messages") as refused:
            run(cfg, spark, cut_short, dry_run=True)
        # placed where the user typed: at the end of line 1, not at the wrapper's ")" on line 3 (a review)
        assert f"at or near the end of --where. SQLSTATE: 42601 (line 1, pos {len(cut_short)})" in str(refused.value)
    commented = run(cfg, spark, f"exception_type = '{TIMEOUT}' -- the timeouts", dry_run=True)
    assert commented["selected"] == run(cfg, spark, f"exception_type = '{TIMEOUT}'", dry_run=True)["selected"] > 0


def test_audited_messages_replayed_to_a_test_endpoint(failures, spark) -> None:
    cfg, _, _, audited = failures
    summary = run(cfg, spark, 'queue = \'"public"."audit"\'', to="TestEndpoint", limit=6)
    assert summary["status"] == "ok" and summary["rows_sent"] == 6, summary
    got = drain_all(cfg, "TestEndpoint")
    originals = {hdr.decode_map(m.headers)[hdr.MESSAGE_ID]: m for m in audited}
    assert len(got) == 6
    for r in got:
        headers = hdr.decode_map(r.headers)
        source = originals[headers.pop("queuelake.Replay.OriginalMessageId")]
        assert r.body == source.body
        assert headers.pop("queuelake.Replay.Kind") == "replay"
        assert headers.pop("queuelake.Replay.Id") == summary["replay_id"]
        headers.pop("queuelake.Replay.Source")
        headers.pop("queuelake.Replay.SourceId")
        new_id = headers.pop(hdr.MESSAGE_ID)
        original = hdr.decode_map(source.headers)
        assert new_id != original.pop(hdr.MESSAGE_ID)  # a replay is a new message (outbox dedup)
        assert headers == original
    # without --to: back to the endpoint that processed them (NServiceBus.ProcessingEndpoint)
    rest = run(cfg, spark, "processing_started IS NOT NULL")
    assert rest["destinations"] == {'"public"."Billing"': 10} and rest["rows_sent"] == 10


class _VirtualClock:
    """The replay's pacing clock: work takes no time on it, and a sleep moves it on exactly, so the pace is
    checked as arithmetic rather than as a wall-clock rate on a busy machine."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _paced_failures(fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int):  # type: ignore[no-untyped-def]
    """``n`` messages failed from Billing, drained; the replay's pacing clock a virtual one."""
    from queuelake.pipeline.replay import sending

    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["error"])
    install(cfg, ["Billing"])
    send(cfg, "error", [failed(m, "Billing", TIMEOUT) for m in traffic.order_events(n, seed=5)])
    drain(cfg, open_lake(cfg.lake))
    clock = _VirtualClock()
    monkeypatch.setattr(sending, "time", clock)
    return cfg, clock


def test_max_rate_holds(fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch) -> None:
    """--max-rate: each batch's commit waits until its rows are due at the rate, so the queue sees the rows
    arrive on pace. On the virtual clock the replay waits, before each commit, exactly until
    (rows sent) / rate; the rows are all sent once."""
    n, rate = 400, 100.0
    cfg, clock = _paced_failures(fresh_pg_uri, tmp_path, monkeypatch, n)
    summary = run(cfg, spark, "failed_queue = 'Billing'", max_rate=rate)
    assert summary["rows_sent"] == n, summary
    assert sql(cfg, 'SELECT count(*) FROM "public"."Billing"') == [(n,)]
    # batches of rate x PACED_BATCH_SECONDS rows, each held until its last row is due: the waits add up to
    # n / rate on a clock where nothing else takes time, and the rate reported is the rate asked for
    assert len(clock.slept) > 1 and all(wait > 0 for wait in clock.slept), clock.slept
    assert clock.now == pytest.approx(n / rate)
    assert summary["rate"] == pytest.approx(rate, abs=0.1), summary


def test_max_rate_paces_from_the_first_batch_ready(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that took long to read and build does not make the next ones catch up: the pace's clock
    starts when the first batch is ready (the first batches of a resumed run committed back to back, 6,000
    messages in 0.42 s at 4,000 msg/s: a review). Each commit waits a batch's worth of time."""
    from queuelake.pipeline.replay import executors
    from queuelake.pipeline.replay.plan import PACED_BATCH_SECONDS

    n, rate = 200, 100.0
    cfg, clock = _paced_failures(fresh_pg_uri, tmp_path, monkeypatch, n)
    real = executors.send_built

    def slow_first(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not clock.slept:
            clock.now += 3.0  # the first batch's read and build, on the pace's clock
        return real(*args, **kwargs)

    monkeypatch.setattr(executors, "send_built", slow_first)
    summary = run(cfg, spark, "failed_queue = 'Billing'", max_rate=rate)
    assert summary["rows_sent"] == n, summary
    assert clock.slept == pytest.approx([PACED_BATCH_SECONDS] * round(n / rate / PACED_BATCH_SECONDS)), clock.slept


KILL_SCRIPT = """
import sys
from queuelake.config import load
from queuelake.lake.engines import open_lake
from queuelake.context import open_database
from queuelake.pipeline.replay.replayer import ReplayOptions, replay
from queuelake.spark import get_spark
cfg = load(sys.argv[1])
spark = get_spark(cfg.spark)
rate = float(sys.argv[4]) if len(sys.argv) > 4 else None
options = ReplayOptions(predicate=sys.argv[2], replay_id=sys.argv[3], batch_size=1000, max_rate=rate)
print(replay(cfg, open_database(cfg), spark, open_lake(cfg.lake, spark), options)["status"])
"""


def kill_setup(uri: str, tmp_path: Path, n: int, seed: int, replay_id: str, **extra: dict) -> tuple:
    """n failed messages drained into a fresh journal, a config file for the kill script (``extra``
    sections added) and its command line: (cfg, messages, env, args)."""
    lake_root = tmp_path / "lake"
    cfg = make_config(uri, lake_root, ["error"])
    install(cfg, ["Billing", "Shipping"])
    messages = [
        failed(m, "Billing" if i % 2 else "Shipping", TIMEOUT) for i, m in enumerate(traffic.order_events(n, seed=seed))
    ]
    send(cfg, "error", messages)
    assert drain(cfg, open_lake(cfg.lake))["landed"] == n
    conf = tmp_path / "replay.yaml"
    job = {
        "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
        "lake": {"root": str(lake_root), "engine": "delta-rs"},
        "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": "1"}},
    }
    conf.write_text(json.dumps({**job, **extra}))
    env = {**os.environ, "QUEUELAKE_CONNECTION": uri}
    args = [sys.executable, "-c", KILL_SCRIPT, str(conf), f"exception_type = '{TIMEOUT}'", replay_id]
    return cfg, messages, env, args


def assert_each_sent_once(cfg, messages: list[OutgoingMessage]) -> None:
    """Billing and Shipping hold each failed message's retry exactly once."""
    want: dict[str, set[str]] = {q: set() for q in ("Billing", "Shipping")}
    for m in messages:
        h = hdr.decode_map(m.headers)
        want[h[hdr.FAILED_QUEUE]].add(h[hdr.MESSAGE_ID])
    for queue, ids in want.items():
        got = [hdr.decode_map(r.headers)[hdr.MESSAGE_ID] for r in drain_all(cfg, queue)]
        assert len(got) == len(set(got)), f"{queue}: {len(got) - len(set(got))} duplicates"
        assert set(got) == ids, f"{queue}: {len(ids - set(got))} missing"


@pytest.mark.slow
def test_exactly_once_replay_under_sigkill(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    cfg, messages, env, args = kill_setup(fresh_pg_uri, tmp_path, 50_000, 3, "kill-test")
    rng = random.Random(5)
    kills = attempts = 0
    while kills < 6 and attempts < 20:
        attempts += 1
        e = dict(env)
        if attempts % 2 == 0:  # at the commit itself: just before it, just after it
            point = rng.choice(["before_replay_commit", "after_replay_commit"])
            e["QUEUELAKE_TEST_KILL_AT"] = f"{point}:{rng.randint(1, 4)}"
            proc = subprocess.run(args, env=e, capture_output=True, timeout=600)
            kills += proc.returncode == -9
            continue
        # paced, so that a kill at a random instant lands mid-replay however fast the machine is: Spark
        # start and the selection take a few seconds, then at most ~1,000 messages a second go out
        paced = [*args, "1000"]
        proc = subprocess.Popen(paced, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(4.0, 10.0))
        if proc.poll() is None:
            proc.kill()
            kills += 1
        proc.wait()
    assert kills >= 6, f"only {kills} kills landed"
    ledger = sql(cfg, "SELECT count(*) FROM queuelake_publish_ledger WHERE pipeline = 'replay/kill-test'")[0][0]
    assert 1 < ledger < 51, f"the kills should have left the replay part-way: {ledger} ledger rows (plan + batches)"
    final = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert final.returncode == 0 and final.stdout.strip().endswith("ok"), final.stderr[-3000:]
    assert_each_sent_once(cfg, messages)


@pytest.mark.slow
def test_exactly_once_replay_from_executors_under_kills(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """Spark tasks killed at their commits (just before it, just after it: an executor dying), then the
    driver killed at random instants, then a clean rerun: each message reaches its queue once."""
    replay_section = {"replay": {"executors_from_rows": 1}}
    cfg, messages, env, args = kill_setup(fresh_pg_uri, tmp_path, 20_000, 8, "kill-executors", **replay_section)
    rng = random.Random(11)
    for _ in range(4):  # a task's worker SIGKILLed at its commit: the job fails, the run says so
        point = f"{rng.choice(['before', 'after'])}_replay_commit:{rng.randint(1, 3)}"
        proc = subprocess.run(args, env={**env, "QUEUELAKE_TEST_KILL_AT": point}, capture_output=True, text=True)
        assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] in ("ok", "failed"), proc.stderr[-3000:]
    for _ in range(2):  # the driver killed at a random instant
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(3.0, 9.0))
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    ledger = sql(cfg, "SELECT count(*) FROM queuelake_publish_ledger WHERE pipeline = 'replay/kill-executors'")[0][0]
    assert 1 < ledger, "the kills should have left batches in the ledger"
    final = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert final.returncode == 0 and final.stdout.strip().endswith("ok"), final.stderr[-3000:]
    assert_each_sent_once(cfg, messages)


def test_cli_prints_the_replay_id(failures, spark) -> None:
    cfg, *_ = failures
    conf = Path(cfg.lake.root).parent / "cli.yaml"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": cfg.transport.connection},
                "lake": {"root": cfg.lake.root, "engine": "delta-rs"},
            }
        )
    )
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = cli.main(["replay", "-c", str(conf), "--where", f"exception_type = '{DECLINED}'"])
    summary = orjson.loads(buf.getvalue().strip().splitlines()[-1])
    assert code == 0 and summary["command"] == "replay" and summary["rows_sent"] == 10, summary
    assert summary["replay_id"].startswith("replay-")
    assert uuid.UUID(summary["replay_id"][-6:].rjust(32, "0"))  # a generated id ends in random hex


def test_journal_rows_at_the_edges_of_their_types_are_retried(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """A failed message whose times sit at .NET's edges (TimeOfFailure at DateTime.MaxValue, TimeSent
    at MinValue, TimeToBeReceived at TimeSpan.MaxValue) and whose row's Expires was infinity or a
    year past 9999 (clamped in the journal): the retry is a faithful send, selected by those very
    values, and the round never fails (issue 30)."""
    import psycopg

    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["error"])
    install(cfg, ["Billing"])
    base = failed(next(traffic.order_events(1, seed=3)), "Billing", TIMEOUT)
    edges = {
        hdr.TIME_OF_FAILURE: "9999-12-31 23:59:59:999999 Z",
        hdr.TIME_SENT: "0001-01-01 00:00:00:000000 Z",
        hdr.PROCESSING_STARTED: "9999-12-31 23:59:59:999999 Z",
        hdr.TIME_TO_BE_RECEIVED: "10675199.02:48:05.4775807",
    }
    headers = {**hdr.decode_map(base.headers), **edges}
    ids = {expires: str(uuid.uuid4()) for expires in ("infinity", "20000-01-01 00:00:00", "9999-12-31 23:59:59.999999")}
    with psycopg.connect(fresh_pg_uri, autocommit=True) as conn:
        for expires, row_id in ids.items():
            row_headers = {**headers, hdr.MESSAGE_ID: row_id}
            conn.execute(
                'INSERT INTO "public"."error" (id, expires, headers, body) VALUES (%s, CAST(%s AS timestamp), %s, %s)',
                (row_id, expires, hdr.encode(row_headers), base.body),
            )
    assert drain(cfg, open_lake(cfg.lake))["landed"] == 3
    summary = run(cfg, spark, "time_of_failure = timestamp'9999-12-31 23:59:59.999999' AND raw_expires IS NOT NULL")
    assert summary["status"] == "ok" and summary["selected"] == 2 and summary["rows_sent"] == 2, summary
    got = {hdr.decode_map(r.headers)[hdr.MESSAGE_ID]: r for r in drain_all(cfg, "Billing")}
    assert set(got) == {ids["infinity"], ids["20000-01-01 00:00:00"]}
    for received in got.values():
        sent = hdr.decode_map(received.headers)
        assert (
            sent[hdr.TIME_SENT] == edges[hdr.TIME_SENT]
            and sent[hdr.PROCESSING_STARTED] == edges[hdr.PROCESSING_STARTED]
        )
        assert hdr.TIME_OF_FAILURE not in sent and received.body == base.body
        assert received.expires is None  # TimeSpan.MaxValue: no expiry, as NServiceBus reads it


def test_the_lineage_names_the_message_id_each_copy_is_sent_with() -> None:
    """A replay's copy gets a new MessageId (``messages.build``), a retry's or redirect's keeps its own: the
    lineage's ``sent_message_id`` is what the copy carries, null kinds and ids included."""
    import pyarrow as pa
    from queuelake.pipeline.message_ids import name_uuid
    from queuelake.pipeline.replay import lineage

    kinds, ids = ["retry", "replay", None, "replay", "redirect"], ["a", None, "c", "d", None]
    planned = pa.table({"kind": kinds, "message_id": ids, "target": ["T1", "T2", "T3", "T4", "T5"]})
    assert lineage.sent_ids("r-1", planned).to_pylist() == [
        "a",
        name_uuid("replay\nr-1\nNone\nT2"),
        "c",
        name_uuid("replay\nr-1\nd\nT4"),
        None,
    ]
    only_retries = planned.filter(pa.array([True, False, True, False, True]))
    assert lineage.sent_ids("r-1", only_retries).to_pylist() == ["a", "c", None]


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("limit", 10**20, "--limit must be 0 or more, at most 9,223,372,036,854,775,807"),
        ("limit", -1, "--limit must be 0 or more"),
        ("max_rate", float("nan"), "--max-rate must be a positive number"),
        ("max_rate", float("inf"), "--max-rate must be a positive number"),
        ("max_rate", 0.0, "--max-rate must be a positive number"),
    ],
)
def test_an_option_out_of_its_range_is_an_arguments_error(option: str, value: object, said: str) -> None:
    """``--limit 99999999999999999999``, ``--max-rate nan`` and ``1e400`` ended as ``unexpected`` (a review)."""
    import re

    from queuelake.errors import ArgumentError
    from queuelake.pipeline.replay.plan import ReplayOptions

    with pytest.raises(ArgumentError, match=re.escape(said)):
        ReplayOptions(predicate="exception_type = 'X'", **{option: value}).check()  # type: ignore[arg-type]
