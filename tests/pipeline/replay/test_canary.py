"""``replay --canary N`` and ``replay_lineage`` on real PostgreSQL and a delta-rs lake, without Spark.

Five OrderPlaced messages failed at Billing are seeded into the error queue and drained. A retry of them
with ``--canary 2`` (batches of 2 after the canary) sends the first two; an endpoint, simulated in a
thread, takes them off Billing and puts an audit copy (processed) or an error copy (failed again) of
each into the audit or error queue, as an NServiceBus endpoint would; the replay's own drain of
``drain.queues`` (error, audit) brings them into the journal. Asserted per case: what reached Billing
(each selected message once, by its ``queuelake.Replay.Source``), the status, the ledger's batches,
and the lineage rows with their outcomes; a canary that failed stops and a later run of the replay id
without ``--canary`` sends the rest once; no endpoint at all times out, also through the CLI (exit 1).
The replay SIGKILLed in each phase (the canary sent, the wait, its drain, the verdict, the rest's send),
then run again with its replay id: each message reaches Billing once, the canaries are not sent again,
the journal and the lineage hold no row twice.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from queuelake.commands.demo import traffic
from queuelake.config import Config, from_dict
from queuelake.lake.engines import journal_engine, open_lake
from queuelake.nsb import headers as hdr
from queuelake.nsb.retry import REPLAY_ID, REPLAY_SOURCE
from queuelake.pipeline.replay import lineage
from queuelake.pipeline.replay.plan import ReplayOptions
from queuelake.transport import db, installer, ledger
from queuelake.transport.queues import OutgoingMessage, receive_batch
from queuelake.transport.table_refs import bridge_ref, queue_ref

from tests.helpers.cli import cli_env, last_json, run_cli
from tests.helpers.kills import CANARY_REPLAY_SCRIPT
from tests.helpers.stages import drain, replay

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
TIMEOUT = "System.TimeoutException"
WHERE = f"exception_type = '{TIMEOUT}'"
BILLING = '"public"."Billing"'
ORDERS = [
    OutgoingMessage(
        hdr.encode(traffic.order_headers(str(uuid.UUID(int=i + 1)), T0)),
        b'{"OrderId": %d}' % i,
        id=str(uuid.UUID(int=i + 1)),
    )
    for i in range(5)
]


def _config(uri: str, root: Path) -> Config:
    settings = {
        "transport": {"connection": uri},
        "lake": {"root": str(root), "engine": "delta-rs"},
        "drain": {"queues": ["error", "audit"], "batch_size": 100},
    }
    return from_dict(settings, env={})


@pytest.fixture
def cfg(fresh_pg_uri: str, tmp_path: Path) -> Config:
    cfg = _config(fresh_pg_uri, tmp_path / "lake")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Billing"]))
        failed = [
            traffic.failed_copy(m, "Billing", TIMEOUT, "timed out", T0 + dt.timedelta(minutes=i))
            for i, m in enumerate(ORDERS)
        ]
        traffic.seed(conn, queue_ref("error", cfg.transport), failed)
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    return cfg


def _no_spark():  # type: ignore[no-untyped-def]
    raise AssertionError("this replay needed Spark")


def _options(**kw: object) -> ReplayOptions:
    return ReplayOptions(WHERE, batch_size=2, canary_poll=0.3, **kw)  # type: ignore[arg-type]


class Endpoint:
    """Billing, simulated: takes up to ``take`` messages off its queue and, for each, puts an audit copy
    into ``audit`` (processed) or an error copy into ``error`` (failed again)."""

    def __init__(self, cfg: Config, take: int, fail: bool) -> None:
        self.cfg, self.take, self.fail = cfg, take, fail
        self.taken: list[dict[str, str | None]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Endpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)

    def _run(self) -> None:
        t = self.cfg.transport
        with db.connect(t) as conn:
            while not self.stop.is_set() and len(self.taken) < self.take:
                rows = receive_batch(conn, queue_ref("Billing", t), self.take - len(self.taken))
                conn.commit()
                for r in rows:
                    message = OutgoingMessage(r.headers or "{}", r.body, id=r.id)
                    self.taken.append(hdr.decode_map(message.headers))
                    when = T0 + dt.timedelta(hours=1)
                    if self.fail:
                        copy = traffic.failed_copy(message, "Billing", TIMEOUT, "timed out again", when)
                        traffic.seed(conn, queue_ref("error", t), [copy])
                    else:
                        traffic.seed(conn, queue_ref("audit", t), [traffic.audit_copy(message, "Billing", when, 15)])
                time.sleep(0.1)


def _waiting(cfg: Config) -> list[dict[str, str | None]]:
    """Every message in Billing now (taken off it)."""
    with db.connect(cfg.transport) as conn:
        rows = receive_batch(conn, queue_ref("Billing", cfg.transport), 1000)
        conn.commit()
    return [hdr.decode_map(r.headers or "{}") for r in rows]


def _sources(messages: list[dict[str, str | None]]) -> list[str | None]:
    return [m.get(REPLAY_SOURCE) for m in messages]


def _batch_keys(cfg: Config, replay_id: str) -> list[str]:
    with db.connect(cfg.transport) as conn:
        rows = ledger.rows_of_pipeline(
            conn, bridge_ref(cfg.transport.ledger_table, cfg.transport), f"replay/{replay_id}"
        )
        conn.rollback()
    return sorted(r.batch_key for r in rows)


def _error_seqs(cfg: Config) -> list[str]:
    """The five failed copies' ``<queue>@<seq>``, in plan order."""
    rows = journal_engine(open_lake(cfg.lake)).read_arrow("messages", columns=["queue", "seq", "exception_type"])
    seqs = sorted(s for q, s, e in zip(*(rows.column(c).to_pylist() for c in ("queue", "seq", "exception_type"))) if e)
    return [f'"public"."error"@{s}' for s in seqs]


def _outcomes(cfg: Config, replay_id: str) -> dict[str, tuple[bool, str]]:
    lake = open_lake(cfg.lake)
    rows = lineage.outcomes(lake, lineage.lineage_of(lake, replay_id)).to_pylist()
    for r in rows:
        assert r["destination"] == BILLING and r["kind"] == "retry" and r["sent_message_id"] == r["message_id"]
    return {f"{r['queue']}@{r['seq']}": (r["canary"], r["outcome"]) for r in rows}


@pytest.fixture
def sources(cfg: Config) -> Iterator[list[str]]:
    yield _error_seqs(cfg)


def test_processed_canary_sends_the_rest_once(cfg: Config, sources: list[str]) -> None:
    with Endpoint(cfg, take=2, fail=False) as endpoint:
        summary = replay(
            cfg, None, open_lake(cfg.lake), _options(replay_id="r-ok", canary=2, canary_wait=60), _no_spark
        )
    assert summary["status"] == "ok", summary
    assert summary["canary"]["status"] == "processed" and summary["canary"]["drains"] >= 1
    assert [c["outcome"] for c in summary["canary"]["canaries"]] == ["processed", "processed"]
    assert (summary["rows_sent"], summary["batches"], summary["lineage_recorded"]) == (5, 3, 5)
    assert _sources(endpoint.taken) == sources[:2] and {m[REPLAY_ID] for m in endpoint.taken} == {"r-ok"}
    assert sorted(_sources(_waiting(cfg))) == sorted(sources[2:])  # the rest, each once
    keys = _batch_keys(cfg, "r-ok")
    assert keys[:3] == ["0/3@2", "1/3@2", "2/3@2"] and keys[3].startswith("plan:") and keys[3].endswith(":b2:c2")
    outcome = _outcomes(cfg, "r-ok")
    assert outcome == {
        **{s: (True, "processed") for s in sources[:2]},
        **{s: (False, "pending") for s in sources[2:]},
    }
    # a rerun sends nothing and writes no lineage twice
    again = replay(cfg, None, open_lake(cfg.lake), _options(replay_id="r-ok", canary=2, canary_wait=5), _no_spark)
    assert (again["status"], again["rows_sent"], again["lineage_recorded"]) == ("ok", 0, 0), again
    assert _waiting(cfg) == [] and len(_outcomes(cfg, "r-ok")) == 5


def test_failed_canary_stops_and_a_resume_sends_the_rest(cfg: Config, sources: list[str]) -> None:
    with Endpoint(cfg, take=2, fail=True) as endpoint:
        summary = replay(
            cfg, None, open_lake(cfg.lake), _options(replay_id="r-bad", canary=2, canary_wait=60), _no_spark
        )
    assert summary["status"] == "canary-failed", summary
    assert "canary failed again" in summary["error"] and sources[0] in summary["error"]
    assert summary["rows_sent"] == 2 and _sources(endpoint.taken) == sources[:2]
    assert _waiting(cfg) == []  # nothing else was sent
    assert [k for k in _batch_keys(cfg, "r-bad") if not k.startswith("plan:")] == ["0/3@2"]
    assert _outcomes(cfg, "r-bad") == {s: (True, "failed-again") for s in sources[:2]}
    # with a canary of another size: refused; without --canary: the rest, once
    with pytest.raises(Exception, match="planned with --canary 2"):
        replay(cfg, None, open_lake(cfg.lake), _options(replay_id="r-bad", canary=3), _no_spark)
    rest = replay(cfg, None, open_lake(cfg.lake), _options(replay_id="r-bad"), _no_spark)
    assert (rest["status"], rest["rows_sent"], rest["total_sent"]) == ("ok", 3, 5), rest
    assert sorted(_sources(_waiting(cfg))) == sorted(sources[2:])
    assert _outcomes(cfg, "r-bad") == {
        **{s: (True, "failed-again") for s in sources[:2]},
        **{s: (False, "pending") for s in sources[2:]},
    }
    again = replay(cfg, None, open_lake(cfg.lake), _options(replay_id="r-bad"), _no_spark)
    assert again["rows_sent"] == 0 and _waiting(cfg) == []


def test_canary_timeout_through_the_cli(cfg: Config, sources: list[str], tmp_path: Path) -> None:
    conf = tmp_path / "replay.yaml"
    settings = {
        "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
        "lake": {"root": str(cfg.lake.root), "engine": "delta-rs"},
        "drain": {"queues": ["error", "audit"]},
    }
    conf.write_text(json.dumps(settings))
    args = ["replay", "-c", str(conf), "--where", WHERE, "--replay-id", "r-slow", "--batch-size", "2"]
    result = run_cli([*args, "--canary", "1", "--canary-wait", "2"], cfg.transport.connection, cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    assert result.summary["status"] == "canary-timeout" and sources[0] in result.summary["error"]
    assert result.summary["canary"]["canaries"][0]["outcome"] == "pending"
    assert _sources(_waiting(cfg)) == sources[:1]  # the canary only
    assert _outcomes(cfg, "r-slow") == {sources[0]: (True, "pending")}
    assert [k for k in _batch_keys(cfg, "r-slow") if not k.startswith("plan:")] == ["0/3@2"]


# Where the replay dies: batch 0 sent and its lineage written, before the first poll; a poll's outcomes
# read; inside the wait's own drain of the audit queue (its rows deleted from the queue and the claim
# committed, not yet in the journal); every canary processed, the rest not sent; the rest's first batch
# sent but not committed; committed, the last batch not sent.
CANARY_KILLS = [
    "canary_waiting",
    "canary_polled",
    "after_db_commit",
    "canary_passed",
    "before_replay_commit:2",
    "after_replay_commit:2",
]


def _journal_ids(cfg: Config, queue: str) -> list[str]:
    rows = journal_engine(open_lake(cfg.lake)).read_arrow("messages", columns=["queue", "message_id"])
    return [m for q, m in zip(*(rows.column(c).to_pylist() for c in ("queue", "message_id"))) if q == queue]


@pytest.mark.parametrize("point", CANARY_KILLS)
def test_a_kill_in_each_canary_phase_sends_each_message_once(
    cfg: Config, sources: list[str], tmp_path: Path, point: str
) -> None:
    conf = tmp_path / "replay.yaml"
    settings = {
        "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
        "lake": {"root": str(cfg.lake.root), "engine": "delta-rs"},
        "drain": {"queues": ["error", "audit"], "batch_size": 100},
    }
    conf.write_text(json.dumps(settings))
    args = [sys.executable, "-c", CANARY_REPLAY_SCRIPT, str(conf), WHERE, "r-kill", "2", "2"]
    env = cli_env(cfg.transport.connection)
    with Endpoint(cfg, take=2, fail=False) as endpoint:
        killed = subprocess.run(
            args, env={**env, "QUEUELAKE_TEST_KILL_AT": point}, capture_output=True, text=True, timeout=300
        )
        assert killed.returncode == -9, f"not killed at {point}: {killed.stdout[-1000:]} {killed.stderr[-3000:]}"
        rerun = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    summary = last_json(rerun.stdout)
    assert rerun.returncode == 0 and summary is not None, rerun.stderr[-3000:]
    assert summary["status"] == "ok" and summary["total_sent"] == 5, summary
    assert summary["canary"]["status"] == "processed", summary["canary"]
    # each planned message reached Billing once: the canaries (taken by the endpoint) before the rest
    assert _sources(endpoint.taken) == sources[:2], "a canary was sent twice or not at all"
    assert {m[REPLAY_ID] for m in endpoint.taken} == {"r-kill"}
    rest = _waiting(cfg)
    assert sorted(_sources(rest)) == sorted(sources[2:]) and {m[REPLAY_ID] for m in rest} == {"r-kill"}
    keys = _batch_keys(cfg, "r-kill")
    assert keys[:3] == ["0/3@2", "1/3@2", "2/3@2"] and len(keys) == 4 and keys[3].startswith("plan:")
    # the canaries' audit copies landed once each, whichever run's drain took them
    audited = _journal_ids(cfg, '"public"."audit"')
    assert len(audited) == len(set(audited)) == 2, audited
    # one lineage row per planned message, the canaries marked, outcomes from the journal
    lineage_rows = lineage.lineage_of(open_lake(cfg.lake), "r-kill").to_pylist()
    assert sorted(f"{r['queue']}@{r['seq']}" for r in lineage_rows) == sorted(sources), lineage_rows
    assert _outcomes(cfg, "r-kill") == {
        **{s: (True, "processed") for s in sources[:2]},
        **{s: (False, "pending") for s in sources[2:]},
    }


def test_a_table_refusing_a_canary_row_is_skipped_in_every_batch_left(fresh_pg_uri: str, tmp_path: Path) -> None:
    """A destination that refuses rows for what they are (a CHECK constraint), met in the canary's batch:
    its rows are recorded as skipped in every batch still to send, so the rest, sent after the wait,
    does not meet it again (they failed there: the record covered the canary's batch only)."""
    cfg = _config(fresh_pg_uri, tmp_path / "lake")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Billing", "Shipping"]))
        failed = [
            traffic.failed_copy(
                m, "Billing" if i % 2 else "Shipping", TIMEOUT, "timed out", T0 + dt.timedelta(minutes=i)
            )
            for i, m in enumerate(ORDERS)
        ]
        traffic.seed(conn, queue_ref("error", cfg.transport), failed)
        conn.raw.execute('ALTER TABLE "public"."Shipping" ADD CONSTRAINT "no_bodies" CHECK (body IS NULL)')
        conn.commit()
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    with Endpoint(cfg, take=1, fail=False):  # the canary's Billing row, processed
        summary = replay(
            cfg, None, open_lake(cfg.lake), _options(replay_id="r-refused", canary=2, canary_wait=60), _no_spark
        )
    assert summary["status"] == "ok" and summary["failed_batches"] == [], summary
    assert summary["rows_sent"] == 2 and summary["skipped"] == 3, summary
    assert [c["outcome"] for c in summary["canary"]["canaries"]] == ["processed"], summary["canary"]
    assert len(_waiting(cfg)) == 1  # the other Billing row; nothing reached Shipping
    with db.connect(cfg.transport) as conn:
        assert conn.raw.execute('SELECT count(*) FROM "public"."Shipping"').fetchone()[0] == 0


def _answer(cfg: Config, failing: int) -> list[str | None]:
    """Billing, simulated once: every message in it taken off, the first ``failing`` failed again (an error
    copy into ``error``), the others processed (an audit copy into ``audit``); then drained. Returns the
    sources of the failed ones."""
    t = cfg.transport
    failed = []
    with db.connect(t) as conn:
        rows = receive_batch(conn, queue_ref("Billing", t), 1000)
        for n, r in enumerate(rows):
            message = OutgoingMessage(r.headers or "{}", r.body, id=r.id)
            when = T0 + dt.timedelta(hours=1)
            if n < failing:
                failed.append(hdr.decode_map(message.headers).get(REPLAY_SOURCE))
                copy = traffic.failed_copy(message, "Billing", TIMEOUT, "timed out again", when)
                traffic.seed(conn, queue_ref("error", t), [copy])
            else:
                traffic.seed(conn, queue_ref("audit", t), [traffic.audit_copy(message, "Billing", when, 15)])
        conn.commit()
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    return failed


def test_a_selection_an_earlier_replay_sent_is_said_and_can_be_left_out(
    cfg: Config, sources: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The same selection under a new replay id (a rerun of "retry yesterday's failures") sent every message
    again, with no word (a review). It is said, from the lineage: the rows an earlier replay sent whose copy
    has not failed again since (processed, or not back yet), counted in ``already_replayed``; they are sent
    (a replay may mean it) unless ``--skip-replayed``, which leaves them out as skipped."""
    first = replay(cfg, None, open_lake(cfg.lake), _options(replay_id="r-1"), _no_spark)
    assert (first["status"], first["rows_sent"], first["already_replayed"]) == ("ok", 5, 0), first
    failed_again = _answer(cfg, failing=2)  # two copies failed again (two new failures), three processed
    assert len(failed_again) == 2 and set(failed_again) <= set(sources)
    dry = replay(cfg, None, open_lake(cfg.lake), _options(dry_run=True), _no_spark)
    assert dry["selected"] == 7 and dry["already_replayed"] == 3 and dry["already_replayed_by"] == {"r-1": 3}, dry
    caplog.clear()
    again = replay(cfg, None, open_lake(cfg.lake), _options(replay_id="r-2"), _no_spark)
    assert (again["status"], again["rows_sent"], again["already_replayed"], again["skipped"]) == ("ok", 7, 3, 0)
    said = [r.getMessage() for r in caplog.records if "earlier replay" in r.getMessage()]
    assert len(said) == 1 and "3 of the 7 selected row(s)" in said[0] and "3 by replay r-1 at " in said[0], said
    assert "--skip-replayed" in said[0], said
    caplog.clear()  # r-2 run again (a resume): said as resumed, not warned again
    caplog.set_level(logging.INFO, logger="queuelake")
    again = replay(cfg, None, open_lake(cfg.lake), _options(replay_id="r-2"), _no_spark)
    assert (again["status"], again["rows_sent"], again["already_replayed"]) == ("ok", 0, 3), again
    said = [r for r in caplog.records if "earlier replay" in r.getMessage()]
    assert [(r.levelname, "(resumed; said when it started)" in r.getMessage()) for r in said] == [("INFO", True)]
    # r-2's copies all fail again: nothing of the selection (now 14 rows) is left out, r-1's three included
    assert len(_answer(cfg, failing=7)) == 7
    third = replay(cfg, None, open_lake(cfg.lake), _options(replay_id="r-3", skip_replayed=True), _no_spark)
    assert (third["status"], third["rows_sent"], third["already_replayed"], third["skipped"]) == ("ok", 14, 0, 0)
    # r-3's copies are not back yet (pending): a fourth replay of the selection leaves every one out, skipped
    fourth = replay(cfg, None, open_lake(cfg.lake), _options(replay_id="r-4", skip_replayed=True), _no_spark)
    assert (fourth["status"], fourth["rows_sent"], fourth["already_replayed"], fourth["skipped"]) == ("ok", 0, 14, 14)
    assert fourth["already_replayed_by"] == {"r-3": 14}, fourth
    (reason,) = fourth["skipped_reasons"]
    assert reason.startswith("sent by replay r-3 at ") and reason.endswith("not failed again since (--skip-replayed)")
    assert len(_waiting(cfg)) == 14  # r-3's copies, each once
