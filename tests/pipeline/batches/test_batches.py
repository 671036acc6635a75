"""The ledger-keyed batch sender that publish and replay share (``pipeline.batches``), against a real
PostgreSQL: a batch is sent iff its ledger row exists, and a rerun sends only what is missing.

Why here and not only through publish and replay: their tests prove the promise end to end (SIGKILL
at the commit, reruns); these pin the loop itself (a batch that fails mid-transaction leaves no
message and no ledger row; a rerun reads the ledger and sends the rest; a batch another run
committed meanwhile counts as skipped; ``stop``), and the key grammar users' ledgers hold.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import orjson
import pytest
from queuelake.errors import QueuelakeError
from queuelake.pipeline.batches import keys
from queuelake.pipeline.batches.keys import ReplayKeys, Round, RoundKeys
from queuelake.pipeline.batches.sender import Batch, Book, Sent, send_batches
from queuelake.transport import installer, ledger, queues
from queuelake.transport.db import Connection
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import TableRef

from tests.helpers.db import sql
from tests.helpers.transport import connect, make_config

PIPELINE = "Tests/orders"
OUTPUT = "orders"


def test_publish_keys_keep_their_format_and_round_trip() -> None:
    first, later, from_executors = Round(None, 3, 500), Round(3, 9, 7), Round(3, 9, 7, "g")
    assert first.key(0, 2) == "-3:0/2@500"
    assert later.key(4, 12) == "3-9:4/12@7"
    assert from_executors.key(0, 2) == "3-9:0/2@7g"
    for rnd in (first, later, from_executors):
        assert keys.parse_round(rnd.key(4, 12)) == (rnd, 4, 12)
    round_keys = RoundKeys(later, 12)
    assert round_keys.key(5) == "3-9:5/12@7"
    assert round_keys.index("3-9:5/12@7") == 5
    # another round, or the same versions in the other layout or batch size, is not this round's
    assert round_keys.index("3-9:5/12@7g") is None
    assert round_keys.index("3-9:5/12@8") is None
    assert round_keys.index("-3:5/12@7") is None


def test_replay_keys_keep_their_format_and_round_trip() -> None:
    replay_keys = ReplayKeys(5, 1000)
    assert replay_keys.key(2) == keys.replay_batch_key(2, 5, 1000) == "2/5@1000"
    assert replay_keys.index("2/5@1000") == 2
    plan = keys.plan_key("0123abcd", 7, 4321, 1000)
    assert plan == "plan:0123abcd:v7:n4321:b1000"
    assert keys.is_plan_key(plan) and not keys.is_plan_key("2/5@1000")
    assert keys.parse_plan_key(plan) == ("0123abcd", 7, 4321, 1000, 0)  # a plan without a canary, as before
    canary = keys.plan_key("0123abcd", 7, 4321, 1000, canary=3)
    assert canary == "plan:0123abcd:v7:n4321:b1000:c3" and keys.parse_plan_key(canary)[4] == 3
    assert replay_keys.index(plan) is None  # the plan row is no batch


@pytest.fixture
def place(fresh_pg_uri: str) -> Iterator[tuple[str, Connection, TableRef, TableRef]]:
    """(uri, an open connection, a fresh queue table, the ledger)."""
    cfg = make_config(fresh_pg_uri, "psycopg", [f"Q_{uuid.uuid4().hex[:10]}"])
    conn = connect(fresh_pg_uri, "psycopg")
    try:
        install = installer.plan(cfg)
        installer.install(conn, install)
        assert install.ledger is not None
        yield fresh_pg_uri, conn, install.queues[0], install.ledger
    finally:
        conn.close()


ROUND = Round(None, 4, 2)
N = 4  # batches of the round


def _book(ledger_ref: TableRef) -> Book:
    return Book(ledger_ref, PIPELINE, OUTPUT, RoundKeys(ROUND, N), f"publish {OUTPUT}", "publish")


def _bodies(k: int) -> list[bytes]:
    return [f"batch {k} row {i}".encode() for i in range(2)]


def _batches(fail_content: frozenset[int] = frozenset()) -> Iterator[Batch[list[bytes]]]:
    for k in range(N):

        def content(k: int = k) -> list[bytes]:
            if k in fail_content:
                raise QueuelakeError(f"batch {k} cannot be built")
            return _bodies(k)

        yield Batch(k, content, 2)


def _sender(queue: TableRef, fail_after_insert: set[int]) -> Callable[[Connection, str, list[bytes]], Sent]:
    """Inserts the batch's messages, then fails for the batches in ``fail_after_insert``: the
    failure comes after rows are in the transaction, which must take them back."""

    def send(conn: Connection, key: str, bodies: list[bytes]) -> Sent:
        queues.send(conn, queue, [OutgoingMessage(orjson.dumps({"key": key}).decode(), body) for body in bodies])
        if RoundKeys(ROUND, N).index(key) in fail_after_insert:
            raise QueuelakeError(f"the database refused batch {key}")
        return Sent(len(bodies), len(bodies))

    return send


def _queue_bodies(uri: str, queue: TableRef) -> list[bytes]:
    return sorted(bytes(r[0]) for r in sql(uri, f"SELECT body FROM {queue.qualified}"))


def _ledger_keys(conn: Connection, ledger_ref: TableRef) -> list[str]:
    found = sorted(ledger.batch_keys(conn, ledger_ref, PIPELINE, OUTPUT))
    conn.rollback()
    return found


def test_a_failed_batch_leaves_nothing_and_a_rerun_sends_only_what_is_missing(
    place: tuple[str, Connection, TableRef, TableRef],
) -> None:
    uri, conn, queue, ledger_ref = place
    book = _book(ledger_ref)
    assert book.done(conn) == set()

    outcomes = list(send_batches(conn, book, _batches(frozenset({1})), _sender(queue, {2}), set()))
    assert [(o.k, o.status) for o in outcomes] == [(0, "sent"), (1, "failed"), (2, "failed"), (3, "sent")]
    assert outcomes[1].error == "batch 1 cannot be built" and outcomes[1].key == "-4:1/4@2"
    assert outcomes[2].error == "the database refused batch -4:2/4@2"
    assert [o.rows for o in outcomes] == [2, 2, 2, 2] and outcomes[0].content == _bodies(0)
    # the failed batches: no ledger row, and none of their messages (batch 2's inserts rolled back)
    assert _ledger_keys(conn, ledger_ref) == ["-4:0/4@2", "-4:3/4@2"]
    assert _queue_bodies(uri, queue) == sorted(_bodies(0) + _bodies(3))
    assert book.done(conn) == {0, 3}

    # the rerun reads the ledger and sends only batches 1 and 2
    sent_now: list[str] = []
    plain = _sender(queue, set())

    def counting(conn: Connection, key: str, bodies: list[bytes]) -> Sent:
        sent_now.append(key)
        return plain(conn, key, bodies)

    rerun = list(send_batches(conn, book, _batches(), counting, book.done(conn)))
    assert [(o.k, o.status) for o in rerun] == [(0, "skipped"), (1, "sent"), (2, "sent"), (3, "skipped")]
    assert sent_now == ["-4:1/4@2", "-4:2/4@2"]
    assert _ledger_keys(conn, ledger_ref) == [ROUND.key(k, N) for k in range(N)]
    assert _queue_bodies(uri, queue) == sorted(b for k in range(N) for b in _bodies(k))
    assert [r.rows_sent for r in ledger.rows_of_pipeline(conn, ledger_ref, PIPELINE)] == [2] * N
    conn.rollback()

    # a third run has nothing left to send
    again = list(send_batches(conn, book, _batches(), _sender(queue, set()), book.done(conn)))
    assert {o.status for o in again} == {"skipped"}
    assert len(_queue_bodies(uri, queue)) == 2 * N


def test_a_batch_sent_meanwhile_by_another_run_counts_as_skipped_not_twice(
    place: tuple[str, Connection, TableRef, TableRef],
) -> None:
    uri, conn, queue, ledger_ref = place
    book = _book(ledger_ref)
    list(send_batches(conn, book, (b for b in _batches() if b.k == 1), _sender(queue, set()), set()))
    # a run that read the ledger before batch 1 was committed: its ledger row fails on the key
    stale: set[int] = set()
    without_recheck = list(send_batches(conn, book, _batches(), _sender(queue, set()), stale))
    assert [o.status for o in without_recheck] == ["sent", "failed", "sent", "sent"]
    assert without_recheck[1].key == "-4:1/4@2"
    assert _ledger_keys(conn, ledger_ref) == [ROUND.key(k, N) for k in range(N)]
    assert _queue_bodies(uri, queue) == sorted(b for k in range(N) for b in _bodies(k))


def test_recheck_turns_a_lost_race_into_skipped(place: tuple[str, Connection, TableRef, TableRef]) -> None:
    uri, conn, queue, ledger_ref = place
    book = _book(ledger_ref)
    list(send_batches(conn, book, (b for b in _batches() if b.k == 2), _sender(queue, set()), set()))
    outcomes = list(send_batches(conn, book, _batches(), _sender(queue, set()), set(), recheck=True))
    assert [o.status for o in outcomes] == ["sent", "sent", "skipped", "sent"]
    assert _ledger_keys(conn, ledger_ref) == [ROUND.key(k, N) for k in range(N)]
    assert _queue_bodies(uri, queue) == sorted(b for k in range(N) for b in _bodies(k))


def test_stop_ends_the_loop_before_the_next_batch(place: tuple[str, Connection, TableRef, TableRef]) -> None:
    uri, conn, queue, ledger_ref = place
    book = _book(ledger_ref)
    paced: list[int] = []
    outcomes = list(
        send_batches(
            conn,
            book,
            _batches(),
            _sender(queue, set()),
            {0},
            stop=lambda: len(paced) >= 2,
            pace=lambda sent: paced.append(sent.rows),
        )
    )
    assert [(o.k, o.status) for o in outcomes] == [(0, "skipped"), (1, "sent"), (2, "sent"), (3, "stopped")]
    assert _ledger_keys(conn, ledger_ref) == ["-4:1/4@2", "-4:2/4@2"]
    assert _queue_bodies(uri, queue) == sorted(_bodies(1) + _bodies(2))


def test_a_second_stop_signal_during_a_batch_commit_waits_for_it_and_the_batch_is_counted(
    place: tuple[str, Connection, TableRef, TableRef], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Ctrl-C, the second while a batch's COMMIT ran: the batch was delivered and in the ledger, but
    ``Interrupted`` raised inside the commit lost it from the summary and the ``runs`` row (a review: 3
    runs in 40). The command's own handler is armed here; the signals come from inside the commit."""
    import os
    import signal

    from queuelake import cli, stopping

    uri, conn, queue, ledger_ref = place
    book = _book(ledger_ref)
    real_commit = conn.commit
    signalled: list[int] = []

    def commit() -> None:
        if not signalled:  # the first batch's commit: both signals land while it runs
            for _ in range(2):
                signalled.append(1)
                os.kill(os.getpid(), signal.SIGINT)
        real_commit()

    monkeypatch.setattr(conn, "commit", commit)
    outcomes = []
    try:
        with cli._sigterm("publish"):
            for outcome in send_batches(conn, book, _batches(), _sender(queue, set()), set(), stop=stopping.requested):
                outcomes.append(outcome)
    finally:
        stopping.reset()
    assert [(o.k, o.status) for o in outcomes] == [(0, "sent"), (1, "stopped")]
    assert _ledger_keys(conn, ledger_ref) == ["-4:0/4@2"]
    assert _queue_bodies(uri, queue) == sorted(_bodies(0))
