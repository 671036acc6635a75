"""Drain against real PostgreSQL and real Delta files (delta-rs engine, no Spark needed)."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import orjson
import psycopg
import pyarrow as pa
import pytest
from queuelake.commands.demo import traffic
from queuelake.config import Config, from_dict
from queuelake.errors import ConfigError
from queuelake.lake.engines import open_lake
from queuelake.lake.reading import read_table
from queuelake.nsb import headers as hdr
from queuelake.transport import db, queues, schema
from queuelake.transport.embedded import odbc_from_uri
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import queue_ref

from tests.helpers.cli import run_cli
from tests.helpers.drain import (
    claim_count,
    commit_spacing,
    install,
    journal,
    lock_sessions_ended_at_batch,
    make_config,
    queue_depth,
    seed_ids,
    write_config,
)
from tests.helpers.kills import end_sessions, wait_for_no_drain
from tests.helpers.stages import drain

REPO = Path(__file__).resolve().parents[3]


# --- outcomes and decoding ------------------------------------------------------------------------


def test_drain_lands_expires_and_quarantines(fresh_pg_uri: str, tmp_path: Path) -> None:
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales", "error", "audit"])
    install(cfg)
    sales, error, audit = (queue_ref(q, cfg.transport) for q in ("Sales", "error", "audit"))
    sent = dt.datetime(2026, 11, 2, 8, 30, 0, 123456, tzinfo=dt.timezone.utc)
    good = list(traffic.order_events(20, seed=3))
    big = OutgoingMessage(good[0].headers.replace(good[0].id, str(uuid.uuid4())), os.urandom(10 * 1024 * 1024))
    null_body = OutgoingMessage(hdr.encode({hdr.MESSAGE_ID: "null-body"}), None)
    empty_body = OutgoingMessage(hdr.encode({hdr.MESSAGE_ID: "empty-body"}), b"")
    no_headers_id = str(uuid.uuid4())
    no_headers = OutgoingMessage("", b"{}", id=no_headers_id)
    expired = OutgoingMessage(hdr.encode({hdr.MESSAGE_ID: "expired"}), b"gone", ttbr_ms=-60_000)
    malformed = {
        kind: OutgoingMessage(raw, b"kept", id=str(uuid.uuid4())) for kind, raw in traffic.MALFORMED_HEADERS.items()
    }
    failed = traffic.failed_copy(good[1], "Billing", "System.InvalidOperationException", "Card declined", sent)
    audited = traffic.audit_copy(good[2], "Billing", sent, 42)
    with db.connect(cfg.transport) as conn:
        queues.send(conn, sales, [*good, big, null_body, empty_body, no_headers, expired, *malformed.values()])
        queues.send(conn, error, [failed])
        queues.send(conn, audit, [audited])
        conn.commit()

    summary = drain(cfg, open_lake(cfg.lake))
    assert summary["status"] == "ok", summary
    n_sales = len(good) + 5 + len(malformed)
    assert summary["dequeued"] == n_sales + 2
    assert summary["expired"] == 1 and summary["quarantined"] == len(malformed)

    rows = {r["id"]: r for r in journal(tmp_path / "lake").to_pylist()}
    assert len(rows) == n_sales + 2
    for m in good:
        r = rows[m.id]
        assert r["outcome"] == "landed" and r["body"] == m.body and r["queue"] == '"public"."Sales"'
        assert r["message_type"] == "Sales.Messages.Events.OrderPlaced"
        assert r["enclosed_message_types"][1].startswith("Sales.Messages.Events.IOrderEvent")
        assert r["message_intent"] == "Publish" and r["content_type"] == "application/json"
        assert r["time_sent"].tzinfo is not None
        assert dict(r["headers"]) == orjson.loads(m.headers)
    by_mid = {r["message_id"]: r for r in rows.values() if r["message_id"]}
    assert by_mid["null-body"]["body"] is None
    assert by_mid["empty-body"]["body"] == b""
    assert rows[no_headers_id]["outcome"] == "landed" and rows[no_headers_id]["message_id"] == no_headers_id
    assert len([r for r in rows.values() if r["body"] is not None and len(r["body"]) == 10 * 1024 * 1024]) == 1
    exp = [r for r in rows.values() if r["outcome"] == "expired"]
    assert len(exp) == 1 and exp[0]["body"] is None and exp[0]["headers"] is None and exp[0]["expires"] is not None
    for kind, m in malformed.items():
        r = rows[m.id]
        assert r["outcome"] == "quarantined", kind
        assert r["raw_headers"] == m.headers and r["error"] and r["body"] == b"kept"
    err = rows[failed.id]
    assert err["failed_queue"] == "Billing" and err["exception_type"] == "System.InvalidOperationException"
    assert err["exception_message"] == "Card declined" and err["time_of_failure"] == sent
    aud = rows[audited.id]
    assert aud["processing_endpoint"] == "Billing" and aud["processing_started"] == sent
    assert aud["processing_ended"] - aud["processing_started"] == dt.timedelta(milliseconds=42)
    assert queue_depth(cfg, "Sales") == 0
    runs = read_table(str(tmp_path / "lake" / "runs")).to_pylist()
    assert {r["queue"] for r in runs} == {'"public"."Sales"', '"public"."error"', '"public"."audit"'}
    assert sum(r["dequeued"] for r in runs) == n_sales + 2


@pytest.mark.parametrize("receive", ["psycopg", "adbc", "pyodbc"])
def test_text_that_is_not_utf8_is_quarantined_not_a_blocked_queue(
    more_pg_databases, tmp_path: Path, receive: str
) -> None:
    """A SQL_ASCII database keeps whatever bytes another program wrote as text. psycopg and ADBC
    hand such rows to the journal, which quarantines them with their bytes shown escaped, while the
    rows around them land. (Through psycopg, building the received batch raised on them: the receive
    rolled back, and the same rows failed every run after.) psqlodbc asks for UTF8, which PostgreSQL
    refuses to send these bytes as: that drain fails, naming the queue and the reason, and loses
    nothing."""
    uri = more_pg_databases("sql_ascii", "ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    cfg = make_config(uri, tmp_path / "lake", ["Sales"], batch_size=50)
    install(cfg)
    good = list(traffic.order_events(40, seed=5))
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref("Sales", cfg.transport), good[:20])
    bad = {str(uuid.uuid4()): raw for raw in ("\\377", "\\355\\240\\200", "\\303")}  # 0xFF, CESU-8 D800, cut
    with psycopg.connect(uri, autocommit=True) as c:
        for row_id, raw in bad.items():  # E'' octal escapes: the bytes themselves, as another program wrote them
            headers = f"""E'{{"a": "x{raw}"}}'"""
            c.execute(f"""INSERT INTO "public"."Sales" (id, headers, body) VALUES ('{row_id}', {headers}, 'b')""")
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref("Sales", cfg.transport), good[20:])
    transport = {"connection": uri if receive != "pyodbc" else odbc_from_uri(uri)}
    if receive == "pyodbc":
        transport["driver"] = "pyodbc"
    cfg = from_dict(
        {
            "transport": transport,
            "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
            "drain": {"queues": ["Sales"], "batch_size": 50, "receive_driver": receive},
        },
        env={},
    )

    summary = drain(cfg, open_lake(cfg.lake))
    if receive == "pyodbc":
        assert summary["status"] == "failed", summary
        (result,) = summary["queues"]
        assert '"public"."Sales"' in result["error"] and "invalid byte sequence" in result["error"], result
        landed = journal(tmp_path / "lake").num_rows if summary["dequeued"] else 0
        assert landed == summary["dequeued"] and landed + queue_depth(cfg, "Sales") == 43  # nothing lost
        return
    assert summary["status"] == "ok", summary
    assert (summary["landed"], summary["quarantined"]) == (40, 3), summary
    rows = {r["id"]: r for r in journal(tmp_path / "lake").to_pylist()}
    assert {m.id for m in good} <= {i for i, r in rows.items() if r["outcome"] == "landed"}
    shown = {row_id: rows[row_id]["raw_headers"] for row_id in bad}
    assert all(rows[row_id]["outcome"] == "quarantined" and rows[row_id]["error"] for row_id in bad)
    assert set(shown.values()) == {'{"a": "x\\xff"}', '{"a": "x\\xed\\xa0\\x80"}', '{"a": "x\\xc3"}'}, shown
    assert queue_depth(cfg, "Sales") == 0


def drain_logged(cfg: object, caplog: pytest.LogCaptureFixture, level: int) -> dict:
    """A drain whose queuelake log records at ``level`` and above land in ``caplog`` (the logger
    does not propagate to the root)."""
    logger = logging.getLogger("queuelake")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(level, logger="queuelake"):
            return drain(cfg, open_lake(cfg.lake))  # type: ignore[attr-defined]
    finally:
        logger.removeHandler(caplog.handler)


def comparable(row: dict) -> dict:
    """A journal row without what differs between two sends of one message (``expires`` is the send
    time plus its time to be received), map entries in key order."""
    headers = None if row["headers"] is None else sorted(row["headers"])
    return {**row, "headers": headers, "expires": row["expires"] is not None}


def test_every_receive_driver_builds_the_same_journal(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ADBC hands a batch over as Arrow; psycopg and pyodbc hand over Python rows, turned into Arrow
    before the same journal builder (native header decode included) runs. The same messages received
    through each give the same journal rows: maps, typed columns, outcomes and reasons. ``adbc-chunked``
    receives each batch in record batches of about 1 KB (``RECEIVE_CHUNK_BYTES``), so that the
    journal is built from columns of many chunks, as from a large batch. No batch may need the
    builder's safety net (bisecting a batch whose build failed), which would hide a build that
    mishandles such columns."""
    sent = dt.datetime(2026, 11, 2, 8, 30, 0, 123456, tzinfo=dt.timezone.utc)
    good = list(traffic.order_events(30, seed=7))
    messages = [
        *good,
        traffic.failed_copy(good[1], "Billing", "System.InvalidOperationException", "Card declined", sent),
        traffic.audit_copy(good[2], "Billing", sent, 42),
        OutgoingMessage(hdr.encode({hdr.MESSAGE_ID: "expired"}), b"gone", ttbr_ms=-60_000, id=str(uuid.uuid4())),
        OutgoingMessage("", b"{}", id=str(uuid.uuid4())),
        *(OutgoingMessage(raw, b"kept", id=str(uuid.uuid4())) for raw in traffic.MALFORMED_HEADERS.values()),
    ]
    journals = {}
    for receive in ("adbc", "adbc-chunked", "psycopg", "pyodbc"):
        queue = f"Sales_{receive.replace('-', '_')}"
        cfg = make_config(fresh_pg_uri, tmp_path / receive, [queue], batch_size=20)
        install(cfg)
        with db.connect(cfg.transport) as conn:
            queues.send(conn, queue_ref(queue, cfg.transport), messages)
            conn.commit()
        transport = {"connection": fresh_pg_uri if receive != "pyodbc" else odbc_from_uri(fresh_pg_uri)}
        if receive == "pyodbc":
            transport["driver"] = "pyodbc"
        cfg = from_dict(
            {
                "transport": transport,
                "lake": {"root": str(tmp_path / receive), "engine": "delta-rs"},
                "drain": {"queues": [queue], "batch_size": 20, "receive_driver": receive.split("-")[0]},
            },
            env={},
        )
        with monkeypatch.context() as patch:
            if receive == "adbc-chunked":
                patch.setattr(queues, "RECEIVE_CHUNK_BYTES", 1024)
                with db.connect(cfg.transport, driver="adbc") as conn:  # the setting takes: many chunks
                    chunked = queues.receive_batch_arrow(conn, queue_ref(queue, cfg.transport), 20)
                    conn.rollback()  # the rows stay for the drain
                assert chunked.num_rows == 20 and chunked["body"].num_chunks > 5, chunked["body"].num_chunks
            summary = drain_logged(cfg, caplog, logging.WARNING)
        assert summary["status"] == "ok" and summary["dequeued"] == len(messages), summary
        assert not [r.getMessage() for r in caplog.records if "isolating the rows" in r.getMessage()], receive
        rows = journal(tmp_path / receive).drop_columns(["queue", "batch_id", "drained_at"]).to_pylist()
        journals[receive] = sorted(rows, key=lambda r: r["seq"])
    assert journals["adbc"][0]["message_type"] == "Sales.Messages.Events.OrderPlaced"
    assert {r["outcome"] for r in journals["adbc"]} == {"landed", "expired", "quarantined"}
    for receive in ("adbc-chunked", "psycopg", "pyodbc"):
        for ours, theirs in zip(journals["adbc"], journals[receive], strict=True):
            ours, theirs = comparable(ours), comparable(theirs)
            assert ours == theirs, receive


def test_budgets_and_rerun(fresh_pg_uri: str, tmp_path: Path) -> None:
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales"], batch_size=100)
    install(cfg)
    ids = seed_ids(cfg, "Sales", 1000)
    lake = open_lake(cfg.lake)
    first = drain(cfg, lake, max_messages=250)
    assert first["dequeued"] == 250
    assert queue_depth(cfg, "Sales") == 750
    second = drain(cfg, lake)
    assert second["dequeued"] == 750 and second["queues"][0]["backlog_left"] == 0
    landed = journal(tmp_path / "lake")
    assert sorted(landed["id"].to_pylist()) == sorted(ids)


def test_a_commit_interval_bounds_the_journal_commits_by_time(fresh_pg_uri: str, tmp_path: Path) -> None:
    """``drain.commit_interval_seconds``: the batches claimed within an interval go in one journal
    commit, so a run's commits are at most one per interval (plus the first), however many batches."""
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales", "Billing"], batch_size=50, commit_interval_seconds=0.5)
    install(cfg)
    ids = seed_ids(cfg, "Sales", 1500) | seed_ids(cfg, "Billing", 1500, seed=2)
    t0 = time.monotonic()
    summary = drain(cfg, open_lake(cfg.lake))  # type: ignore[arg-type]
    elapsed = time.monotonic() - t0
    batches = sum(q["batches"] for q in summary["queues"])
    assert summary["dequeued"] == 3000 and batches >= 60
    assert summary["journal_commits"] <= elapsed / 0.5 + 1, (summary["journal_commits"], elapsed)
    assert summary["journal_commits"] < batches and summary["largest_group"] > 1
    spacing = commit_spacing(tmp_path / "lake")
    assert len(spacing) == summary["journal_commits"] - 1 and min(spacing) >= 0.25, spacing  # 0.5 s start to start
    assert sorted(journal(tmp_path / "lake")["id"].to_pylist()) == sorted(ids)
    with pytest.raises(ConfigError, match="commit_interval_seconds"):
        make_config(fresh_pg_uri, tmp_path / "lake", ["Sales"], commit_interval_seconds=-1)


def test_a_queue_smaller_than_a_batch_is_received_once(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short batch is followed by one count, not by another receive (a DELETE that finds nothing):
    most of a system's queues are smaller than a batch. A full batch is still followed by a receive,
    and rows that arrive before that count are drained in the same run."""
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales", "Billing"], batch_size=100, workers_per_queue=1)
    install(cfg)
    ids = seed_ids(cfg, "Sales", 40) | seed_ids(cfg, "Billing", 100, seed=2)
    sales, billing = (queue_ref(q, cfg.transport).canonical for q in ("Sales", "Billing"))  # type: ignore[attr-defined]
    receives: dict[str, int] = {}
    real_receive, real_count = queues.receive_batch_arrow, queues.count_rows
    late: list[set[str]] = []

    def counted(conn, ref, n, *args, **kwargs):  # the real receive, counted per queue
        receives[ref.canonical] = receives.get(ref.canonical, 0) + 1
        return real_receive(conn, ref, n, *args, **kwargs)

    def count_after_a_late_send(conn, ref):  # a sender's rows arrive between the batch and the count
        if ref.canonical == sales and not late:
            late.append(seed_ids(cfg, "Sales", 3, seed=3))
        return real_count(conn, ref)

    monkeypatch.setattr(queues, "receive_batch_arrow", counted)
    monkeypatch.setattr(queues, "count_rows", count_after_a_late_send)
    summary = drain(cfg, open_lake(cfg.lake))
    assert summary["status"] == "ok" and summary["dequeued"] == 143
    # Sales: 40 rows (short: a count, which finds the 3 late ones), 3 more (short: a count, empty)
    # Billing: 100 (a full batch), then an empty receive
    assert receives == {sales: 2, billing: 2}
    assert sorted(journal(tmp_path / "lake")["id"].to_pylist()) == sorted(ids | late[0])


def test_a_queue_the_estimate_found_skips_the_reads_it_answered(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's estimate found the table and its depth: no table check; a queue of one batch skips
    the first read of its newest row; a queue whose workers all ended on a count of 0 is not peeked
    for its backlog (that count was it). A budget that ends a drain early still peeks: the backlog
    left is the queue's, not 0."""
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Small", "Big"], batch_size=100, workers_per_queue=2)
    install(cfg)
    seed_ids(cfg, "Small", 40)
    seed_ids(cfg, "Big", 1_000, seed=2)
    BIG = '"public"."Big"'  # noqa: N806
    calls: dict[tuple[str, str], int] = {}

    def counting(name: str, real):  # type: ignore[no-untyped-def]
        def call(conn, ref, *args, **kwargs):  # type: ignore[no-untyped-def]
            calls[(name, ref.canonical)] = calls.get((name, ref.canonical), 0) + 1
            return real(conn, ref, *args, **kwargs)

        return call

    monkeypatch.setattr(schema, "table_exists", counting("table_exists", schema.table_exists))
    monkeypatch.setattr(queues, "newest_seq", counting("newest_seq", queues.newest_seq))
    monkeypatch.setattr(queues, "peek", counting("peek", queues.peek))
    lake = open_lake(cfg.lake)
    capped = drain(cfg, lake, queue_names=["Big"], max_messages=300)
    big = capped["queues"][0]
    assert (big["dequeued"], big["backlog_left"]) == (300, 700), big
    assert calls == {("newest_seq", BIG): 1, ("peek", BIG): 1}, calls
    calls.clear()
    summary = drain(cfg, lake)
    assert summary["status"] == "ok" and summary["dequeued"] == 740, summary
    assert [q["backlog_left"] for q in summary["queues"]] == [0, 0], summary
    # Big (700 > a batch): its newest row read once; Small: nothing; neither checked nor peeked
    assert calls == {("newest_seq", BIG): 1}, calls


def test_progress_estimates_the_backlog_on_a_churned_queue(
    fresh_pg_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each batch's progress line says about how many rows are left, on a queue whose head holds
    deleted rows (the state where min(seq) walks them all)."""
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales"], batch_size=100, workers_per_queue=1)
    install(cfg)
    ref = queue_ref("Sales", cfg.transport)  # type: ignore[attr-defined]
    seed_ids(cfg, "Sales", 500, seed=7)
    with psycopg.connect(fresh_pg_uri, autocommit=True) as c:
        c.execute(f"DELETE FROM {ref.qualified}")
        c.execute(f"ANALYZE {ref.qualified}")
    seed_ids(cfg, "Sales", 1000)
    summary = drain_logged(cfg, caplog, logging.INFO)
    assert summary["dequeued"] == 1000
    records = dict.fromkeys(caplog.records)  # the handler may see a record twice (logger and root)
    left = [int(m) for r in records for m in re.findall(r"about (-?\d+) left", r.getMessage())]
    assert left == list(range(900, -1, -100))


def test_missing_queue_fails_with_its_name(fresh_pg_uri: str, tmp_path: Path) -> None:
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Nowhere"])
    summary = drain(cfg, open_lake(cfg.lake))
    assert summary["status"] == "failed"
    assert '"public"."Nowhere"' in summary["queues"][0]["error"]


def test_a_drain_whose_runs_rows_cannot_be_written_keeps_its_counts(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lake's disk full at the drain's last write, its ``runs`` rows: the summary was that error
    alone, no counts, while 5,400 messages had landed (a review). The counts stay, and the error."""
    from queuelake.errors import LakeError
    from queuelake.pipeline import runs

    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales"])
    install(cfg)
    sent = seed_ids(cfg, "Sales", 30)

    def full(*_args: object, **_kwargs: object) -> None:
        raise LakeError("lake table runs: cannot create it: Generic error\n \x1b[31m↳\x1b[0m No space left on device")

    monkeypatch.setattr(runs, "append_runs", full)
    summary = drain(cfg, open_lake(cfg.lake))
    assert summary["status"] == "failed" and summary["landed"] == 30, summary
    assert summary["error_kind"] == "lake" and "runs rows were not written" in summary["error"], summary
    assert "No space left on device" in summary["error"]
    assert set(journal(tmp_path / "lake")["id"].to_pylist()) == sent


def test_a_drain_whose_lock_went_with_its_session_claims_nothing_more(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue's drain lock is its session's; that session idles while the workers drain, and a DBA's
    ``idle_session_timeout`` (or a terminated backend) freed it: a second drain could take the queue beside
    this one under the same application ids (a review). The drain confirms the lock before each claim:
    it stops claiming, what it claimed lands, and the next drain takes the rest, each message once."""
    from queuelake import kill_points

    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales"], workers_per_queue=1)
    install(cfg)
    sent = seed_ids(cfg, "Sales", 3000)
    monkeypatch.setattr(kill_points, "reached", lock_sessions_ended_at_batch(fresh_pg_uri, 3, kill_points.reached))
    first = drain(cfg, open_lake(cfg.lake))
    (queue,) = first["queues"]
    assert queue["status"] == "failed" and "its lock went with its database connection" in queue["error"], first
    landed = first["landed"]
    assert 0 < landed < 3000 and queue_depth(cfg, "Sales") == 3000 - landed, first  # two batches claimed
    monkeypatch.undo()
    assert drain(cfg, open_lake(cfg.lake))["landed"] == 3000 - landed
    ids = journal(tmp_path / "lake")["id"].to_pylist()
    assert len(ids) == 3000 and set(ids) == sent


def one_sales_queue(uri: str, tmp_path: Path, rows: int) -> tuple[Config, Path, set[str], list[str], dict[str, str]]:
    """``Sales`` of ``rows`` drained 200 at a time by one worker: (its config, the lake's root, the ids
    seeded, the drain's command, its environment)."""
    lake_root = tmp_path / "lake"
    cfg = make_config(uri, lake_root, ["Sales"], batch_size=200, workers_per_queue=1)
    install(cfg)
    sent = seed_ids(cfg, "Sales", rows)
    conf = write_config(tmp_path / "d.json", lake_root, ["Sales"], batch_size=200, workers=1)
    cmd = [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)]
    return cfg, lake_root, sent, cmd, {**os.environ, "QUEUELAKE_CONNECTION": uri}


def held_with_its_lock_gone(uri: str, cmd: list[str], env: dict[str, str], mark: Path, hold: str) -> subprocess.Popen:
    """Drain A started with a claim held at ``hold`` (``QUEUELAKE_TEST_HOLD_AT``), then its lock session
    ended: its claim is under way (its claim's session stays), its lock gone."""
    held = {"QUEUELAKE_TEST_HOLD_AT": hold, "QUEUELAKE_TEST_HOLD_MARK": str(mark)}
    first = subprocess.Popen(cmd, env={**env, **held}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not mark.exists() and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.05)
    assert mark.exists(), first.communicate()[1][-3000:]
    assert end_sessions(uri, "queuelake-drain-lock") == 1
    return first


def test_a_drain_taking_a_lock_waits_for_the_claim_its_last_holder_was_committing(
    fresh_pg_uri: str, tmp_path: Path
) -> None:
    """Drain A confirmed its lock and was committing a claim (held 6 s here) when its lock session died;
    drain B took the lock, read the queue's claims and versions without A's claim, claimed the same
    (application id, version), and its batch was skipped as journalled: 200 rows lost (a review). B now
    waits for A's claim transaction before it reads them: every message once."""
    cfg, lake_root, sent, cmd, env = one_sales_queue(fresh_pg_uri, tmp_path, 3000)
    first = held_with_its_lock_gone(fresh_pg_uri, cmd, env, tmp_path / "held", "before_db_commit:6:5")
    # B holds its first batch 8 s after staging it, as a slow claim would: A's claim lands and is cleared
    second = subprocess.run(
        cmd, env={**env, "QUEUELAKE_TEST_HOLD_AT": "after_stage:8:1"}, capture_output=True, text=True
    )
    out, err = first.communicate(timeout=120)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "its lock went with its database connection" in out, err[-3000:]
    assert subprocess.run(cmd, env=env, capture_output=True, text=True).returncode == 0
    ids = journal(lake_root)["id"].to_pylist()
    assert len(ids) == len(set(ids)) and set(ids) == sent, f"{len(sent - set(ids))} lost"
    assert claim_count(cfg) == 0 and queue_depth(cfg, "Sales") == 0


@pytest.mark.parametrize("ends_by", ["time box", "SIGTERM"])
def test_a_drain_waiting_for_a_stuck_claim_says_so_and_keeps_its_time_box(
    fresh_pg_uri: str, tmp_path: Path, ends_by: str
) -> None:
    """Drain A's claim is stuck (held 40 s here, as a frozen process's would be) after its lock session
    died; drain B takes the lock and waits for that claim. B waited without a word until the server
    ended A's transaction, past its ``--max-seconds`` and through a SIGTERM (a review). Now B says why it
    waits and gives up at its time box, failing the queue, or at a SIGTERM, interrupted (it said
    ``failed`` before); A's claim lands, and a later drain the rest."""
    cfg, lake_root, sent, cmd, env = one_sales_queue(fresh_pg_uri, tmp_path, 2000)
    first = held_with_its_lock_gone(fresh_pg_uri, cmd, env, tmp_path / "held", "before_db_commit:40:3")
    began = time.monotonic()
    waits = "waiting for a claim a drain whose lock went is committing"
    args = [*cmd, "--max-seconds", "4"] if ends_by == "time box" else cmd
    with open(tmp_path / "second.err", "w+") as err:
        second = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        if ends_by == "SIGTERM":
            while waits not in (tmp_path / "second.err").read_text() and time.monotonic() - began < 60:
                time.sleep(0.2)
            second.send_signal(signal.SIGTERM)
        out, _ = second.communicate(timeout=120)
    stderr = (tmp_path / "second.err").read_text()
    took = time.monotonic() - began
    assert first.poll() is None, "A ended before B gave up: nothing was stuck"
    assert second.returncode == (1 if ends_by == "time box" else 143) and took < 30, (took, stderr[-3000:])
    assert waits in stderr, stderr[-3000:]
    (queue,) = json.loads(out.strip().splitlines()[-1])["queues"]
    assert "still committing a claim" in queue["error"] and queue["dequeued"] == 0, queue
    if ends_by == "time box":
        assert queue["status"] == "failed" and "time box" in queue["error"], queue
    else:
        assert queue["status"] == "interrupted" and "stopped" in queue["error"], queue
    first.communicate(timeout=120)
    assert subprocess.run(cmd, env=env, capture_output=True, text=True).returncode == 0
    ids = journal(lake_root)["id"].to_pylist()
    assert len(ids) == len(set(ids)) and set(ids) == sent, f"{len(sent - set(ids))} lost"
    assert claim_count(cfg) == 0 and queue_depth(cfg, "Sales") == 0


# --- competing consumer ---------------------------------------------------------------------------


def test_competing_consumer_no_overlap(fresh_pg_uri: str, tmp_path: Path) -> None:
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales"], batch_size=200)
    install(cfg)
    ids = seed_ids(cfg, "Sales", 6000)
    ref = queue_ref("Sales", cfg.transport)
    taken: list[str] = []
    done = threading.Event()

    def nservicebus_receiver() -> None:
        with db.connect(cfg.transport) as conn:
            while not done.is_set():
                row = queues.receive_one(conn, ref)
                conn.commit()
                if row is None:
                    if done.is_set():
                        break
                    time.sleep(0.01)
                    continue
                taken.append(row.id)

    thread = threading.Thread(target=nservicebus_receiver)
    thread.start()
    try:
        summary = drain(cfg, open_lake(cfg.lake))
    finally:
        done.set()
        thread.join()
    landed = journal(tmp_path / "lake")["id"].to_pylist()
    assert summary["status"] == "ok"
    assert taken, "the competing receiver took nothing; the test proves nothing"
    assert not set(taken) & set(landed)
    assert len(landed) == len(set(landed))
    assert set(taken) | set(landed) == ids
    assert len(taken) + len(landed) == len(ids)


def test_a_drain_beside_a_steady_sender_ends_with_the_rows_present_as_it_began(
    fresh_pg_uri: str, tmp_path: Path
) -> None:
    """A queue whose senders add rows faster than a batch's round trip never counted 0: a drain without
    ``max_seconds`` ran for good, and ``run`` never reached its later steps (a review: 83,324 rows in
    155 s, every progress line "about 0 left"). The drain takes every row present as it began, and
    the rows sent since are the next run's: nothing lost, none twice."""
    # batches of 5 rows, one worker: slower than the sender, as a drain to S3 is beside a busy endpoint
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales"], batch_size=5, workers_per_queue=1)
    install(cfg)
    first = seed_ids(cfg, "Sales", 100)
    ref = queue_ref("Sales", cfg.transport)
    sent: list[str] = []
    done = threading.Event()

    def steady_sender() -> None:  # 25 rows every few milliseconds, faster than a batch's round trip
        messages = traffic.order_events(10_000_000, seed=11)
        with db.connect(cfg.transport) as conn:
            while not done.is_set():
                chunk = list(itertools.islice(messages, 25))
                traffic.seed(conn, ref, chunk)
                sent.extend(m.id for m in chunk)
                time.sleep(0.002)

    thread = threading.Thread(target=steady_sender, daemon=True)
    thread.start()
    time.sleep(0.2)  # the sender is running when the drain begins
    outcome: list[dict] = []
    runner = threading.Thread(target=lambda: outcome.append(drain(cfg, open_lake(cfg.lake))), daemon=True)
    runner.start()
    runner.join(120)
    done.set()
    thread.join(30)
    assert outcome, "the drain was still running after 120 s beside a steady sender"
    assert outcome[0]["status"] == "ok", outcome[0]
    landed = journal(tmp_path / "lake")["id"].to_pylist()
    assert first <= set(landed) and len(landed) == len(set(landed)), "a row present as the drain began was left"
    rest = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales"], batch_size=2000)
    assert drain(rest, open_lake(rest.lake))["status"] == "ok"  # the next run takes the rest
    everything = journal(tmp_path / "lake")["id"].to_pylist()
    assert sorted(everything) == sorted(first | set(sent)), "a row lost or taken twice"


# --- bounded memory -------------------------------------------------------------------------------

RSS_SCRIPT = """
import json, resource, sys
from queuelake.config import load
from queuelake.lake.engines import open_lake
from queuelake.context import open_database
from queuelake.pipeline.drain.run import drain
cfg = load(sys.argv[1])
summary = drain(cfg, open_database(cfg), open_lake(cfg.lake))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"status": summary["status"], "dequeued": summary["dequeued"],
                  "errors": [q["error"] for q in summary["queues"]], "rss_kb": rss}))
"""


def _drain_rss(uri: str, tmp_path: Path, name: str, count: int) -> int:
    lake_root = tmp_path / name
    cfg = make_config(uri, lake_root, [name])
    install(cfg)
    ref = queue_ref(name, cfg.transport)
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, ref, traffic.order_events(count, seed=5), chunk=50_000)
    conf = write_config(tmp_path / f"{name}.yaml", lake_root, [name], batch_size=10_000)
    out = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(conf)],
        env={**os.environ, "QUEUELAKE_CONNECTION": uri},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == "ok", result
    assert result["dequeued"] == count
    return int(result["rss_kb"])


@pytest.mark.slow
def test_batches_are_bounded_by_bytes_as_well_as_rows(fresh_pg_uri: str, tmp_path: Path) -> None:
    """300 messages of 40 KB with batch_size 1,000 and batch_megabytes 1: a worker's batches hold
    about 25 of them (its first at most 64), never the 1,000 rows, and every message lands once."""
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Audit"], batch_size=1000, batch_megabytes=1)
    install(cfg)
    body = bytes(range(256)) * 160  # 40 KB
    with db.connect(cfg.transport) as conn:  # type: ignore[attr-defined]
        queues.send(conn, queue_ref("Audit", cfg.transport), [OutgoingMessage("{}", body)] * 300)  # type: ignore[attr-defined]
        conn.commit()
    summary = drain(cfg, open_lake(cfg.lake))  # type: ignore[arg-type]
    (queue,) = summary["queues"]
    assert summary["dequeued"] == 300 and queue["status"] == "ok", summary
    assert queue["batches"] >= 300 // 64, queue  # without the byte bound: one batch
    landed = journal(tmp_path / "lake")
    assert landed.num_rows == 300 and len(set(landed["id"].to_pylist())) == 300


def test_memory_bounded_by_batch_not_backlog(fresh_pg_uri: str, tmp_path: Path) -> None:
    # 5x the backlog, ~0.8 GB of messages in the large queue: memory growing with the backlog would
    # show many times over the 20% allowed (CI time: 100k + 500k rows take half of 200k + 1M)
    small = _drain_rss(fresh_pg_uri, tmp_path, "Small", 100_000)
    large = _drain_rss(fresh_pg_uri, tmp_path, "Large", 500_000)
    print(f"peak RSS: {small} kB draining 100,000; {large} kB draining 500,000")
    assert abs(large - small) / small < 0.20, f"peak RSS {small} kB for 100k vs {large} kB for 500k"


# --- rows other sessions hold; the drain's own sessions ---------------------------------------------


def test_rows_held_by_another_session_are_reported_not_a_clean_finish(fresh_pg_uri: str, tmp_path: Path) -> None:
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales"], batch_size=100, settle_seconds=0.5)
    install(cfg)
    ids = seed_ids(cfg, "Sales", 300)
    ref = queue_ref("Sales", cfg.transport)
    holder = db.connect(cfg.transport)
    try:
        held = queues.receive_batch(holder, ref, 3)  # the oldest 3 rows, deleted but not committed
        summary = drain(cfg, open_lake(cfg.lake))
        assert summary["status"] == "incomplete", summary
        assert summary["held_by_others"] == 3 and summary["dequeued"] == 297
        assert "could not claim" in summary["queues"][0]["error"]
        runs = read_table(str(tmp_path / "lake" / "runs")).to_pylist()
        assert runs[-1]["status"] == "incomplete" and "3 row(s)" in runs[-1]["error"]
    finally:
        holder.rollback()  # the competitor gives up: the rows are receivable again
        holder.close()
    again = drain(cfg, open_lake(cfg.lake))
    assert again["status"] == "ok" and again["dequeued"] == 3 and again["held_by_others"] == 0
    assert sorted(journal(tmp_path / "lake")["id"].to_pylist()) == sorted(ids)
    assert {r.id for r in held} <= ids


def test_drain_sessions_cannot_outlive_their_client(fresh_pg_uri: str) -> None:
    """A killed drain's statement must not run on server-side holding its rows: the drain's sessions
    check their client every few seconds and carry statement and idle-in-transaction timeouts."""
    cfg = make_config(fresh_pg_uri, Path("/nonexistent"), ["Sales"])
    for driver in ("psycopg", "adbc"):
        with db.connect(cfg.transport, driver=driver) as conn:
            queues.configure_drain_session(conn, 300, 600)
            cur = conn.raw.cursor()
            values = {}
            for name in (
                "client_connection_check_interval",
                "statement_timeout",
                "idle_in_transaction_session_timeout",
                "enable_seqscan",
            ):
                cur.execute(f"SELECT current_setting('{name}')")
                values[name] = cur.fetchall()[0][0]
            assert values == {
                "client_connection_check_interval": "2s",
                "statement_timeout": "5min",
                "idle_in_transaction_session_timeout": "10min",
                "enable_seqscan": "off",
            }, driver


ZOMBIE_SCRIPT = """
import sys, time
from queuelake.config import from_dict
from queuelake.transport import db, queues
from queuelake.transport.table_refs import queue_ref
cfg = from_dict({"transport": {"connection": sys.argv[1]}}, env={})
conn = db.connect(cfg.transport)
queues.configure_drain_session(conn, 300, 600)
rows = queues.receive_batch(conn, queue_ref("Sales", cfg.transport), 50)  # rows locked, transaction open
print(len(rows), flush=True)
conn.raw.execute("SELECT pg_sleep(120)")  # a statement still running when the client dies
"""


def wait_for_statement(uri: str, prefix: str, timeout: float = 60) -> None:
    """Until a session of this database is running a statement that starts with ``prefix``."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(uri, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active'"
                " AND starts_with(query, %s)",
                (prefix,),
            ).fetchone()
            if row and row[0]:
                return
            assert time.monotonic() < deadline, f"no session ran {prefix!r} within {timeout:g} s"
            time.sleep(0.05)


@pytest.mark.parametrize("configured", [True, False])
def test_a_killed_drains_statement_stops_holding_rows(fresh_pg_uri: str, tmp_path: Path, configured: bool) -> None:
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales"])
    install(cfg)
    seed_ids(cfg, "Sales", 50)
    script = ZOMBIE_SCRIPT if configured else ZOMBIE_SCRIPT.replace("queues.configure_drain_session", "(lambda *a: 0)")
    proc = subprocess.Popen([sys.executable, "-c", script, fresh_pg_uri], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "50"
    # killed once its statement runs server-side, not after a fixed wait: killed before it sent the
    # statement (a loaded machine), its idle transaction ends with it and the control's rows come back
    wait_for_statement(fresh_pg_uri, "SELECT pg_sleep(120)")
    proc.kill()
    proc.wait()
    ref = queue_ref("Sales", cfg.transport)
    # the drain's settings release the rows within a client check (2 s): 30 s is only a liveness bound;
    # the control watches its 120 s statement hold them for 4 checks
    deadline = time.monotonic() + (30 if configured else 8)
    got = 0
    with db.connect(cfg.transport) as conn:
        while time.monotonic() < deadline and got == 0:
            got = len(queues.receive_batch(conn, ref, 100))
            conn.rollback()
            time.sleep(0.2)
        if not configured:  # the control: without the drain's session settings the rows stay held
            assert got == 0, "the control released the rows: this test could not tell the difference"
            conn.raw.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(120)%'"
            )
            conn.commit()
            return
    assert got == 50, "a killed drain's statement still holds its rows server-side"


def test_claims_of_workers_that_no_longer_run_are_resolved(fresh_pg_uri: str, tmp_path: Path) -> None:
    """Killed after its DB commit with 3 workers; the next run has 1 worker and still lands every
    claimed batch, exactly once, before it receives anything."""
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, ["Sales"])
    install(cfg)
    ids = seed_ids(cfg, "Sales", 3000)
    conf = write_config(tmp_path / "three.yaml", lake_root, ["Sales"], batch_size=200, workers=3)
    proc = run_cli(["drain", "-c", str(conf)], fresh_pg_uri, QUEUELAKE_TEST_KILL_AT="after_db_commit:4")
    assert proc.returncode == -9, proc.stderr[-2000:]
    # counted once the killed run's sessions are gone: another worker's claim whose commit was on its
    # way when the process died lands after that (counted too early, it was resolved but not in
    # ``left``), and no dead session holds the queue's lock when the next run starts (it would skip it)
    wait_for_no_drain(fresh_pg_uri)
    left = claim_count(cfg)
    assert left >= 1, "the kill left no claim: nothing to resolve"
    one = write_config(tmp_path / "one.yaml", lake_root, ["Sales"], batch_size=200, workers=1)
    final = run_cli(["drain", "-c", str(one)], fresh_pg_uri)
    assert final.returncode == 0, final.stderr[-2000:]
    summary = json.loads(final.stdout.strip().splitlines()[-1])
    assert summary["claims_resolved"] == left
    got = journal(lake_root)["id"].to_pylist()
    assert len(got) == len(set(got)) and set(got) == ids
    assert claim_count(cfg) == 0 and queue_depth(cfg, "Sales") == 0


def test_a_claim_whose_staged_files_vanished_fails_loudly(fresh_pg_uri: str, tmp_path: Path) -> None:
    """Committing a missing file would corrupt the journal: the claim stays, the run fails naming it."""
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, ["Sales"])
    install(cfg)
    seed_ids(cfg, "Sales", 400)
    conf = write_config(tmp_path / "d.yaml", lake_root, ["Sales"], batch_size=200, workers=1)
    proc = run_cli(["drain", "-c", str(conf)], fresh_pg_uri, QUEUELAKE_TEST_KILL_AT="after_db_commit:1")
    assert proc.returncode == -9 and claim_count(cfg) == 1
    for parquet in (lake_root / "messages").glob("*.parquet"):
        parquet.unlink()  # e.g. a vacuum with too short a retention
    summary = drain(cfg, open_lake(cfg.lake))
    assert summary["status"] == "failed"
    assert "missing" in summary["queues"][0]["error"]
    assert claim_count(cfg) == 1, "the claim must stay for an operator to see"
    assert queue_depth(cfg, "Sales") == 200, "nothing else was received while the claim is unresolved"


def test_runs_written_by_an_older_version_gain_the_new_columns(fresh_pg_uri: str, tmp_path: Path) -> None:
    from queuelake.pipeline.runs import RUNS, RUNS_SCHEMA

    cfg = make_config(fresh_pg_uri, tmp_path / "lake", ["Sales"])
    install(cfg)
    seed_ids(cfg, "Sales", 10)
    lake = open_lake(cfg.lake)
    old = pa.schema(
        [f for f in RUNS_SCHEMA if f.name != "undeliverable"] + [pa.field("duplicates_skipped", pa.int64())]
    )
    lake.create_table(RUNS, old)
    assert drain(cfg, lake)["status"] == "ok"
    runs = read_table(str(tmp_path / "lake" / "runs"))
    assert "undeliverable" in runs.column_names and "duplicates_skipped" in runs.column_names
    assert runs.num_rows == 1 and runs["dequeued"].to_pylist() == [10]
