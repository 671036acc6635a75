"""``queuelake find`` on real drained traffic: a conversation of three OrderPlaced events sent to Sales,
the first one's audit copy and failed copy, the second one's audit copy, among unrelated traffic in
all three queues; drained by ``queuelake drain`` into a delta-rs journal, then found by message id and
by conversation id as whole commands, and through the notebook helper and the lake port.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.config_sections import LakeConfig
from queuelake.lake.engines import open_lake
from queuelake.lake.lookup import _may_hold
from queuelake.lake.record_tables import MESSAGES
from queuelake.nsb import headers as hdr
from queuelake.pipeline.find import search
from queuelake.transport import db, installer
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import queue_ref

from tests.helpers.cli import CliResult, run_cli

SENT = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.timezone.utc)
CONVERSATION = "6f1c3a52-0d2b-4a8e-9b7c-2e5d4f6a8b01"
IDS = [
    "0b6f9d7e-3c1a-4e2b-8f5d-1a2b3c4d5e01",
    "0b6f9d7e-3c1a-4e2b-8f5d-1a2b3c4d5e02",
    "0b6f9d7e-3c1a-4e2b-8f5d-1a2b3c4d5e03",
]
BINARY_BODY = b"\xff\xfe\x00\x01 not text"


def _message(i: int) -> OutgoingMessage:
    headers = traffic.order_headers(IDS[i], SENT + dt.timedelta(seconds=i), conversation=CONVERSATION)
    body = BINARY_BODY if i == 2 else json.dumps({"OrderId": f"order-{i}", "Total": 10 + i}).encode()
    return OutgoingMessage(hdr.encode(headers), body, id=str(uuid.uuid4()))


@pytest.fixture(scope="module")
def drained(pg_uri: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(config file, work folder) of a lake whose journal holds the conversation and other traffic."""
    work = tmp_path_factory.mktemp("find")
    conf = work / "find.yaml"
    settings = {
        "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
        "lake": {"root": str(work / "lake"), "engine": "delta-rs"},
        "drain": {"queues": ["Sales", "audit", "error"], "batch_size": 25},
    }
    conf.write_text(json.dumps(settings))
    cfg = from_dict({**settings, "transport": {"connection": pg_uri}}, env={})
    ours = [_message(i) for i in range(3)]
    others = list(traffic.order_events(60, seed=34, start=SENT))
    audit = [traffic.audit_copy(ours[0], "Billing", SENT + dt.timedelta(seconds=1), 40)]
    audit.append(traffic.audit_copy(ours[1], "Billing", SENT + dt.timedelta(seconds=3), 40))
    audit += [traffic.audit_copy(m, "Billing", SENT + dt.timedelta(seconds=5), 40) for m in others[:30]]
    error = [
        traffic.failed_copy(ours[0], "Billing", "System.TimeoutException", "timed out", SENT + dt.timedelta(seconds=2))
    ]
    error += [traffic.failed_copy(m, "Shipping", "System.Exception", "no", SENT) for m in others[30:40]]
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        for name, messages in (("Sales", others[:20] + ours + others[20:]), ("audit", audit), ("error", error)):
            traffic.seed(conn, queue_ref(name, cfg.transport), messages)
    summary, _, _ = _cli(["drain", "-c", str(conf)], work, pg_uri)
    assert summary["status"] == "ok", summary
    return conf, work


def _cli(args: list[str], cwd: Path, uri: str = "") -> tuple[dict, str, CliResult]:
    """(the JSON summary, stdout before it, the process) of one command."""
    result = run_cli(args, uri, cwd=cwd)
    assert result.stdout.strip() and result.summary, result.stderr[-3000:]
    return result.summary, result.before_summary, result


def _json_rows(stdout: str) -> list[dict]:
    return [orjson.loads(line) for line in stdout.splitlines()]


def test_a_message_is_its_send_audit_copy_and_failed_copy_in_time_order(drained: tuple[Path, Path]) -> None:
    conf, work = drained
    summary, out, proc = _cli(["find", "-c", str(conf), "--message-id", IDS[0], "--json"], work)
    assert proc.returncode == 0 and summary["status"] == "ok", proc.stderr[-3000:]
    rows = _json_rows(out)
    # the audit copy processed at +1 s, the failure at +2 s, the send drained from Sales (now)
    assert [r["kind"] for r in rows] == ["audit", "failed", "sent"]
    assert [r["queue"] for r in rows] == ['"public"."audit"', '"public"."error"', '"public"."Sales"']
    assert {r["message_id"] for r in rows} == {IDS[0]} and summary["found"] == 3
    assert rows[1]["exception_type"] == "System.TimeoutException"
    assert rows[0]["processing_ended"] == "2026-11-01T09:00:01.040000Z"
    assert all(
        r["body_encoding"] == "utf-8" and json.loads(r["body"]) == {"OrderId": "order-0", "Total": 10} for r in rows
    )
    assert rows[2]["headers"][hdr.CONVERSATION_ID] == CONVERSATION
    assert summary["kinds"] == {"audit": 1, "failed": 1, "sent": 1}
    assert summary["files_scanned"] + summary["files_pruned"] == summary["files"] > 1
    assert 1 <= summary["files_read"] <= 3
    assert "3 row(s)" in proc.stderr


def test_a_conversation_is_all_of_it_message_by_message(drained: tuple[Path, Path]) -> None:
    conf, work = drained
    summary, out, proc = _cli(["find", "-c", str(conf), "--conversation-id", CONVERSATION, "--json"], work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _json_rows(out)
    assert [(r["message_id"], r["kind"]) for r in rows] == [
        (IDS[0], "audit"),
        (IDS[0], "failed"),
        (IDS[0], "sent"),
        (IDS[1], "audit"),
        (IDS[1], "sent"),
        (IDS[2], "sent"),
    ]
    assert summary["found"] == 6 and summary["queues"] == {
        '"public"."audit"': 2,
        '"public"."error"': 1,
        '"public"."Sales"': 3,
    }
    # a body that is not UTF-8 is shown in base64, whole
    assert rows[-1]["body_encoding"] == "base64" and base64.b64decode(rows[-1]["body"]) == BINARY_BODY


def test_the_table_is_for_people(drained: tuple[Path, Path]) -> None:
    conf, work = drained
    summary, out, proc = _cli(["find", "-c", str(conf), "--conversation-id", CONVERSATION], work)
    assert proc.returncode == 0 and summary["found"] == 6
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["TIME", "SENT", "(UTC)", "KIND"] and len(lines) == 7
    assert "2026-11-01 09:00:00.000" in lines[1] and "audit" in lines[1] and '"public"."audit"' in lines[1]
    assert "System.TimeoutException" in lines[2]
    assert '{"OrderId": "order-0", "Total": 10}' in lines[3]
    assert "base64:" in lines[6]


def test_a_guid_in_another_spelling_finds_the_same_rows(drained: tuple[Path, Path]) -> None:
    conf, work = drained
    summary, _, proc = _cli(["find", "-c", str(conf), "--message-id", "{" + IDS[0].upper() + "}"], work)
    assert proc.returncode == 0 and summary["found"] == 3 and IDS[0] in summary["searched"]


def test_an_unknown_id_finds_nothing_and_says_so(drained: tuple[Path, Path]) -> None:
    conf, work = drained
    summary, out, proc = _cli(["find", "-c", str(conf), "--message-id", str(uuid.uuid4())], work)
    assert proc.returncode == 0 and summary["status"] == "ok" and summary["found"] == 0
    assert out == "(nothing found)" and "nothing found" in proc.stderr
    summary, out, proc = _cli(["find", "-c", str(conf), "--conversation-id", "not-a-guid", "--json"], work)
    assert proc.returncode == 0 and summary["found"] == 0 and out == ""


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--message-id", ""], "the id is empty"),
        (["--message-id", " abc"], "white space"),
        (["--conversation-id", "a\tb"], "control characters"),
        (["--message-id", "x" * 201], "at most 200"),
        (["--message-id", IDS[0], "--conversation-id", CONVERSATION], "not allowed with"),
        ([], "one of the arguments --message-id --conversation-id is required"),
    ],
)
def test_a_bad_id_argument_is_a_usage_error(drained: tuple[Path, Path], args: list[str], said: str) -> None:
    conf, work = drained
    summary, _, proc = _cli(["find", "-c", str(conf), *args], work)
    assert proc.returncode == 2 and summary["error_kind"] == "usage"
    assert said in proc.stderr


def test_no_journal_yet_says_so(tmp_path: Path) -> None:
    conf = tmp_path / "empty.yaml"
    conf.write_text(json.dumps({"lake": {"root": str(tmp_path / "lake")}}))
    summary, out, proc = _cli(["find", "-c", str(conf), "--message-id", IDS[0]], tmp_path)
    assert proc.returncode == 1 and summary["error_kind"] == "lake" and out == ""
    assert "no journal yet" in summary["error"] and str(tmp_path / "lake") in summary["error"]


def test_staged_files_of_unfinished_claims_are_not_read(drained: tuple[Path, Path]) -> None:
    """A drain's staged files sit in the journal's folder until their claim is committed: find reads
    only the files the Delta log lists."""
    conf, _ = drained
    lake = open_lake(LakeConfig(root=str(conf.parent / "lake"), engine="delta-rs"))
    before = lake.lookup(MESSAGES.name, "message_id", [IDS[1]])
    staged = lake.stage(MESSAGES.name, before.rows)
    try:
        after = lake.lookup(MESSAGES.name, "message_id", [IDS[1]])
        assert after.rows.num_rows == before.rows.num_rows == 2
        assert after.files == before.files and after.version == before.version
    finally:
        lake.discard_staged(MESSAGES.name, staged)


def test_the_notebook_helper_gives_the_same_rows_as_a_frame(drained: tuple[Path, Path]) -> None:
    from queuelake.notebook_support import find_conversation, find_message

    conf, _ = drained
    root = str(conf.parent / "lake")
    message = find_message(root, IDS[0])
    assert list(message["kind"]) == ["audit", "failed", "sent"] and set(message["message_id"]) == {IDS[0]}
    conversation = find_conversation(open_lake(LakeConfig(root=root, engine="delta-rs")), CONVERSATION)
    assert len(conversation) == 6 and list(conversation["message_id"])[-1] == IDS[2]
    assert find_message(root, str(uuid.uuid4())).empty


def test_the_order_rule() -> None:
    """time_sent, then the row's own moment (failure, processing end or start, else drained_at), then
    drained_at, queue and seq; rows without time_sent last."""
    t = [SENT + dt.timedelta(seconds=s) for s in range(6)]
    base = {"outcome": "landed", "message_id": "m", "batch_id": "b", "id": "i"}
    rows = [
        {**base, "queue": "q", "seq": 1, "drained_at": t[5], "time_sent": None},  # quarantined-like: last
        {**base, "queue": "r", "seq": 9, "drained_at": t[4], "time_sent": t[0]},  # retry drained at +4
        {**base, "queue": "e", "seq": 2, "drained_at": t[5], "time_sent": t[0], "time_of_failure": t[2]},
        {**base, "queue": "a", "seq": 3, "drained_at": t[5], "time_sent": t[0], "processing_ended": t[1]},
        {**base, "queue": "a", "seq": 4, "drained_at": t[5], "time_sent": t[0], "processing_started": t[3]},
    ]
    table = pa.Table.from_pylist(rows, schema=MESSAGES.schema)
    ordered = search.in_time_order(table).column("seq").to_pylist()
    assert ordered == [3, 2, 4, 9, 1]


def test_truncated_log_bounds_never_drop_a_match() -> None:
    value = "6490acfe-514d-4d8b-b387-65a851d28ac4"
    assert _may_hold("6490", "6490acfe-514d-4d8b-b387-65a8", [value])  # a maximum cut short still holds it
    assert _may_hold(None, None, [value])
    assert not _may_hold("7", "8", [value]) and not _may_hold("0", "5", [value])


def test_after_maintain_the_same_rows_in_the_same_order(drained: tuple[Path, Path]) -> None:
    """Last in this module: it compacts the shared journal."""
    conf, work = drained
    _, before, _ = _cli(["find", "-c", str(conf), "--conversation-id", CONVERSATION, "--json"], work)
    maintained, _, proc = _cli(["maintain", "-c", str(conf)], work)
    assert maintained["status"] == "ok" and maintained["tables"]["messages"]["files_after"] == 1, proc.stderr[-2000:]
    summary, after, _ = _cli(["find", "-c", str(conf), "--conversation-id", CONVERSATION, "--json"], work)
    assert summary["files"] == 1 and summary["found"] == 6
    assert after == before
