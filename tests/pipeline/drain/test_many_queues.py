"""A whole system in one drain (issue 32, bounded connections): hundreds of queues, and never more
database connections than ``drain.max_connections``, against a real PostgreSQL whose own
``max_connections`` is the default 100 (a drain of 100 queues opened ~300 and 39 queues failed)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from queuelake.config import Config, from_dict
from queuelake.lake.engines import open_lake
from queuelake.lake.port import LakeEngine
from queuelake.lake.reading import read_table
from queuelake.pipeline.drain.backlog import ConnectionBudget, estimate
from queuelake.pipeline.drain.run import connection_plan
from queuelake.transport import claims, db, installer, locks, queues
from queuelake.transport.activity import PeakConnections
from queuelake.transport.database import QueueDatabase
from queuelake.transport.queues import OutgoingMessage, send
from queuelake.transport.table_refs import TableRef, queue_ref

from tests.helpers.stages import drain


def test_the_plan_never_exceeds_the_budget() -> None:
    for budget in range(4, 60):
        for workers in (1, 2, 3, 8, 32):
            for shared in (None, object()):
                plan = connection_plan(budget, workers, 500, shared)
                held = plan.at_once * (1 + plan.workers) + 1 + (shared is not None)  # + the committer's
                assert held <= budget and plan.at_once >= 1 and 1 <= plan.workers <= workers, (budget, workers)
    assert connection_plan(24, 2, 500, object()) == connection_plan(24, 2, 500, object())
    assert connection_plan(24, 2, 3, None).at_once == 3  # a few queues: all at once, as before


@pytest.mark.slow
@pytest.mark.parametrize(("queues", "max_connections"), [(150, 24), (40, 6)])
def test_hundreds_of_queues_within_the_connection_budget(
    fresh_pg_uri: str, tmp_path: Path, queues: int, max_connections: int
) -> None:
    names = [f"Endpoint{i:03d}" for i in range(queues)]
    settings = {
        "transport": {"connection": fresh_pg_uri},
        "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
        "drain": {"queues": names, "batch_size": 50, "max_connections": max_connections},
    }
    cfg = from_dict(settings, env={})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        for i, name in enumerate(names):  # every third queue empty: it costs one check
            if i % 3:
                send(conn, queue_ref(name, cfg.transport), [OutgoingMessage("{}", b"x")] * 4)
        conn.commit()
    with PeakConnections(fresh_pg_uri) as watch:
        summary = drain(cfg, open_lake(cfg.lake))
    assert summary["status"] == "ok", [q for q in summary["queues"] if q["status"] != "ok"][:3]
    # a queue's seconds count from its own start, not from the run's; small queues sharing a batch (12 of
    # 4 rows to a batch of 50) share its seconds: test_drain_together's test_a_batch_s_seconds_are_shared_...
    expected = 4 * sum(1 for i in range(queues) if i % 3)
    assert summary["dequeued"] == expected and read_table(str(tmp_path / "lake" / "messages")).num_rows == expected
    assert 0 < watch.peak <= max_connections, watch.peak
    assert summary["peak_connections"] <= max_connections
    # sessions are kept from one queue to the next: without that each busy queue opened two or more
    busy = len([i for i in range(queues) if i % 3])
    assert summary["sessions_opened"] <= max_connections < 2 * busy, summary["sessions_opened"]
    # the run's commits checkpoint at its end (none every 10 versions during it): what the next run
    # loads replays fewer than the journal's interval of commit files
    log_dir = tmp_path / "lake" / "messages" / "_delta_log"
    version = max(int(p.name.split(".")[0]) for p in log_dir.glob("*.json"))
    if summary["journal_commits"] >= 10:
        assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] > version - 10
    empty = [q for q in summary["queues"] if q["dequeued"] == 0]
    assert len(empty) == len(names) - len([i for i in range(queues) if i % 3])
    assert all(q["workers"] == 0 and q["backlog_left"] == 0 for q in empty)  # one check each, no lock


def test_workers_follow_the_backlog_and_empty_queues_take_no_lock(fresh_pg_uri: str, tmp_path: Path) -> None:
    """Batch 50, at most 4 workers: 0 rows get none (and no lock), 30 one, 120 three, 1,000 four; an
    empty queue whose lock another drain holds is still 'nothing to do', a busy one is skipped."""
    depths = {"Idle": 0, "Small": 30, "Middle": 120, "Deep": 1000, "Locked": 10, "LockedIdle": 0}
    cfg = from_dict(
        {
            "transport": {"connection": fresh_pg_uri},
            "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
            "drain": {"queues": list(depths), "batch_size": 50, "workers_per_queue": 4},
        },
        env={},
    )
    refs = {name: queue_ref(name, cfg.transport) for name in depths}
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        for name, n in depths.items():
            if n:
                send(conn, refs[name], [OutgoingMessage("{}", b"x")] * n)
        conn.commit()
    with db.connect(cfg.transport) as other:
        for name in ("Locked", "LockedIdle"):
            assert locks.try_lock(other, "queuelake.drain:" + refs[name].canonical)
        summary = drain(cfg, open_lake(cfg.lake))
    by_name = {q["queue"]: q for q in summary["queues"]}
    workers = {name: by_name[refs[name].canonical]["workers"] for name in depths}
    assert workers == {"Idle": 0, "Small": 1, "Middle": 3, "Deep": 4, "Locked": 1, "LockedIdle": 0}
    assert by_name[refs["Locked"].canonical]["status"] == "skipped"
    assert by_name[refs["LockedIdle"].canonical]["status"] == "ok"
    assert summary["dequeued"] == 30 + 120 + 1000


def test_depths_of_many_queues_with_a_missing_table(fresh_pg_uri: str) -> None:
    """One statement for all; a table that does not exist fails the union, and then only its own peek."""
    cfg = from_dict({"transport": {"connection": fresh_pg_uri}, "drain": {"queues": ["A", "B"]}}, env={})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        send(conn, queue_ref("B", cfg.transport), [OutgoingMessage("{}", b"x")] * 7)
        conn.commit()
        refs = [queue_ref(n, cfg.transport) for n in ("A", "B")]
        assert queues.depths(conn, refs) == {refs[0].canonical: 0, refs[1].canonical: 7}
        missing = queue_ref("Missing", cfg.transport)
        got = queues.depths(conn, [*refs, missing])
        assert got == {refs[0].canonical: 0, refs[1].canonical: 7, missing.canonical: None}


def test_an_empty_queue_with_a_claim_left_is_not_idle(fresh_pg_uri: str) -> None:
    cfg = from_dict({"transport": {"connection": fresh_pg_uri}, "drain": {"queues": ["A", "B"]}}, env={})
    refs = [queue_ref(n, cfg.transport) for n in ("A", "B")]
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        claim = claims.Claim("drain-x", 1, refs[1].canonical, "messages", 3, "{}")
        claims.insert(conn, claims.claims_ref(cfg.transport), claim)
        other = queue_ref("C", cfg.transport).canonical  # a queue outside the run with a claim left
        claims.insert(conn, claims.claims_ref(cfg.transport), claims.Claim("drain-y", 1, other, "messages", 2, "{}"))
        conn.commit()
    found = estimate(QueueDatabase(cfg.transport), refs)
    assert found.backlogs[refs[0].canonical].idle and not found.backlogs[refs[1].canonical].idle
    assert found.claimed_elsewhere == {other}


def test_a_queue_table_another_program_holds_locked_leaves_only_its_own_depth_unknown(
    fresh_pg_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migration held one of 115 queue tables locked: the one statement estimating every queue waited
    with it, 91 s, silent and past --max-seconds, and the run drained nothing (a review). The estimate
    waits at most 5 s for a lock: that queue's depth is unknown (drained as if deep), the others' read.
    Once: the queues of a union that gave up on a lock are peeked without a wait (the locked table's own
    peek waited its 5 s once more: a review)."""

    waits: list[str] = []  # the session's lock_timeout at each statement that gave up waiting for a lock
    raised = db.Connection.error

    def error(self: db.Connection, exc: BaseException, statement: str, what: str | None) -> Exception:
        failed = raised(self, exc, statement, what)
        if failed.lock_timeout:
            self.raw.rollback()  # the estimate rolls back after each failure; its setting is the session's
            waits.append(self.raw.execute("SHOW lock_timeout").fetchone()[0])
            self.raw.rollback()
        return failed

    monkeypatch.setattr(db.Connection, "error", error)
    names = ["A", "B", "C"]
    cfg = from_dict({"transport": {"connection": fresh_pg_uri}, "drain": {"queues": names}}, env={})
    refs = [queue_ref(n, cfg.transport) for n in names]
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        send(conn, refs[2], [OutgoingMessage("{}", b"x")] * 4)
        conn.commit()
    with _held(fresh_pg_uri, refs[1], "ACCESS EXCLUSIVE", seconds=60):  # what the estimate waited for before
        found = estimate(QueueDatabase(cfg.transport), refs)
    depths = {r.canonical: found.backlogs[r.canonical].depth for r in refs}
    assert depths == {refs[0].canonical: 0, refs[1].canonical: None, refs[2].canonical: 4}, depths
    assert [w for w in waits if w != "1ms"] == ["5s"], waits  # the union's wait; B's own peek did not wait


def test_a_locked_queue_drained_with_small_queues_counts_its_wait_in_its_seconds(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue table another program held locked against deletes (reads pass: the estimate read its depth)
    went into a batch of small queues; its receive waited the lock timeout, and its summary said 0.03-0.29 s,
    its share by rows of a batch it had no rows in (a review). Its seconds include the wait: compared with the
    failed statement's own duration, measured here (no duration is assumed)."""
    from queuelake.errors import QueuelakeError
    from queuelake.pipeline.drain import small_queues

    waited: dict[str, float] = {}
    receive, plan = queues.receive_batch_arrow, small_queues.plan
    units: list[list[str]] = []

    def timed(conn: db.Connection, ref, want: int):  # type: ignore[no-untyped-def]
        started = time.monotonic()
        try:
            return receive(conn, ref, want)
        except QueuelakeError:  # its wait for the lock ended (lock_timeout or, as long, statement_timeout)
            waited[ref.canonical] = time.monotonic() - started
            raise

    def planned(drains, batch_size: int):  # type: ignore[no-untyped-def]
        out = plan(drains, batch_size)
        units.extend([d.ref.canonical for d in unit] for unit in out)
        return out

    monkeypatch.setattr(queues, "receive_batch_arrow", timed)
    monkeypatch.setattr(small_queues, "plan", planned)
    cfg, refs, lake = _three_small_queues(fresh_pg_uri, tmp_path)
    with _held(fresh_pg_uri, refs[1], "EXCLUSIVE"):  # B's rows cannot be deleted until the drain has returned
        first = drain(cfg, lake)
    assert units == [[r.canonical for r in refs]], units  # the three in one batch of small queues
    by_queue = {q["queue"]: q for q in first["queues"]}
    locked = by_queue[refs[1].canonical]
    assert locked["status"] == "failed" and "timeout" in locked["error"], locked
    assert list(waited) == [refs[1].canonical], waited
    assert locked["seconds"] >= round(waited[refs[1].canonical], 3) - 0.001, (locked, waited)
    assert first["landed"] == 8 and all(by_queue[r.canonical]["status"] == "ok" for r in (refs[0], refs[2]))


def test_a_queue_table_another_program_holds_locked_fails_its_own_drain_and_not_the_run(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue table held locked (a migration) held the drain's read of its newest seq on the lock session,
    which had no timeout at all: the whole run waited for as long as the lock was held (a review). Its
    sessions wait at most ``lock_timeout`` (30 s, or the statement timeout if shorter): that queue fails,
    named, while the lock is still held, after one such wait (it waited three times: the newest seq, the
    receive and the backlog peek, about 90 s: a review); the others land; the next run drains it."""

    gave_up: list[str] = []  # the statements that gave up waiting for a lock, besides the depth estimate's
    estimating = threading.local()
    raised, estimate_depths = db.Connection.error, queues.depths

    def error(self: db.Connection, exc: BaseException, statement: str, what: str | None) -> Exception:
        failed = raised(self, exc, statement, what)
        if failed.lock_timeout and not getattr(estimating, "now", False):
            gave_up.append(statement)
        return failed

    def depths(conn: db.Connection, refs: list) -> dict:  # type: ignore[type-arg]
        estimating.now = True
        try:
            return estimate_depths(conn, refs)
        finally:
            estimating.now = False

    monkeypatch.setattr(db.Connection, "error", error)
    monkeypatch.setattr(queues, "depths", depths)

    cfg, refs, lake = _three_small_queues(fresh_pg_uri, tmp_path)
    with _held(fresh_pg_uri, refs[1], "ACCESS EXCLUSIVE") as release:  # until the drain has returned
        first = drain(cfg, lake)
        held = release.is_alive()
    assert held, "the drain returned only once the lock was released"
    by_queue = {q["queue"]: q for q in first["queues"]}
    assert first["status"] == "failed" and first["landed"] == 8, first
    assert by_queue[refs[1].canonical]["status"] == "failed" and "timeout" in by_queue[refs[1].canonical]["error"]
    assert len(gave_up) == 1, gave_up  # one wait for the lock, not one per statement
    again = drain(cfg, lake)
    assert again["status"] == "ok" and again["landed"] == 4, again
    ids = lake.read_arrow("messages", columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 12


@pytest.mark.parametrize("statement_timeout", [2, 30])
def test_a_receive_waiting_for_a_locked_table_is_told_as_a_lock_wait_whatever_the_statement_timeout(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, statement_timeout: float
) -> None:
    """With ``drain.statement_timeout_seconds`` at or under 30 the lock timeout was as long as the statement
    timeout, which started first and so fired first: the receive's wait for a table another program held
    locked ended as a statement timeout (57014), not told as a lock wait, and the backlog peek was tried
    once more (found by a review). The lock timeout is shorter than the statement timeout whatever it is.
    The table is locked against deletes only (EXCLUSIVE: reads pass), so the wait is the receive's own.
    30: a wait of 29 s; checked on the sessions' settings, not by waiting (a timing is not asserted)."""

    told: list[tuple[str, bool]] = []  # (statement, told as a lock wait) of each statement that failed
    raised = db.Connection.error

    def error(self: db.Connection, exc: BaseException, statement: str, what: str | None) -> Exception:
        failed = raised(self, exc, statement, what)
        told.append((statement, failed.lock_timeout))
        return failed

    monkeypatch.setattr(db.Connection, "error", error)
    cfg, refs, lake = _three_small_queues(fresh_pg_uri, tmp_path, statement_timeout)
    settings = _drain_session_settings(cfg, statement_timeout)
    assert settings["lock_timeout"] < settings["statement_timeout"], settings
    if statement_timeout > 2:
        return  # the wait itself is shown with the shorter timeout
    with _held(fresh_pg_uri, refs[1], "EXCLUSIVE"):  # B's rows cannot be deleted until the drain has returned
        first = drain(cfg, lake)
    locked = {q["queue"]: q for q in first["queues"]}[refs[1].canonical]
    assert locked["status"] == "failed" and "lock timeout" in locked["error"], locked
    assert told and all(lock_wait for _, lock_wait in told), told  # every failure was the wait for B's lock
    assert first["landed"] == 8, first
    again = drain(cfg, lake)
    assert again["status"] == "ok" and again["landed"] == 4, again


def _drain_session_settings(cfg: Config, statement_timeout: float) -> dict[str, float]:
    """A drain session's statement_timeout and lock_timeout, in ms, as ``configure_drain_session`` sets them."""
    with db.connect(cfg.transport) as conn:
        queues.configure_drain_session(conn, statement_timeout, 600)
        names = ("statement_timeout", "lock_timeout")
        return {
            n: float(conn.raw.execute(f"SELECT setting FROM pg_settings WHERE name = '{n}'").fetchone()[0])
            for n in names
        }


def waiting(budget: ConnectionBudget, n: int) -> None:
    """Until ``n`` holders are queued for their connections (however slow the machine)."""
    deadline = time.monotonic() + 30
    while len(budget._turns) < n:  # noqa: SLF001 - the queue of turns is what the test watches
        assert time.monotonic() < deadline, "the holders never queued"
        time.sleep(0.01)


def test_the_connection_budget_is_first_come_first_served() -> None:
    """A queue needing many connections is not overtaken by later ones needing few."""
    budget = ConnectionBudget(6)
    order: list[str] = []
    first = threading.Event()
    release = threading.Event()

    def hold(name: str, n: int, wait: threading.Event | None = None) -> None:
        with budget.hold(n):
            order.append(name)
            if wait is not None:
                first.set()
                wait.wait()

    a = threading.Thread(target=hold, args=("a", 3, release))
    a.start()
    first.wait()
    big = threading.Thread(target=hold, args=("big", 5))
    big.start()
    waiting(budget, 1)  # big waits for a
    small = threading.Thread(target=hold, args=("small", 1))
    small.start()
    waiting(budget, 2)  # small would fit now, but waits its turn behind big
    time.sleep(0.1)  # room for small to (wrongly) go ahead
    assert order == ["a"]
    release.set()
    for t in (a, big, small):
        t.join(5)
    assert order == ["a", "big", "small"] and budget.free == 6 and budget.peak == 5


@pytest.mark.slow
def test_after_the_journal_commit_fails_no_queue_gives_up_another_batch(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal commit failed (its connection terminated: a DBA, a timeout), and the run went on starting
    every queue left, each receiving a batch it could not land: a review's 99 queues left 59,149 rows in
    claims, in neither the queue nor the journal until the next run. Now nothing more is received: the
    queues not begun keep their rows, and the next run lands every row once."""
    from queuelake.errors import TransportError
    from queuelake.pipeline.drain import committer

    names = [f"Endpoint{i:03d}" for i in range(12)]
    settings = {
        "transport": {"connection": fresh_pg_uri},
        "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
        "drain": {"queues": names, "batch_size": 50, "max_connections": 4, "workers_per_queue": 1},
    }
    cfg = from_dict(settings, env={})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        for name in names:  # 300 rows each: a queue of its own, six batches
            send(conn, queue_ref(name, cfg.transport), [OutgoingMessage("{}", b"x")] * 300)
        conn.commit()

    def terminated(self, conn, group):  # type: ignore[no-untyped-def]
        raise TransportError("claim_delete failed: terminating connection due to administrator command")

    monkeypatch.setattr(committer.JournalCommitter, "_land", terminated)
    failed = drain(cfg, open_lake(cfg.lake))
    assert failed["status"] == "failed", failed
    with db.connect(cfg.transport) as conn:
        left = [queues.count_rows(conn, queue_ref(n, cfg.transport)) for n in names]
        held = claims.every_claim(conn, claims.claims_ref(cfg.transport))
        claims_left, rows_claimed = len(held), sum(c.row_count for c in held)
        conn.rollback()
    untouched = sum(1 for n in left if n == 300)
    assert untouched >= len(names) - 4, (left, claims_left)  # at most the queues begun at the failure
    assert claims_left <= 2 * 4 and sum(left) + rows_claimed == 300 * len(names), (left, claims_left, rows_claimed)
    assert failed["dequeued"] == rows_claimed, failed  # a claimed batch is counted (docs/drain.md)

    monkeypatch.undo()
    again = drain(cfg, open_lake(cfg.lake))
    assert again["status"] == "ok" and again["landed"] + again.get("rows_resolved", 0) == 300 * len(names), again
    ids = open_lake(cfg.lake).read_arrow("messages", columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 300 * len(names)


@contextlib.contextmanager
def _held(uri: str, ref: TableRef, mode: str, seconds: float = 600) -> Iterator[threading.Timer]:
    """``ref`` locked in ``mode`` by another session's transaction until the block ends (at most ``seconds``:
    the timer that releases it, running while the lock is held, is what the block gets)."""
    import psycopg

    with psycopg.connect(uri) as holder:
        holder.execute(f"LOCK TABLE {ref.qualified} IN {mode} MODE")  # type: ignore[arg-type]
        release = threading.Timer(seconds, holder.rollback)
        release.start()
        try:
            yield release
        finally:
            release.cancel()
            holder.rollback()


def _three_small_queues(
    uri: str, tmp_path: Path, statement_timeout: float = 2
) -> tuple[Config, list[TableRef], LakeEngine]:
    """Queues A, B and C of 4 rows each (statements time out after 2 s), installed; a delta-rs lake."""
    names = ["A", "B", "C"]
    cfg = from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
            "drain": {"queues": names, "statement_timeout_seconds": statement_timeout},
        },
        env={},
    )
    refs = [queue_ref(n, cfg.transport) for n in names]
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        for ref in refs:
            send(conn, ref, [OutgoingMessage("{}", b"x")] * 4)
        conn.commit()
    return cfg, refs, open_lake(cfg.lake)
