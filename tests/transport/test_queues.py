"""send / receive / peek / purge against a real PostgreSQL, through both drivers."""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from queuelake.nsb import headers as hdr
from queuelake.transport import binary_copy, installer, queues
from queuelake.transport.db import Connection
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import TableRef

from tests.helpers.cli import run_cli
from tests.helpers.db import connection_string, sql
from tests.helpers.transport import connect, make_config, write_config

HEADERS = [
    # unicode, emoji (non-BMP), escaped slashes, null values: the column's text comes back as written
    '{"NServiceBus.MessageId":"m1","Text":"héllo wörld ñ 中文 Ελληνικά 😀🚀","Path":"a\\/b\\/c","Null":null}',
    # surrogate-pair escapes as .NET writers emit them, and every JSON escape
    '{"Emoji":"\\ud83d\\ude00","Esc":"\\"q\\" \\\\ \\b\\f\\n\\r\\t \\u00e9"}',
    "",  # an empty column means no headers; it must still round-trip
    '{"Big":"' + ("x€😀" * 60_000) + '"}',  # ~0.5 MB of headers
    '{"Zero":"\\u0000","Quote\'s":"it\'s"}',
    '{\r\n  "NServiceBus.MessageId": "crlf",\n\t"x": "y"\n}',  # raw CR, LF and TAB between tokens
]
BODIES: list[bytes | None] = [
    None,
    b"",
    bytes(range(256)) * 4,
    b'\xef\xbb\xbf{"Id":1}',  # a UTF-8 BOM
    b"\x00" * 17,
    os.urandom(10 * 1024 * 1024),  # 10 MB
]


def _queue_name() -> str:
    return f"Q_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def queue(pg_uri: str, pg_driver: str) -> Iterator[tuple[Connection, TableRef]]:
    """A freshly installed queue and an open connection of the driver under test."""
    name = _queue_name()
    cfg = make_config(pg_uri, pg_driver, [name])
    conn = connect(pg_uri, pg_driver)
    try:
        installer.install(conn, installer.plan(cfg))
        yield conn, installer.plan(cfg).queues[0]
    finally:
        conn.close()


def _send(conn: Connection, ref: TableRef, messages: list[OutgoingMessage]) -> None:
    with conn.transaction():
        queues.send(conn, ref, messages)


def _receive(conn: Connection, ref: TableRef, n: int) -> list[queues.ReceivedRow]:
    with conn.transaction():
        return queues.receive_batch(conn, ref, n)


def _messages(count: int, prefix: str = "m") -> list[OutgoingMessage]:
    return [
        OutgoingMessage(f'{{"NServiceBus.MessageId":"{prefix}{i}"}}', b"%d" % i, id=str(uuid.uuid4()))
        for i in range(count)
    ]


def test_send_then_receive_is_byte_identical(queue: tuple[Connection, TableRef]) -> None:
    conn, ref = queue
    sent = [OutgoingMessage(h, b, id=str(uuid.uuid4())) for h in HEADERS for b in BODIES[:-1]]
    sent.append(OutgoingMessage(HEADERS[0], BODIES[-1], id=str(uuid.uuid4())))
    _send(conn, ref, sent)
    got = _receive(conn, ref, len(sent) + 5)
    assert len(got) == len(sent)
    for message, row in zip(sent, got, strict=True):
        assert row.id == message.id
        assert row.headers == message.headers
        assert type(row.body) is type(message.body)
        assert row.body == message.body
        assert row.expired is False and row.expires is None
    assert [r.seq for r in got] == sorted(r.seq for r in got)
    assert _receive(conn, ref, 10) == []


def test_a_batch_sent_as_columns_is_the_batch_sent_row_by_row(queue: tuple[Connection, TableRef]) -> None:
    """``binary_copy.send`` (one COPY stream assembled by Arrow on PostgreSQL, row by row elsewhere)
    writes what ``queues.send`` writes: the same ids, headers and bodies byte for byte, and Expires
    from the same database clock, for every header text, body (NULL, empty, binary, 10 MB) and TTBR."""
    conn, ref = queue
    ttbrs = [None, 1, 10_000, 86_400_000 * 365 * 99]  # none, a millisecond, ten seconds, 99 years
    shapes = [(h, b) for h in HEADERS for b in BODIES[:-1]] + [(HEADERS[0], BODIES[-1])]
    sent = [OutgoingMessage(h, b, id=str(uuid.uuid4()), ttbr_ms=ttbrs[i % 4]) for i, (h, b) in enumerate(shapes)]
    by_rows = [OutgoingMessage(m.headers, m.body, id=str(uuid.uuid4()), ttbr_ms=m.ttbr_ms) for m in sent]
    with conn.transaction():  # one transaction: both sends read the same now()
        assert binary_copy.send(conn, ref, binary_copy.Messages.of(sent)) == len(sent)
        queues.send(conn, ref, by_rows)
        assert binary_copy.send(conn, ref, binary_copy.Messages.of([])) == 0
    got = _receive(conn, ref, 2 * len(sent) + 5)
    assert len(got) == 2 * len(sent)
    columns, rows = got[: len(sent)], got[len(sent) :]
    for message, row, twin in zip(sent, columns, rows, strict=True):
        assert row.id == message.id
        assert row.headers == message.headers == twin.headers
        assert type(row.body) is type(message.body) and row.body == message.body == twin.body
        assert row.expires == twin.expires and (row.expires is None) == (message.ttbr_ms is None)


def test_receive_one_is_byte_identical(queue: tuple[Connection, TableRef]) -> None:
    conn, ref = queue
    message = OutgoingMessage(HEADERS[0], BODIES[2], id=str(uuid.uuid4()))
    _send(conn, ref, [message])
    with conn.transaction():
        row = queues.receive_one(conn, ref)
    assert row is not None
    assert (row.id, row.headers, row.body, row.expired) == (message.id, message.headers, message.body, False)
    with conn.transaction():
        assert queues.receive_one(conn, ref) is None


def test_a_duplicate_id_fails_the_send(queue: tuple[Connection, TableRef]) -> None:
    conn, ref = queue
    same = str(uuid.uuid4())
    _send(conn, ref, [OutgoingMessage("{}", b"1", id=same)])
    with pytest.raises(Exception) as info:
        _send(conn, ref, [OutgoingMessage("{}", b"2", id=same)])
    assert ref.canonical in str(info.value)
    assert [r.body for r in _receive(conn, ref, 10)] == [b"1"]


def test_receive_is_fifo_by_seq_across_batches(queue: tuple[Connection, TableRef]) -> None:
    conn, ref = queue
    first = _messages(40, "a")
    _send(conn, ref, first)
    got = _receive(conn, ref, 7) + _receive(conn, ref, 7)
    later = _messages(15, "b")
    _send(conn, ref, later)
    while batch := _receive(conn, ref, 7):
        assert len(batch) <= 7
        got += batch
    assert [r.id for r in got] == [m.id for m in first + later]
    seqs = [r.seq for r in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_peek_and_oldest(queue: tuple[Connection, TableRef]) -> None:
    conn, ref = queue
    with conn.transaction():
        assert queues.peek(conn, ref) == 0
        assert queues.oldest_headers(conn, ref) is None
    sent = _messages(5)
    _send(conn, ref, sent)
    with conn.transaction():
        assert queues.peek(conn, ref) == 5
        assert queues.oldest_headers(conn, ref) == sent[0].headers


def test_peek_and_oldest_on_a_table_made_by_hand(queue: tuple[Connection, TableRef]) -> None:
    """A table not made by the transport may allow a NULL seq and keep its headers as ``jsonb``: the
    depth is the span of the rows with a seq (DESC sorts NULLs first: it read 0, and the drain said the
    queue was empty with rows waiting), and the oldest row's headers read as text (``status`` failed
    with a TypeError; a review)."""
    conn, ref = queue
    sent = _messages(3)
    _send(conn, ref, sent)
    cur = conn.raw.cursor()
    cur.execute(f"ALTER TABLE {ref.qualified} ALTER COLUMN seq DROP NOT NULL")
    cur.execute(f"ALTER TABLE {ref.qualified} ALTER COLUMN headers TYPE jsonb USING headers::jsonb")
    cur.execute(f"UPDATE {ref.qualified} SET seq = NULL WHERE id = '{sent[2].id}'")  # a uuid of the test's
    conn.commit()
    with conn.transaction():
        assert queues.peek(conn, ref) == 2
        assert queues.newest_seq(conn, ref) is not None
        oldest = queues.oldest_headers(conn, ref)
    assert oldest is not None and json.loads(oldest) == json.loads(sent[0].headers)


def test_receive_skips_rows_locked_by_another_transaction(
    queue: tuple[Connection, TableRef], pg_uri: str, pg_driver: str
) -> None:
    conn, ref = queue
    sent = _messages(10)
    _send(conn, ref, sent)

    holder = connect(pg_uri, pg_driver)  # the transport's own receive, transaction left open
    locker = psycopg.connect(pg_uri)  # a plain SELECT ... FOR UPDATE, transaction left open
    try:
        held = queues.receive_one(holder, ref)
        assert held is not None and held.id == sent[0].id
        locked = locker.execute(f"SELECT id FROM {ref.qualified} WHERE id = %s FOR UPDATE", (sent[4].id,)).fetchall()
        assert len(locked) == 1

        # a waiting receive would hang here; make that a failure instead
        conn.raw.cursor().execute("SET lock_timeout = '20s'")
        got = _receive(conn, ref, 100)
        assert [r.id for r in got] == [m.id for m in sent if m.id not in (sent[0].id, sent[4].id)]
    finally:
        holder.rollback()
        holder.close()
        locker.rollback()
        locker.close()
    # both rolled back: the rows come back, oldest first
    assert [r.id for r in _receive(conn, ref, 100)] == [sent[0].id, sent[4].id]


def test_two_concurrent_receivers_share_without_overlap(pg_uri: str, pg_driver: str) -> None:
    name = _queue_name()
    cfg = make_config(pg_uri, pg_driver, [name])
    ref = installer.plan(cfg).queues[0]
    sent = _messages(300)
    with connect(pg_uri, pg_driver) as conn:
        installer.install(conn, installer.plan(cfg))
        _send(conn, ref, sent)

    barrier = threading.Barrier(2)
    results: dict[int, list[list[queues.ReceivedRow]]] = {0: [], 1: []}
    errors: list[BaseException] = []

    def receiver(k: int) -> None:
        try:
            with connect(pg_uri, pg_driver) as conn:
                barrier.wait(timeout=30)
                while batch := _receive(conn, ref, 4):
                    results[k].append(batch)
                    time.sleep(0)  # let the other receiver in
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=receiver, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    ids = [r.id for k in (0, 1) for batch in results[k] for r in batch]
    assert len(ids) == len(set(ids)), "a row was received twice"
    assert set(ids) == {m.id for m in sent}
    for k in (0, 1):
        for batch in results[k]:
            assert [r.seq for r in batch] == sorted(r.seq for r in batch)
        seqs = [r.seq for batch in results[k] for r in batch]
        assert seqs == sorted(seqs), "each receiver sees its batches in seq order"
    assert sql(pg_uri, f"SELECT count(*) FROM {ref.qualified}") == [(0,)]


@pytest.fixture
def skewed_clocks(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The client's local clock and the database session are at UTC+14; the server's UTC is truth."""
    zone = "Pacific/Kiritimati"
    monkeypatch.setenv("PGTZ", zone)  # libpq (psycopg and psqlodbc) sets the session TimeZone
    old = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        yield zone
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


def test_expired_follows_the_database_clock(pg_uri: str, pg_driver: str, skewed_clocks: str) -> None:
    name = _queue_name()
    cfg = make_config(pg_uri, pg_driver, [name])
    ref = installer.plan(cfg).queues[0]
    with connect(pg_uri, pg_driver) as conn:
        installer.install(conn, installer.plan(cfg))
        _check_expiry(conn, ref, skewed_clocks)


def _check_expiry(conn: Connection, ref: TableRef, zone: str) -> None:
    cur = conn.raw.cursor()
    cur.execute("SHOW TimeZone")
    assert cur.fetchone()[0] == zone  # the session's clock disagrees with UTC
    assert time.localtime().tm_gmtoff == 14 * 3600  # the client's clock disagrees too

    cur.execute(
        f"INSERT INTO {ref.qualified} (id, expires, headers, body) VALUES "
        "(gen_random_uuid(), (now() AT TIME ZONE 'UTC') - interval '1 hour', '{\"k\":\"sql-past\"}', NULL), "
        "(gen_random_uuid(), (now() AT TIME ZONE 'UTC') + interval '1 hour', '{\"k\":\"sql-future\"}', NULL)"
    )
    conn.commit()
    _send(
        conn,
        ref,
        [
            OutgoingMessage('{"k":"ttbr-future"}', b"f", ttbr_ms=3_600_000),
            OutgoingMessage('{"k":"ttbr-past"}', b"p", ttbr_ms=-3_600_000),
            OutgoingMessage('{"k":"ttbr-none"}', b"n", ttbr_ms=None),
            OutgoingMessage('{"k":"ttbr-tiny-past"}', b"t", ttbr_ms=-1),
        ],
    )
    with conn.transaction():
        now = queues.db_utc_now(conn)
    got = {r.headers: r for r in _receive(conn, ref, 10)}
    expired = {h.split('"')[3]: r.expired for h, r in got.items()}
    assert expired == {
        "sql-past": True,
        "sql-future": False,
        "ttbr-future": False,
        "ttbr-past": True,
        "ttbr-none": False,
        "ttbr-tiny-past": True,
    }
    assert now.tzinfo is not None and now.utcoffset() == dt.timedelta(0)
    hour, slack = dt.timedelta(hours=1), dt.timedelta(minutes=5)
    for key, sign in (("sql-past", -1), ("sql-future", 1), ("ttbr-future", 1), ("ttbr-past", -1)):
        expires = got['{"k":"' + key + '"}'].expires
        assert expires is not None and expires.utcoffset() == dt.timedelta(0)
        assert abs(expires - (now + sign * hour)) < slack, (key, expires, now)
    assert got['{"k":"ttbr-none"}'].expires is None


def test_purge_removes_only_expired_rows(queue: tuple[Connection, TableRef], pg_uri: str, pg_driver: str) -> None:
    conn, ref = queue
    live = [
        OutgoingMessage('{"live":"1"}', b"1", id=str(uuid.uuid4()), ttbr_ms=3_600_000),
        OutgoingMessage('{"live":"2"}', None, id=str(uuid.uuid4())),
    ]
    dead = [OutgoingMessage(f'{{"dead":"{i}"}}', b"x", id=str(uuid.uuid4()), ttbr_ms=-1000) for i in range(5)]
    _send(conn, ref, [dead[0], live[0], *dead[1:3], live[1], *dead[3:]])

    # a lock held elsewhere on an expired row: the purge skips it rather than waiting
    other = connect(pg_uri, pg_driver)
    try:
        other.raw.cursor().execute(f"SELECT id FROM {ref.qualified} WHERE id = '{dead[4].id}' FOR UPDATE")
        counts = []
        while True:
            with conn.transaction():
                n = queues.purge_expired_batch(conn, ref, batch_size=2)
            counts.append(n)
            if n == 0:
                break
        assert counts == [2, 2, 0]
    finally:
        other.rollback()
        other.close()
    with conn.transaction():
        assert queues.purge_expired_batch(conn, ref) == 1
    assert [r.id for r in _receive(conn, ref, 10)] == [m.id for m in live]


def test_cli_purge_expired_reports_the_count(pg_uri: str, pg_driver: str, tmp_path) -> None:
    name = _queue_name()
    cfg = make_config(pg_uri, pg_driver, [name])
    ref = installer.plan(cfg).queues[0]
    with connect(pg_uri, pg_driver) as conn:
        installer.install(conn, installer.plan(cfg))
        _send(conn, ref, [OutgoingMessage("{}", b"x", ttbr_ms=-5000) for _ in range(3)])
        _send(conn, ref, [OutgoingMessage("{}", b"y", ttbr_ms=600_000), OutgoingMessage("{}", b"z")])
    path = write_config(tmp_path, pg_driver, [name])
    connection = connection_string(pg_uri, pg_driver)

    result = run_cli(["purge-expired", "-c", str(path)], connection)
    assert result.code == 0, result
    assert result.summary["command"] == "purge-expired" and result.summary["status"] == "ok"
    assert result.summary["purged"] == {ref.canonical: 3}
    assert result.summary["total"] == 3
    assert sql(pg_uri, f"SELECT count(*) FROM {ref.qualified}") == [(2,)]

    again = run_cli(["purge-expired", "-c", str(path)], connection)
    assert again.code == 0 and again.summary["total"] == 0, again


def test_store_delayed_uses_the_database_clock(queue: tuple[Connection, TableRef], pg_uri: str, pg_driver: str) -> None:
    conn, ref = queue
    cfg = make_config(pg_uri, pg_driver, [ref.table])
    delayed = installer.plan(cfg, delayed_endpoints=[ref.table]).delayed[0]
    installer.install(conn, installer.plan(cfg, delayed_endpoints=[ref.table]))
    headers = hdr.encode({hdr.FORWARD_DESTINATION: ref.table, "T": "😀"})
    with conn.transaction():
        assert queues.store_delayed(conn, delayed, [(headers, b"body", 3_600_000), (headers, None, 0)]) == 2
    rows = sql(
        pg_uri,
        f"SELECT headers, body, extract(epoch FROM due - CAST(now() AT TIME ZONE 'UTC' AS timestamptz)) "
        f"FROM {delayed.qualified} ORDER BY due DESC",
    )
    assert [(r[0], r[1]) for r in rows] == [(headers, b"body"), (headers, None)]
    assert 3_300 < float(rows[0][2]) <= 3_600
    assert -300 < float(rows[1][2]) <= 0


def test_a_delayed_message_is_due_when_the_endpoint_reads_it_due_in_any_session_zone(
    pg_uri: str, pg_driver: str, skewed_clocks: str
) -> None:
    """NServiceBus writes Due as ``timestamptz(now() AT TIME ZONE 'UTC') + delay`` and its endpoint moves a
    row when ``Due < now() AT TIME ZONE 'UTC'``, both through the session's zone. Due written as the true
    instant came due early west of UTC and late east of it, by the zone's offset (a review: 5 hours)."""
    name = _queue_name()
    cfg = make_config(pg_uri, pg_driver, [name])
    plan = installer.plan(cfg, delayed_endpoints=[name])
    delayed = plan.delayed[0]
    with connect(pg_uri, pg_driver) as conn:
        installer.install(conn, plan)
        headers = hdr.encode({hdr.FORWARD_DESTINATION: name})
        with conn.transaction():
            queues.store_delayed(conn, delayed, [(headers, b"now", 0), (headers, b"later", 3_600_000)])
        cur = conn.raw.cursor()
        cur.execute("SHOW TimeZone")
        assert cur.fetchone()[0] == skewed_clocks  # UTC+14: the session's clock disagrees with UTC
        # the endpoint's MoveDueDelayedMessageText predicate, in the same session zone
        cur.execute(f"SELECT body FROM {delayed.qualified} WHERE due <= now() AT TIME ZONE 'UTC'")
        assert [bytes(r[0]) for r in cur.fetchall()] == [b"now"]
        cur.execute(f"SELECT body FROM {delayed.qualified} WHERE due <= (now() + interval '61 min') AT TIME ZONE 'UTC'")
        assert sorted(bytes(r[0]) for r in cur.fetchall()) == [b"later", b"now"]
        conn.rollback()


@pytest.mark.parametrize(
    "address",
    [
        "my.tb[e@[my.[sch@ma]@[my.c@ta]]og]",
        '"odd sch"."a%sb?c:x \'q\' $1 -- /*"',
        '"Sp""ecial_]_Characters"',
        '"ünï"."cödé 😀"',
    ],
)
def test_hostile_queue_names_work_end_to_end(pg_uri: str, pg_driver: str, address: str) -> None:
    """Quoted names holding placeholders of every paramstyle, quotes and comments stay names."""
    cfg = make_config(pg_uri, pg_driver, [address])
    ref = installer.plan(cfg).queues[0]
    with connect(pg_uri, pg_driver) as conn:
        installer.install(conn, installer.plan(cfg))
        sent = _messages(3) + [OutgoingMessage("{}", b"old", ttbr_ms=-1000)]
        _send(conn, ref, sent)
        with conn.transaction():
            assert queues.peek(conn, ref) == 4
            assert queues.purge_expired_batch(conn, ref) == 1
            assert queues.oldest_headers(conn, ref) == sent[0].headers
        with conn.transaction():
            one = queues.receive_one(conn, ref)
        assert one is not None and one.id == sent[0].id
        assert [r.id for r in _receive(conn, ref, 10)] == [m.id for m in sent[1:3]]
