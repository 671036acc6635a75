"""``queuelake where`` on a generated system of several endpoints: Sales publishes OrderPlaced, Billing
processes them (audit copies), fails one (an error copy) and has a delayed store, Shipping receives a
replay. Drained into a delta-rs journal, typed by ``bodies`` (real Spark), retried and replayed by
``queuelake replay``; then each message asked where it is, as whole commands:

- A: drained from Sales, processed by Billing (audit copy);
- B: drained, failed in Billing (error copy), retried by a replay: the retry waits in Billing;
- C: drained, replayed with ``--to Shipping`` (a new message id naming C), the replay drained too;
- D: still waiting in Sales (sent after the drain);
- E: in Billing's delayed-delivery table;
- F: expired before the drain took it;
and the peek takes and locks nothing: a competing receiver holding D's row (FOR UPDATE SKIP LOCKED)
does not hold ``where`` up, and every row is still there afterwards.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pyarrow as pa
import pytest
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.nsb import headers as hdr
from queuelake.pipeline.bodies import run as bodies_run
from queuelake.pipeline.where.keys import body_matches, typed_value
from queuelake.transport import db, installer, queues, subscriptions
from queuelake.transport.peek_rows import peek_matching
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import bridge_ref, queue_ref

from tests.helpers.stages import drain

SENT = dt.datetime(2026, 11, 2, 8, 0, tzinfo=dt.timezone.utc)
ID = {name: f"7a1d0c3e-5b2f-4c6d-9e8f-0a1b2c3d4e{i:02d}" for i, name in enumerate("ABCDEF")}
CONVERSATION = {name: f"c0c0c0c0-0000-4000-8000-0000000000{i:02d}" for i, name in enumerate("ABCDEF")}
SALES, BILLING, SHIPPING = '"public"."Sales"', '"public"."Billing"', '"public"."Shipping"'
AUDIT, ERROR = '"public"."audit"', '"public"."error"'
DELAYED = '"public"."Billing.Delayed"'
ID.update({name: f"7a1d0c3e-5b2f-4c6d-9e8f-0a1b2c3d4e{i:02d}" for i, name in enumerate("GH", start=6)})
CONVERSATION.update({name: f"c0c0c0c0-0000-4000-8000-0000000000{i:02d}" for i, name in enumerate("GH", start=6)})
OTHERS = list(traffic.order_events(40, seed=61, start=SENT))


def _order(name: str, seconds: int, ttbr_ms: int | None = None) -> OutgoingMessage:
    headers = traffic.order_headers(ID[name], SENT + dt.timedelta(seconds=seconds), conversation=CONVERSATION[name])
    lines = [{"Sku": f"sku-{name}", "Quantity": 2}, {"Sku": "sku-common", "Quantity": 1}]
    body = json.dumps({"OrderId": f"order-{name}", "Total": 100 + seconds, "Currency": "EUR", "Lines": lines}).encode()
    return OutgoingMessage(hdr.encode(headers), body, id=ID[name], ttbr_ms=ttbr_ms)


def _settings(root: Path, queues_: list[str]) -> dict[str, Any]:
    return {
        "transport": {"connection": "${QUEUELAKE_CONNECTION}", "delayed_endpoints": ["Billing"]},
        "lake": {"root": str(root), "engine": "delta-rs"},
        "drain": {"queues": queues_, "batch_size": 20},
    }


def _cli(args: list[str], cwd: Path, uri: str = "") -> tuple[dict, str, subprocess.CompletedProcess]:
    """(the JSON summary, stdout before it, the process) of one command."""
    proc = subprocess.run(
        [sys.executable, "-m", "queuelake", *args],
        env={**os.environ, "QUEUELAKE_CONNECTION": uri},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-3000:]
    return json.loads(lines[-1]), "\n".join(lines[:-1]), proc


@pytest.fixture(scope="module")
def system(pg_uri: str, tmp_path_factory: pytest.TempPathFactory, spark: Any) -> tuple[Path, Path, str]:
    """(config file, work folder, connection) of the system after its story (module docstring)."""
    work = tmp_path_factory.mktemp("where")
    root = work / "lake"
    conf = work / "where.yaml"
    conf.write_text(json.dumps(_settings(root, ["Sales", "audit", "error"])))
    shipping_conf = work / "shipping.yaml"
    shipping_conf.write_text(json.dumps(_settings(root, ["Shipping"])))
    env = {"QUEUELAKE_CONNECTION": pg_uri}
    cfg = from_dict(
        {
            **_settings(root, ["Sales", "audit", "error"]),
            "transport": {"connection": pg_uri, "delayed_endpoints": ["Billing"]},
        },
        env=env,
    )
    t = cfg.transport
    orders = {name: _order(name, i) for i, name in enumerate("ABCDEF")}
    orders["F"] = _order("F", 5, ttbr_ms=1)
    others = OTHERS
    with db.connect(t) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Billing", "Shipping"]))
        conn.commit()
        traffic.seed(conn, queue_ref("Sales", t), others[:20] + [orders[n] for n in "ABCF"] + others[20:])
        audit = [traffic.audit_copy(orders["A"], "Billing", SENT + dt.timedelta(seconds=10), 42)]
        audit += [traffic.audit_copy(m, "Billing", SENT + dt.timedelta(seconds=11), 30) for m in others[:15]]
        traffic.seed(conn, queue_ref("audit", t), audit)
        failed = traffic.failed_copy(
            orders["B"], "Billing", "System.InvalidOperationException", "card declined", SENT + dt.timedelta(seconds=12)
        )
        traffic.seed(conn, queue_ref("error", t), [failed])
    time.sleep(0.1)  # F's time to be received (1 ms) runs out before the drain takes it
    lake = open_lake(cfg.lake, spark)
    drained = drain(cfg, lake)
    assert drained["status"] == "ok", drained
    assert bodies_run.bodies(cfg, spark, lake)["status"] == "ok"
    # B retried (back to its FailedQ, Billing), C replayed to Shipping: both by queuelake replay
    retry, _, proc = _cli(
        ["replay", "-c", str(conf), "--where", f"message_id = '{ID['B']}' AND queue = '{ERROR}'"], work, pg_uri
    )
    assert retry["status"] == "ok", proc.stderr[-3000:]
    replay, _, proc = _cli(
        ["replay", "-c", str(conf), "--where", f"message_id = '{ID['C']}' AND queue = '{SALES}'", "--to", "Shipping"],
        work,
        pg_uri,
    )
    assert replay["status"] == "ok", proc.stderr[-3000:]
    shipped, _, proc = _cli(["drain", "-c", str(shipping_conf)], work, pg_uri)
    assert shipped["status"] == "ok", proc.stderr[-3000:]
    with db.connect(t) as conn:  # after the drains: D waits in Sales, E in Billing's delayed store
        traffic.seed(conn, queue_ref("Sales", t), [orders["D"]])
        e = hdr.decode_map(orders["E"].headers)
        e[hdr.FORWARD_DESTINATION] = "Billing"
        queues.store_delayed(conn, queue_ref("Billing", t).delayed(), [(hdr.encode(e), orders["E"].body, 3_600_000)])
        conn.commit()
    return conf, work, pg_uri


def _where(system: tuple[Path, Path, str], *args: str) -> tuple[dict, list[dict], subprocess.CompletedProcess]:
    conf, work, uri = system
    summary, out, proc = _cli(["where", "-c", str(conf), *args, "--json"], work, uri)
    assert proc.returncode == 0 and summary["status"] == "ok", proc.stderr[-3000:]
    return summary, [orjson.loads(line) for line in out.splitlines()], proc


def _places(rows: list[dict]) -> list[tuple[str, str]]:
    return [(r["place"], r["location"]) for r in rows]


def test_a_processed_message_is_drained_then_processed_by_its_endpoint(system: tuple[Path, Path, str]) -> None:
    summary, rows, _ = _where(system, "--message-id", ID["A"])
    assert _places(rows) == [("drained", SALES), ("processed", AUDIT)]
    processed = rows[1]
    assert processed["endpoint"] == "Billing" and processed["processing_ms"] == 42
    assert processed["processing_ended"] == "2026-11-02T08:00:10.042000Z"
    assert summary["messages"] == [
        {
            "message_id": ID["A"],
            "now": "processed",
            "location": AUDIT,
            "at": "2026-11-02T08:00:10.042000Z",
            "places": ["drained", "processed"],
        }
    ]
    # the queues the config names, and Billing (the audit copy's endpoint), were read; none held it
    assert summary["queues"]["tables"] >= 5 and summary["queues"]["missing"] == []
    assert summary["journal"]["found"] == 2 and summary["journal"]["files"] >= 1


def test_a_failed_message_retried_is_failed_then_waiting_in_its_queue(system: tuple[Path, Path, str]) -> None:
    summary, rows, _ = _where(system, "--message-id", ID["B"])
    assert _places(rows) == [("drained", SALES), ("failed", ERROR), ("waiting", BILLING)]
    failed, waiting = rows[1], rows[2]
    assert failed["exception_type"] == "System.InvalidOperationException" and failed["endpoint"] == "Billing"
    assert "card declined" in failed["detail"]
    assert waiting["replay_kind"] == "retry" and waiting["replay_id"]
    assert summary["messages"][0]["now"] == "waiting" and summary["messages"][0]["location"] == BILLING
    record = summary["replays"][waiting["replay_id"]]
    assert record["recorded"] and record["status"] == "ok" and record["total_sent"] == 1


def test_a_replayed_message_shows_its_replay_under_its_new_id(system: tuple[Path, Path, str]) -> None:
    summary, rows, _ = _where(system, "--message-id", ID["C"])
    assert _places(rows) == [("drained", SALES), ("replayed", SHIPPING)]
    replayed = rows[1]
    assert replayed["original_message_id"] == ID["C"] and replayed["message_id"] != ID["C"]
    assert replayed["replay_kind"] == "replay"
    assert summary["replays"][replayed["replay_id"]]["to_queue"] == "Shipping"
    assert summary["journal"]["replay_rows"] == 1


def test_waiting_delayed_and_expired_messages(system: tuple[Path, Path, str]) -> None:
    summary, rows, _ = _where(system, "--message-id", ID["D"])
    assert _places(rows) == [("waiting", SALES)] and rows[0]["expired"] is False and rows[0]["seq"] > 0
    assert summary["journal"]["found"] == 0 and summary["messages"][0]["now"] == "waiting"
    summary, rows, _ = _where(system, "--message-id", ID["E"])
    assert _places(rows) == [("delayed", DELAYED)] and rows[0]["forward_destination"] == "Billing"
    assert rows[0]["due_now"] is False
    summary, rows, _ = _where(system, "--message-id", ID["F"])
    assert _places(rows) == [("expired", SALES)]
    # found by its row id, which is its message id: the answer names the message asked about
    assert rows[0]["message_id"] == ID["F"] and summary["messages"][0]["message_id"] == ID["F"]


def test_a_conversation_and_an_unknown_id(system: tuple[Path, Path, str]) -> None:
    summary, rows, _ = _where(system, "--conversation-id", CONVERSATION["B"])
    assert _places(rows) == [("drained", SALES), ("failed", ERROR), ("waiting", BILLING)]
    summary, rows, proc = _where(system, "--message-id", str(uuid.uuid4()))
    assert rows == [] and summary["found"] == 0 and summary["messages"] == []
    assert not [n for n in summary["notes"] if "drain claim" in n], summary["notes"]


def test_rows_a_drain_holds_in_unresolved_claims_are_said_to_be_there(system: tuple[Path, Path, str]) -> None:
    """Rows a drain took from their queue and could not commit to the journal (stopped, or its commit
    failed) are in neither until the next drain: such a message was "found nowhere" while ``status``
    counted the claim (a review). The answer says the claims wait, and which queues'."""
    from queuelake.transport import claims

    conf, work, uri = system
    cfg = from_dict({"transport": {"connection": uri}}, env={})
    table = claims.claims_ref(cfg.transport)
    held = claims.Claim("tests.where/Sales/0", 1, SALES, "messages", 7, "{}")
    with db.connect(cfg.transport) as conn:
        claims.insert(conn, table, held)
        conn.commit()
    try:
        summary, rows, _ = _where(system, "--message-id", str(uuid.uuid4()))
    finally:
        with db.connect(cfg.transport) as conn:
            claims.delete(conn, table, held.app_id, held.version)
            conn.commit()
    [said] = [n for n in summary["notes"] if "drain claim" in n]
    assert said.startswith(f"1 unresolved drain claim(s) hold 7 row(s) of {SALES}: "), said


def test_a_business_key_through_the_typed_tables_and_the_waiting_bodies(system: tuple[Path, Path, str]) -> None:
    summary, rows, _ = _where(system, "--field", "OrderId", "--value", "order-A")
    assert _places(rows) == [("drained", SALES), ("processed", AUDIT)]
    assert {r["message_id"] for r in rows} == {ID["A"]}
    assert sum(summary["typed"]["tables_searched"].values()) == 1
    # D was sent after bodies ran: no typed row, found by its body in the queue
    summary, rows, _ = _where(system, "--field", "OrderId", "--value", "order-D")
    assert _places(rows) == [("waiting", SALES)] and rows[0]["message_id"] == ID["D"]
    # a number, as the typed column holds it (Total of A is 100)
    summary, rows, _ = _where(system, "--field", "Total", "--value", "100", "--no-peek")
    assert {r["message_id"] for r in rows} == {ID["A"]}
    assert "the queue tables (--no-peek)" in summary["not_searched"]
    # a field no typed table has is said, not guessed
    summary, rows, _ = _where(system, "--field", "NoSuchField", "--value", "1", "--no-peek")
    assert rows == [] and any("no typed body table has a field 'NoSuchField'" in s for s in summary["not_searched"])


def test_a_field_in_a_list_of_structs_is_found_in_any_of_its_items(system: tuple[Path, Path, str]) -> None:
    """``Lines.Sku`` of an order's lines: the typed column is a list of structs, searched item by item as the
    bodies waiting in the queues are (it found nothing in the typed tables)."""
    summary, rows, _ = _where(system, "--field", "Lines.Sku", "--value", "sku-A")
    assert _places(rows) == [("drained", SALES), ("processed", AUDIT)]
    assert sum(summary["typed"]["tables_searched"].values()) == 1
    summary, rows, _ = _where(system, "--field", "lines.quantity", "--value", "2", "--no-peek")
    assert {r["message_id"] for r in rows} >= {ID["A"], ID["B"], ID["C"]}
    summary, rows, _ = _where(system, "--field", "Lines.Sku", "--value", "sku-D")
    assert _places(rows) == [("waiting", SALES)]


def test_list_items_are_matched_once_per_row() -> None:
    from queuelake.pipeline.where.keys import _field_type, holding

    lines = [[{"Sku": "x"}, {"Sku": "y"}], None, [{"Sku": "y"}, None, {"Sku": None}], [], [{"Sku": "y"}, {"Sku": "y"}]]
    table = pa.table({"message_id": list("abcde"), "Lines": lines, "Tags": [["t"], ["u", "t"], None, ["v"], []]})
    assert holding(table, "Lines", ["Sku"], pa.scalar("y")).column(0).to_pylist() == ["a", "c", "e"]
    assert holding(table.slice(1), "Tags", [], pa.scalar("t")).column(0).to_pylist() == ["b"]
    found = _field_type(table.schema, ["lines", "sku"])
    assert found is not None and found.spelled == ["Lines", "Sku"] and found.through_lists
    assert _field_type(table.schema, ["Tags", "x"]) is None


def test_the_table_is_for_people(system: tuple[Path, Path, str]) -> None:
    conf, work, uri = system
    summary, out, proc = _cli(["where", "-c", str(conf), "--message-id", ID["B"]], work, uri)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["MESSAGE", "ID", "PLACE"] and len(lines) == 4
    assert "failed" in lines[2] and "System.InvalidOperationException: card declined" in lines[2]
    assert "waiting" in lines[3] and BILLING in lines[3]


def test_bad_arguments_are_refused(system: tuple[Path, Path, str]) -> None:
    conf, work, uri = system
    summary, _, proc = _cli(["where", "-c", str(conf), "--field", "OrderId"], work, uri)
    assert proc.returncode == 1 and summary["error_kind"] == "arguments" and "--field needs --value" in summary["error"]
    summary, _, proc = _cli(["where", "-c", str(conf), "--message-id", ID["A"], "--time-limit", "0"], work, uri)
    assert proc.returncode == 2 and summary["error_kind"] == "usage"


def test_the_peek_takes_and_locks_nothing(system: tuple[Path, Path, str]) -> None:
    """A receiver holds D's row (FOR UPDATE SKIP LOCKED, its transaction open): ``where`` still answers
    at once, and shows the row (it is in the queue until the receiver commits); every row is still
    there afterwards, and no lock of ``where`` is left (a NOWAIT lock of every row succeeds)."""
    conf, work, uri = system
    with psycopg.connect(uri) as conn:
        count = conn.execute('SELECT count(*) FROM "public"."Sales"').fetchone()
    receiver = psycopg.connect(uri)
    try:
        held = receiver.execute(
            'SELECT id FROM "public"."Sales" ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED'
        ).fetchone()
        assert held is not None
        started = time.monotonic()
        summary, rows, _ = _where(system, "--message-id", ID["D"], "--time-limit", "2")
        assert time.monotonic() - started < 60 and summary["queues"]["failed"] == {}
        assert _places(rows) == [("waiting", SALES)]
    finally:
        receiver.rollback()
        receiver.close()
    with psycopg.connect(uri) as conn:
        assert conn.execute('SELECT count(*) FROM "public"."Sales"').fetchone() == count
        locked = conn.execute('SELECT count(*) FROM (SELECT id FROM "public"."Sales" FOR UPDATE NOWAIT) r').fetchone()
        assert locked == count


def test_a_read_past_its_time_limit_is_reported_not_waited_on(system: tuple[Path, Path, str]) -> None:
    """A table locked by DDL (ACCESS EXCLUSIVE) would hold a plain SELECT: the read gives up within its
    time limit and says the table is locked; the other tables are still read."""
    conf, work, uri = system
    cfg = from_dict({**_settings(conf.parent / "lake", ["Sales"]), "transport": {"connection": uri}}, env={})
    blocker = psycopg.connect(uri)
    result: dict[str, Any] = {}
    try:
        blocker.execute('LOCK TABLE "public"."Sales" IN ACCESS EXCLUSIVE MODE')
        with db.connect(cfg.transport) as conn:
            started = time.monotonic()
            peeked = peek_matching(conn, queue_ref("Sales", cfg.transport), ID["D"], time_limit_s=0.5)
            result["seconds"] = time.monotonic() - started
            result["peeked"] = peeked
            missing = peek_matching(conn, queue_ref("NoSuchQueue", cfg.transport), ID["D"])
    finally:
        blocker.rollback()
        blocker.close()
    assert result["seconds"] < 5 and result["peeked"].error and not result["peeked"].rows
    # told as a wait for a lock (55P03), not as a statement that ran out of time (57014): the lock timeout
    # is shorter than the statement timeout
    assert "lock" in result["peeked"].error and "statement timeout" not in result["peeked"].error, result["peeked"]
    assert missing.missing and missing.error is None


def test_the_peek_returns_while_a_receiver_deletes(system: tuple[Path, Path, str]) -> None:
    """A receiver's uncommitted DELETE (the drain's way) does not hold the read, in a thread of its own."""
    conf, work, uri = system
    cfg = from_dict({**_settings(conf.parent / "lake", ["Sales"]), "transport": {"connection": uri}}, env={})
    receiver = psycopg.connect(uri)
    done = threading.Event()
    try:
        receiver.execute('DELETE FROM "public"."Sales" WHERE id = %s', (ID["D"],))
        with db.connect(cfg.transport) as conn:
            peeked = peek_matching(conn, queue_ref("Sales", cfg.transport), ID["D"], time_limit_s=2)
            done.set()
    finally:
        receiver.rollback()
        receiver.close()
    assert done.is_set() and peeked.error is None and [r.id for r in peeked.rows] == [ID["D"]]


def test_a_value_past_its_columns_range_is_not_a_value_of_it() -> None:
    """``--value 99999999999999999999`` for a bigint field failed the command with OverflowError (a review)."""
    from queuelake.pipeline.where.keys import typed_scalar

    assert typed_scalar("42", pa.int64()).as_py() == 42
    for text, typ in (("99999999999999999999", pa.int64()), ("300", pa.int8()), ("-1", pa.uint32())):
        with pytest.raises(ValueError, match="out of the range"):
            typed_scalar(text, typ)


def test_body_and_value_rules() -> None:
    assert body_matches(b'\xef\xbb\xbf{"OrderId": 4711}', "OrderId", "4711")
    assert body_matches(b'{"Order": {"Id": "x"}}', "Order.Id", "x")
    assert body_matches(b'{"Lines": [{"Sku": "a"}, {"Sku": "b"}]}', "Lines.Sku", "b")
    assert not body_matches(b'{"OrderId": 47110}', "OrderId", "4711")
    assert body_matches(b'<OrderPlaced xmlns="urn:x"><OrderId>4711</OrderId></OrderPlaced>', "OrderId", "4711")
    assert not body_matches(b"not a body", "OrderId", "4711")
    import pyarrow as pa

    assert typed_value("4711", pa.int64()) == 4711 and typed_value("TRUE", pa.bool_()) is True
    with pytest.raises(ValueError):
        typed_value("order-1", pa.int64())


def test_the_queues_of_endpoints_the_config_and_records_know_are_read(system: tuple[Path, Path, str]) -> None:
    """A message in no journal row is still found waiting in the input queue of an endpoint that the
    system names somewhere: an endpoint with a delayed store (Billing: its queue is beside it), a
    subscriber in the subscription table (Warehouse), and the queue a replay sent a copy to (Shipping,
    through ``replay_lineage``: the copy has a new MessageId and no journal row yet)."""
    conf, work, uri = system
    cfg = from_dict({**_settings(conf.parent / "lake", ["Sales"]), "transport": {"connection": uri}}, env={})
    t = cfg.transport
    waiting = {name: _order(name, 30 + i) for i, name in enumerate(("G", "H"), start=0)}
    with db.connect(t) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Warehouse"]))
        subscriptions.subscribe(
            conn, bridge_ref(t.subscription_table, t), "Warehouse", "Warehouse", "Sales.Messages.Events.OrderPlaced"
        )
        traffic.seed(conn, queue_ref("Billing", t), [waiting["G"]])
        traffic.seed(conn, queue_ref("Warehouse", t), [waiting["H"]])
        conn.commit()
    summary, rows, _ = _where(system, "--message-id", ID["G"])
    assert _places(rows) == [("waiting", BILLING)], rows
    summary, rows, _ = _where(system, "--message-id", ID["H"])
    assert _places(rows) == [("waiting", '"public"."Warehouse"')], rows
    # a drained order replayed --to Shipping: its copy waits there under a new MessageId
    drained = _where(system, "--message-id", OTHERS[30].id or "")[1]
    assert _places(drained) == [("drained", SALES)]
    replayed, _, proc = _cli(
        [
            "replay",
            "-c",
            str(conf),
            "--where",
            f"message_id = '{OTHERS[30].id}' AND queue = '{SALES}'",
            "--to",
            "Shipping",
        ],
        work,
        uri,
    )
    assert replayed["status"] == "ok", proc.stderr[-3000:]
    summary, rows, _ = _where(system, "--message-id", OTHERS[30].id or "")
    assert _places(rows) == [("drained", SALES), ("waiting", SHIPPING)], rows
    assert rows[1]["original_message_id"] == OTHERS[30].id and rows[1]["replay_kind"] == "replay"


def test_ids_and_values_written_escaped_are_found_waiting(system: tuple[Path, Path, str]) -> None:
    """System.Text.Json writes non-ASCII as ``\\u00FC``: the queues were searched for the raw spelling
    only, and such rows were found nowhere (a review)."""
    conf, _, uri = system
    cfg = from_dict({**_settings(conf.parent / "lake", ["Sales"]), "transport": {"connection": uri}}, env={})
    headers = (
        '{"NServiceBus.MessageId":"peek-\\u00FC-1","NServiceBus.ConversationId":"conv-\\u00FC",'
        '"NServiceBus.EnclosedMessageTypes":"Sales.Messages.Events.OrderPlaced"}'
    )
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref("Billing", cfg.transport), [OutgoingMessage(headers, b'{"City":"M\\u00FCnchen"}')])
        conn.commit()
    for args in (
        ["--message-id", "peek-\u00fc-1"],
        ["--conversation-id", "conv-\u00fc"],
        ["--field", "City", "--value", "M\u00fcnchen"],
    ):
        _, rows, _ = _where(system, *args)
        assert _places(rows) == [("waiting", BILLING)], (args, rows)


def test_a_compaction_does_not_make_the_typed_tables_look_behind(system: tuple[Path, Path, str], spark: Any) -> None:
    """The typed tables brought up to the journal, then ``maintain`` compacts the journal (a new Delta
    version, no new row): a business key's answer does not say the typed tables lag behind."""
    conf, work, uri = system
    cfg = from_dict({**_settings(conf.parent / "lake", ["Sales"]), "transport": {"connection": uri}}, env={})
    assert bodies_run.bodies(cfg, spark, open_lake(cfg.lake, spark))["status"] == "ok"
    maintained, _, proc = _cli(["maintain", "-c", str(conf)], work, uri)
    assert maintained["status"] == "ok", proc.stderr[-3000:]
    assert maintained["tables"]["messages"]["files_compacted"] > 0, maintained["tables"]["messages"]
    summary, rows, _ = _where(system, "--field", "OrderId", "--value", "order-A", "--no-peek")
    assert summary["typed"]["journal_files_untyped"] == 0
    assert summary["typed"]["journal_version_typed"] < summary["journal"]["version"]
    assert not any("typed tables cover" in note for note in summary["notes"]), summary["notes"]


def test_a_key_search_answers_when_the_log_since_the_typed_tables_is_cleaned(tmp_path: Path) -> None:
    """``bodies`` last ran 30 days ago: the journal's commits since then are past the Delta log's
    retention, cleaned at a checkpoint. How many files are not typed yet is unknown; the search still
    answers, and says the typed tables are behind (before, it failed: ``commit 3 is no longer in the log``)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    from queuelake.lake import record_tables, stage_tables
    from queuelake.pipeline.where.run import Query, where

    root = tmp_path / "lake"
    cfg = from_dict({"transport": {"connection": None}, "lake": {"root": str(root), "engine": "delta-rs"}}, env={})
    journal = str(root / "messages")
    empty = record_tables.MESSAGES.schema.empty_table()
    write_deltalake(journal, empty, mode="append", configuration={"delta.logRetentionDuration": "interval 0 seconds"})
    for _ in range(12):
        write_deltalake(journal, empty, mode="append")
    increments = stage_tables.BODY_INCREMENTS.schema
    typed_upto = {f.name: pa.array([2 if f.name == "journal_version" else None], f.type) for f in increments}
    write_deltalake(str(root / "body_increments"), pa.table(typed_upto, schema=increments))
    table = DeltaTable(journal)
    table.create_checkpoint()
    time.sleep(1)
    table.cleanup_metadata()
    assert not (root / "messages" / "_delta_log" / f"{3:020d}.json").exists()  # the commits since version 2 are gone

    answer = where(cfg, open_lake(cfg.lake), None, Query("key", "4711", field="OrderId", peek=False))
    assert answer.typed["journal_version_typed"] == 2 and answer.typed["journal_files_untyped"] == -1
    assert any("typed tables cover the journal up to version 2" in note for note in answer.notes), answer.notes


def test_an_erase_names_the_ids_its_predicate_compares_an_id_column_with() -> None:
    """Any substring of an erase's predicate was taken for an erased id: ``x``, ``2`` and ``879d`` were
    reported erased (a review). An id is named by a literal compared with an id column, or a LIKE of one."""
    from queuelake.pipeline.where.run import named_by

    where = "message_id = '879d068a-1' OR conversation_id = 'conv-r2' OR (queue = 'Sales' AND seq = 2)"
    assert named_by(where, ["x", "2", "879d", "Sales", "879d068a-1", "conv-r2"]) == ["879d068a-1", "conv-r2"]
    assert named_by("message_id LIKE 'gone-_1%'", ["gone-01", "gone-1", "xgone-01"]) == ["gone-01"]
    assert named_by("id IN ('a', 'b')", ["a", "c"]) == ["a"]
    assert named_by("not sql at all (", ["a"]) == []


def test_an_erased_message_is_said_erased_by_the_run_that_names_it(system: tuple[Path, Path, str]) -> None:
    """Last in this module: it erases A from the shared journal (and its typed row)."""
    conf, work, uri = system
    erased, _, proc = _cli(["erase", "-c", str(conf), "--where", f"message_id = '{ID['A']}'"], work, uri)
    assert erased["status"] == "ok", proc.stderr[-3000:]
    summary, rows, _ = _where(system, "--message-id", ID["A"])
    assert _places(rows) == [("erased", "messages")] and ID["A"] in rows[0]["predicate"]
    assert summary["erase_runs"] == 1 and summary["messages"][0]["now"] == "erased"
    # an erase of A's conversation: a note of the conversation's answer, not a message named by its id
    erased, _, proc = _cli(["erase", "-c", str(conf), "--where", f"conversation_id = '{CONVERSATION['A']}'"], work, uri)
    assert erased["status"] == "ok", proc.stderr[-3000:]
    summary, rows, _ = _where(system, "--conversation-id", CONVERSATION["A"])
    assert all(r.get("message_id") != CONVERSATION["A"] for r in rows), rows
    assert all(m["message_id"] != CONVERSATION["A"] for m in summary["messages"]), summary["messages"]
    assert any("named this conversation" in note for note in summary["notes"]), summary["notes"]
