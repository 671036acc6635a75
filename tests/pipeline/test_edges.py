"""A row never stops a run, at any stage (issue 30): values at the edges of their types.

The strategy puts every column of a queue row at the edges of its type (Expires: infinity, BC dates,
years past 9999, the last microsecond of 9999; header times at .NET's DateTime.MinValue/MaxValue and
just past them; header texts empty, escaped NUL, non-BMP, longer than the statistics keep; bodies
null, empty, every byte; ids at the ends of the uuid space; seq at the top of the transport's 32-bit
serial), mixed with ordinary rows. The real ``queuelake drain`` runs end to end through each receive
driver, and must exit 0 with the queue empty and every row journalled exactly once with the outcome
the transport's own reading gives: expired as the database judges ``expires <= now()``, landed when
the reference header decoder accepts the row, else quarantined with its raw text.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
import psycopg
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from queuelake.config import from_dict
from queuelake.errors import HeaderError
from queuelake.lake.reading import read_table
from queuelake.nsb import headers as hdr
from queuelake.transport import db, installer
from queuelake.transport.embedded import odbc_from_uri

from tests.helpers.cli import CliResult, run_cli
from tests.helpers.edges import BOTTOM, EXPIRES, ORDINARY_TIME, TOP, WIRE_TIMES
from tests.helpers.faults import stats_fail_on, storage_down

TEXTS = ["", " ", "\u0000", "\U0001f600", "\ufeff", "x" * 65, "é" * 40, "y" * 70_000, "9" * 40, ORDINARY_TIME]
TIME_KEYS = [hdr.TIME_SENT, hdr.PROCESSING_STARTED, hdr.PROCESSING_ENDED, hdr.TIME_OF_FAILURE, hdr.DELIVER_AT]
TEXT_KEYS = [
    hdr.MESSAGE_ID,
    hdr.CONVERSATION_ID,
    hdr.CORRELATION_ID,
    hdr.CONTENT_TYPE,
    hdr.ORIGINATING_ENDPOINT,
    hdr.FAILED_QUEUE,
    hdr.EXCEPTION_MESSAGE,
    hdr.TIME_TO_BE_RECEIVED,
    "Custom.Header",
]
RAW_HEADERS = ["", "   ", "null", "[]", "{}", '{"a":1}', '{"a":"\\ud800"}', '{"a":"x"', '{"a":"\\u0000"}']
IDS = ["00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"]
BODIES = [None, b"", bytes(range(256)), b"\x00" * 16, b"\xef\xbb\xbf{}", b"b" * 300_000]


@st.composite
def header_texts(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(RAW_HEADERS))
    headers: dict[str, str | None] = {hdr.ENCLOSED_MESSAGE_TYPES: "Sales.OrderPlaced, Sales"}
    for key in draw(st.lists(st.sampled_from(TIME_KEYS), max_size=3, unique=True)):
        headers[key] = draw(st.sampled_from(WIRE_TIMES))
    for key in draw(st.lists(st.sampled_from(TEXT_KEYS), max_size=3, unique=True)):
        headers[key] = draw(st.sampled_from([*TEXTS, None]))
    if draw(st.booleans()):
        headers[hdr.MESSAGE_INTENT] = draw(st.sampled_from(["Send", "publish", " Reply", "\u0130", ""]))
    text = orjson.dumps(headers).decode()
    return text.replace("/", "\\/") if draw(st.booleans()) else text  # writers in the wild escape '/'


@st.composite
def queue_rows(draw: st.DrawFn) -> dict:
    ordinary = draw(st.integers(0, 3)) == 0
    return {
        "id": draw(st.sampled_from(IDS)) if draw(st.integers(0, 9)) == 0 else None,
        "expires": None if ordinary else draw(st.sampled_from(list(EXPIRES))),
        "headers": orjson.dumps({hdr.MESSAGE_ID: "m", hdr.TIME_SENT: ORDINARY_TIME}).decode()
        if ordinary
        else draw(header_texts()),
        "body": b"{}" if ordinary else draw(st.sampled_from(BODIES)),
    }


def unique_ids(rows: list[dict]) -> list[dict]:
    seen: set[str] = set()
    out = []
    for row in rows:
        row_id = row["id"]
        if row_id is None or row_id in seen:
            row_id = str(uuid.uuid4())
        seen.add(row_id)
        out.append({**row, "id": row_id})
    return out


def fill(uri: str, rows: list[dict], near_top: bool) -> dict[int, dict]:
    """Insert the rows as another program would (literal SQL values, the transport's columns);
    returns them by seq with the database's own verdict on expiry."""
    with psycopg.connect(uri, autocommit=True) as conn:
        if near_top:  # the transport's seq is a 32-bit serial: the last values it can take
            conn.execute(
                """SELECT setval(pg_get_serial_sequence('"public"."Edges"', 'seq'), %s)""", (2147483647 - len(rows),)
            )
        by_seq = {}
        for row in rows:
            seq, expired = conn.execute(
                'INSERT INTO "public"."Edges" (id, expires, headers, body) '
                "VALUES (%s, CAST(%s AS timestamp), %s, %s) "
                "RETURNING seq, (expires IS NOT NULL AND expires <= (now() AT TIME ZONE 'UTC'))",
                (row["id"], row["expires"], row["headers"], row["body"]),
            ).fetchone()
            by_seq[seq] = {**row, "expired": expired}
    return by_seq


def reference_accepts(row: dict) -> bool:
    try:
        hdr.decode(row["headers"], row["id"])
    except HeaderError:
        return False
    return True


def drain_cli(tmp: Path, uri: str, driver: str) -> tuple[CliResult, dict]:
    config = {
        "transport": {"connection": "${QUEUELAKE_CONNECTION}", **({"driver": "pyodbc"} if driver == "pyodbc" else {})},
        "lake": {"root": str(tmp / "lake"), "engine": "delta-rs"},
        "drain": {"queues": ["Edges"], "batch_size": 16, "receive_driver": driver},
    }
    (tmp / "edges.json").write_text(json.dumps(config))
    connection = odbc_from_uri(uri) if driver == "pyodbc" else uri
    proc = run_cli(["drain", "-c", str(tmp / "edges.json")], connection, cwd=Path.cwd(), timeout=300)
    return proc, json.loads(proc.stdout.strip().splitlines()[-1])


def check_journal(lake: Path, sent: dict[int, dict]) -> None:
    journal = read_table(str(lake / "messages")).to_pylist()
    seqs = [r["seq"] for r in journal]
    assert len(seqs) == len(set(seqs)) and set(seqs) == set(sent), "every row journalled exactly once"
    for row in journal:
        source = sent[row["seq"]]
        assert row["id"] == source["id"]
        if source["expired"]:
            assert row["outcome"] == "expired" and row["body"] is None, row["seq"]
        elif reference_accepts(source):
            assert row["outcome"] == "landed", (source, row["error"])
            assert row["body"] == source["body"]
        else:
            assert row["outcome"] == "quarantined" and row["error"], source
            assert row["body"] == source["body"] and row["raw_headers"] is not None
        expected = EXPIRES.get(source["expires"])
        if expected is not None:
            assert (row["expires"], row["raw_expires"]) == expected, (source["expires"], row)
        elif source["expires"] is not None:
            assert row["raw_expires"] is None and row["expires"] is not None


@pytest.fixture
def edge_database(more_pg_databases: Callable[..., str]) -> Callable[[], str]:
    def make() -> str:
        uri = more_pg_databases("edges")
        cfg = from_dict({"transport": {"connection": uri}, "drain": {"queues": ["Edges"]}}, env={})
        with db.connect(cfg.transport) as conn:
            installer.install(conn, installer.plan(cfg))
        return uri

    return make


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["adbc", "psycopg", "pyodbc"])
@settings(
    max_examples=12,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # each example is a real drain: no shrinking loops
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(rows=st.lists(queue_rows(), min_size=1, max_size=40), near_top=st.booleans())
def test_edge_values_never_stop_a_drain(
    edge_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory, driver: str, rows: list, near_top: bool
) -> None:
    uri = edge_database()
    tmp = tmp_path_factory.mktemp(f"edges-{driver}")
    sent = fill(uri, unique_ids(rows), near_top)
    proc, summary = drain_cli(tmp, uri, driver)
    assert proc.returncode == 0 and summary["status"] == "ok", (summary, proc.stderr[-3000:])
    assert summary["dequeued"] == len(sent)
    with psycopg.connect(uri) as conn:
        assert conn.execute('SELECT count(*) FROM "public"."Edges"').fetchone()[0] == 0
    check_journal(tmp / "lake", sent)


@pytest.mark.parametrize("driver", ["adbc", "psycopg", "pyodbc"])
def test_every_named_edge_in_one_queue(edge_database: Callable[[], str], tmp_path: Path, driver: str) -> None:
    """Each listed edge value once, in one queue (the cases the issue names, and their neighbours),
    through each driver: what each becomes is docs/guarantees.md's table."""
    uri = edge_database()
    rows = [{"id": None, "expires": e, "headers": '{"NServiceBus.MessageId":"m"}', "body": b"x"} for e in EXPIRES]
    for when in WIRE_TIMES:
        for key in (hdr.TIME_SENT, hdr.PROCESSING_STARTED, hdr.TIME_OF_FAILURE):
            rows.append({"id": None, "expires": None, "headers": orjson.dumps({key: when}).decode(), "body": b"y"})
    twice = '{"NServiceBus.MessageId":"first","NServiceBus.MessageId":"second"}'  # the compact form
    twice_escaped = '{"NServiceBus.MessageId":"a\\/1", "NServiceBus.MessageId":"a\\/2"}'  # the parsers' form
    for text in (twice, twice_escaped, "\n \t "):
        rows.append({"id": None, "expires": None, "headers": text, "body": b"z"})
    sent = fill(uri, unique_ids(rows), near_top=True)
    proc, summary = drain_cli(tmp_path, uri, driver)
    assert proc.returncode == 0 and summary["status"] == "ok", (summary, proc.stderr[-3000:])
    check_journal(tmp_path / "lake", sent)
    journal = {r["seq"]: r for r in read_table(str(tmp_path / "lake" / "messages")).to_pylist()}
    by_headers = {r["headers"]: s for s, r in sent.items()}
    # a key twice: its last value, as .NET's JSON readers give it; headers of white space: none
    assert journal[by_headers[twice]]["message_id"] == "second"
    assert journal[by_headers[twice_escaped]]["message_id"] == "a/2"
    blank = journal[by_headers["\n \t "]]
    assert blank["outcome"] == "landed" and blank["message_id"] == str(sent[by_headers["\n \t "]]["id"])
    max_value = by_headers[orjson.dumps({hdr.TIME_SENT: WIRE_TIMES[0]}).decode()]
    min_value = by_headers[orjson.dumps({hdr.TIME_SENT: WIRE_TIMES[1]}).decode()]
    assert journal[max_value]["time_sent"] == TOP and journal[min_value]["time_sent"] == BOTTOM
    outcomes = {sent[s]["expires"]: r["outcome"] for s, r in journal.items() if sent[s]["headers"].endswith('"m"}')}
    assert outcomes["infinity"] == "landed" and outcomes["-infinity"] == "expired"
    assert outcomes["20000-01-01 00:00:00"] == "landed" and outcomes["0044-03-15 12:30:00.5 BC"] == "expired"


def _drain_in_process(uri: str, lake: Path, receive_driver: str = "auto") -> dict:
    from queuelake.lake.engines import open_lake

    from tests.helpers.stages import drain

    cfg = from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(lake), "engine": "delta-rs"},
            "drain": {
                "queues": ["Edges"],
                "batch_size": 50,
                "workers_per_queue": 1,
                "receive_driver": receive_driver,
            },
        },
        env={},
    )
    return drain(cfg, open_lake(cfg.lake))


def test_a_row_that_cannot_be_written_is_quarantined_not_a_blocked_queue(
    edge_database: Callable[[], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The safety net behind the fixes above: whatever fails for one row between the build and the
    claim (here the file statistics, made to fail on one header value, as the last millisecond of
    9999 did) quarantines that row with the error and its raw text; its batch's other rows land."""
    stats_fail_on(monkeypatch, "poison")
    uri = edge_database()
    rows = [
        {"id": None, "expires": None, "headers": orjson.dumps({hdr.MESSAGE_ID: f"m{i}"}).decode(), "body": b"x"}
        for i in range(30)
    ]
    rows[17]["headers"] = orjson.dumps({hdr.MESSAGE_ID: "poison"}).decode()
    sent = fill(uri, unique_ids(rows), near_top=False)
    summary = _drain_in_process(uri, tmp_path / "lake")
    assert summary["status"] == "ok" and (summary["landed"], summary["quarantined"]) == (29, 1), summary
    journal = {r["seq"]: r for r in read_table(str(tmp_path / "lake" / "messages")).to_pylist()}
    assert set(journal) == set(sent)
    (bad,) = [r for r in journal.values() if r["outcome"] == "quarantined"]
    assert bad["raw_headers"] == rows[17]["headers"] and bad["body"] == b"x" and bad["headers"] is None
    assert bad["error"] == "journal could not be stored for this row: OverflowError: date value out of range"


@pytest.mark.parametrize("receive_driver", ["adbc", "psycopg"])
def test_a_row_whose_id_is_null_is_quarantined_under_a_stand_in_id(
    edge_database: Callable[[], str], tmp_path: Path, receive_driver: str
) -> None:
    """A table not made by the transport may allow a NULL id; the journal's id takes none. The row was
    quarantined with its NULL id, refused again, and failed its queue on every run (a review): it is
    kept under an id made from its queue and seq, the reason says so, the other rows land. Received
    through psycopg, the row failed before it reached the journal (a review)."""
    uri = edge_database()
    with psycopg.connect(uri, autocommit=True) as conn:
        (key,) = conn.execute(
            """SELECT conname FROM pg_constraint WHERE conrelid = '"public"."Edges"'::regclass AND contype = 'p'"""
        ).fetchone()
        conn.execute(f'ALTER TABLE "public"."Edges" DROP CONSTRAINT "{key}"')  # the table's own key name
        conn.execute('ALTER TABLE "public"."Edges" ALTER COLUMN id DROP NOT NULL')
    rows = unique_ids([{"id": None, "expires": None, "headers": "{}", "body": b"x"} for _ in range(5)])
    rows[2]["id"] = None
    sent = fill(uri, rows, near_top=False)
    summary = _drain_in_process(uri, tmp_path / "lake", receive_driver)
    assert summary["status"] == "ok" and (summary["landed"], summary["quarantined"]) == (4, 1), summary
    journal = {r["seq"]: r for r in read_table(str(tmp_path / "lake" / "messages")).to_pylist()}
    assert set(journal) == set(sent)
    (bad,) = [r for r in journal.values() if r["outcome"] == "quarantined"]
    assert bad["error"].startswith(f"the row's id is NULL (kept under the id {bad['id']}); "), bad["error"]
    assert uuid.UUID(bad["id"]) and bad["body"] == b"x"
    with psycopg.connect(uri) as conn:
        assert conn.execute('SELECT count(*) FROM "public"."Edges"').fetchone()[0] == 0


def test_a_row_whose_seq_is_null_is_named_not_taken_for_a_held_one(
    edge_database: Callable[[], str], tmp_path: Path
) -> None:
    """The receive takes rows by seq; a table made by hand may let a NULL in. The run said the row was
    held by another session for over 5 s (a review): it names it as a row without a seq."""
    uri = edge_database()
    with psycopg.connect(uri, autocommit=True) as conn:
        (key,) = conn.execute(
            """SELECT conname FROM pg_constraint WHERE conrelid = '"public"."Edges"'::regclass AND contype = 'p'"""
        ).fetchone()
        conn.execute(f'ALTER TABLE "public"."Edges" DROP CONSTRAINT "{key}"')
        conn.execute('ALTER TABLE "public"."Edges" ALTER COLUMN seq DROP NOT NULL')
    sent = fill(
        uri, unique_ids([{"id": None, "expires": None, "headers": "{}", "body": b"x"} for _ in range(3)]), False
    )
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(
            'INSERT INTO "public"."Edges" (seq, id, expires, headers, body) VALUES (NULL, %s, NULL, %s, %s)',
            (str(uuid.uuid4()), "{}", b"x"),
        )
    summary = _drain_in_process(uri, tmp_path / "lake")
    (queue,) = summary["queues"]
    assert (summary["status"], summary["landed"]) == ("incomplete", len(sent)), summary
    assert (queue["rows_without_seq"], queue["held_by_others"]) == (1, 0), queue
    assert '1 row(s) in "public"."Edges" have a NULL seq' in queue["error"], queue["error"]
    # again, now that every row left has a NULL seq: it read "empty", ok, and the row stayed unnamed
    again = _drain_in_process(uri, tmp_path / "lake")
    (queue,) = again["queues"]
    assert (again["status"], again["landed"], queue["rows_without_seq"]) == ("incomplete", 0, 1), again


def test_a_lake_that_fails_whatever_the_rows_fails_the_run_and_loses_nothing(
    edge_database: Callable[[], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure that is not about a row (every write to the lake's storage fails, while the same
    rows write fine elsewhere) is not turned into quarantined rows: the run fails loudly and the
    batch stays in the queue."""
    lake = tmp_path / "lake"
    storage_down(monkeypatch, lake)
    uri = edge_database()
    rows = [{"id": None, "expires": None, "headers": "{}", "body": b"x"} for _ in range(10)]
    fill(uri, unique_ids(rows), near_top=False)
    summary = _drain_in_process(uri, lake)
    assert summary["status"] == "failed" and "No space left on device" in summary["queues"][0]["error"], summary
    with psycopg.connect(uri) as conn:
        assert conn.execute('SELECT count(*) FROM "public"."Edges"').fetchone()[0] == 10


def test_a_journal_made_before_raw_expires_gains_it(edge_database: Callable[[], str], tmp_path: Path) -> None:
    """A journal an older queuelake made has no raw_expires: the next drain adds the column (old rows
    read it as null) and lands a clamped Expires with its original text."""
    from queuelake.lake.delta_rs.engine import DeltaRsEngine
    from queuelake.pipeline.journal.schema import MESSAGES, MESSAGES_SCHEMA

    old = DeltaRsEngine(str(tmp_path / "lake"))
    old.create_table(MESSAGES, pa.schema([f for f in MESSAGES_SCHEMA if f.name != "raw_expires"]))
    uri = edge_database()
    fill(uri, unique_ids([{"id": None, "expires": "infinity", "headers": "{}", "body": b"x"}]), near_top=False)
    summary = _drain_in_process(uri, tmp_path / "lake")
    assert summary["status"] == "ok" and summary["landed"] == 1, summary
    (row,) = read_table(str(tmp_path / "lake" / "messages")).to_pylist()
    assert (row["expires"], row["raw_expires"]) == (TOP, "infinity")
