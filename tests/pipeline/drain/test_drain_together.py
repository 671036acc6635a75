"""Small queues drained together on the driver (``pipeline/drain/small_queues.py``): one batch, one claim
and one Parquet file for several queues, against real PostgreSQL and real Delta files."""

from __future__ import annotations

import collections
import json
import logging
import os
import subprocess
import sys
import types
import uuid
from pathlib import Path

import orjson
import psycopg
import pytest
from queuelake.lake.engines import open_lake
from queuelake.nsb import headers as hdr
from queuelake.pipeline.drain import run as drain_run
from queuelake.pipeline.drain import small_queues
from queuelake.pipeline.drain.backlog import Backlog, Estimate
from queuelake.pipeline.drain.queue_drain import take_drain_lock
from queuelake.status import Status
from queuelake.transport import claims, db, queues
from queuelake.transport.table_refs import queue_ref

from tests.helpers.drain import (
    claim_count,
    install,
    journal,
    lock_sessions_ended_at_batch,
    make_config,
    queue_depth,
    seed_ids,
    write_config,
)
from tests.helpers.edges import EXPIRES, TOP, WIRE_TIMES
from tests.helpers.faults import stats_fail_on, storage_down
from tests.helpers.kills import PROTOCOL_POINTS, Traffic, wait_for_no_drain
from tests.helpers.stages import drain

NAMES = [f"Small{i:02d}" for i in range(12)]


def _seed(cfg: object, names: list[str], rows: int) -> dict[str, set[str]]:
    return {name: seed_ids(cfg, name, rows, seed=100 + i) for i, name in enumerate(names)}


def _by_batch(lake_root: Path) -> dict[str, set[str]]:
    """The queues of each journal batch."""
    rows = journal(lake_root).select(["batch_id", "queue"]).to_pylist()
    found: dict[str, set[str]] = collections.defaultdict(set)
    for row in rows:
        found[row["batch_id"]].add(row["queue"])
    return found


def _shared_a_batch(queue: str, lake_root: Path) -> bool:
    """Whether a journal batch holds rows of ``queue`` and of another queue."""
    return lake_root.joinpath("messages").exists() and any(
        queue in qs for qs in _by_batch(lake_root).values() if len(qs) > 1
    )


class _Clocked:
    """What ``SmallQueues._share_seconds`` reads of a queue's drain, and the seconds it is given."""

    def __init__(self, name: str) -> None:
        self.ref = types.SimpleNamespace(canonical=name)
        self.result = types.SimpleNamespace(status=Status.OK)
        self.seconds: float | None = None

    def stop_clock(self, seconds: float | None = None) -> None:
        self.seconds = seconds


def test_a_batch_s_seconds_are_shared_by_rows_not_repeated() -> None:
    """Queues drained together split the batch's time by their rows (plus one each for the statements
    they cost), on top of their time alone; summed, they are the batch's time, not a multiple of it.
    Before, a queue of 10 rows beside 60 others reported the whole batch's seconds."""
    drains = [_Clocked(name) for name in ("A", "B", "C")]
    batch = small_queues.SmallQueues.__new__(small_queues.SmallQueues)
    batch.drains = drains  # type: ignore[assignment]
    batch._rows = {"A": 9, "B": 19, "C": 0}
    batch._own = {"A": 0.5, "B": 0.0, "C": 0.0}
    batch._share_seconds(3.5)  # 0.5 s on A alone, 3 s together: 10, 20 and 1 parts of 31
    seconds = {d.ref.canonical: d.seconds for d in drains}
    assert seconds == pytest.approx({"A": 0.5 + 3 * 10 / 31, "B": 3 * 20 / 31, "C": 3 / 31})
    assert sum(seconds.values()) == pytest.approx(3.5)


def test_small_queues_share_one_batch_and_keep_their_own_figures(
    fresh_pg_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """12 queues of 30 rows with batches of 100: 4 batches of 3 queues each, every row once and under
    its own queue, each queue's figures its own, one progress line per batch naming its queues."""
    caplog.set_level(logging.INFO, logger="queuelake")
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, NAMES, batch_size=100)
    install(cfg)
    seeded = _seed(cfg, NAMES, 30)
    summary = drain(cfg, open_lake(cfg.lake))
    assert summary["status"] == "ok", summary
    assert summary["dequeued"] == 360
    for q in summary["queues"]:
        assert (q["status"], q["dequeued"], q["landed"], q["batches"], q["backlog_left"]) == ("ok", 30, 30, 1, 0), q
        assert q["seconds"] > 0 and q["rate"] == round(30 / q["seconds"], 1), q
    # how the queues of a batch share its seconds: test_a_batch_s_seconds_are_shared_by_rows_not_repeated
    batches = _by_batch(lake_root)
    assert sorted(len(queues_) for queues_ in batches.values()) == [3, 3, 3, 3], batches
    lines = [r.getMessage() for r in caplog.records if "small queue(s) in one batch" in r.getMessage()]
    assert len(lines) == 4 and all("90 message(s) (90 landed" in line for line in lines), lines
    for name in NAMES:  # each queue named, with its rows, in one line
        assert sum(f'"{name}" 30' in line for line in lines) == 1, (name, lines)
    assert not [r for r in caplog.records if "so far at" in r.getMessage()]
    assert summary["journal_commits"] <= 4
    rows = journal(lake_root).select(["id", "queue"]).to_pylist()
    assert len(rows) == 360 == len({r["id"] for r in rows})
    for name, ids in seeded.items():
        canonical = queue_ref(name, cfg.transport).canonical  # type: ignore[attr-defined]
        assert {r["id"] for r in rows if r["queue"] == canonical} == ids, name
    assert claim_count(cfg) == 0 and all(queue_depth(cfg, n) == 0 for n in NAMES)


def test_small_queues_whose_lock_session_went_claim_nothing(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queues of a shared batch are locked on one session, which idles while the batch is received:
    a terminated (or timed-out) session freed every lock, and the batch was claimed all the same (a
    review; a queue's own workers confirm their lock since round 51). The batch claims nothing, its rows
    stay in their queues, and the next drain takes each once."""
    from queuelake import kill_points

    names = NAMES[:6]
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", names, batch_size=100)
    install(cfg)
    seeded = _seed(cfg, names, 30)
    monkeypatch.setattr(kill_points, "reached", lock_sessions_ended_at_batch(fresh_pg_uri, 2, kill_points.reached))
    first = drain(cfg, open_lake(cfg.lake))
    failed = [q for q in first["queues"] if q["status"] == "failed"]
    # the batch staged second fails (with the other one, when the run drained the two groups at once)
    assert len(failed) in (3, 6) and all("its lock went with its database connection" in q["error"] for q in failed)
    left = 30 * len(failed)
    assert first["landed"] == 180 - left and sum(queue_depth(cfg, n) for n in names) == left, first
    monkeypatch.undo()
    assert drain(cfg, open_lake(cfg.lake))["landed"] == left
    rows = journal(tmp_path / "lake").select(["id"]).to_pylist()
    assert len(rows) == 180 and {r["id"] for r in rows} == set().union(*seeded.values())
    assert claim_count(cfg) == 0


def test_rows_held_elsewhere_leave_their_queue_incomplete_and_the_others_clean(
    fresh_pg_uri: str, tmp_path: Path
) -> None:
    """A competitor holds 3 rows of the middle queue: that queue settles on its own worker and reports
    them; the queues drained with it in the same batch finish clean."""
    names = NAMES[:3]
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", names, batch_size=100, settle_seconds=0.5)
    install(cfg)
    seeded = _seed(cfg, names, 20)
    holder = db.connect(cfg.transport)  # type: ignore[attr-defined]
    try:
        held = queues.receive_batch(holder, queue_ref(names[1], cfg.transport), 3)  # type: ignore[attr-defined]
        summary = drain(cfg, open_lake(cfg.lake))
    finally:
        holder.rollback()
        holder.close()
    assert summary["status"] == "incomplete", summary
    by_name = {q["queue"].split(".")[-1].strip('"'): q for q in summary["queues"]}
    assert (by_name[names[1]]["status"], by_name[names[1]]["held_by_others"], by_name[names[1]]["dequeued"]) == (
        "incomplete",
        3,
        17,
    )
    for name in (names[0], names[2]):
        assert (by_name[name]["status"], by_name[name]["dequeued"], by_name[name]["backlog_left"]) == ("ok", 20, 0)
    assert len(_by_batch(tmp_path / "lake")) == 1, "the three queues were not drained together"
    again = drain(cfg, open_lake(cfg.lake))
    assert again["status"] == "ok" and again["dequeued"] == 3
    got = journal(tmp_path / "lake")["id"].to_pylist()
    assert len(got) == len(set(got)) and set(got) == set().union(*seeded.values())
    assert {r.id for r in held} <= seeded[names[1]]


def test_churned_small_queues_share_batches(fresh_pg_uri: str, tmp_path: Path) -> None:
    """Six queues churned as production leaves them (2,000 rows sent, all received, analysed: the
    planner believes them empty over 500 pages of dead rows), then 30 rows each: they share batches as
    fresh ones do, every row once, every queue found empty."""
    names = NAMES[:6]
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, names, batch_size=100)
    install(cfg)
    with psycopg.connect(fresh_pg_uri, autocommit=True) as conn:
        for i, name in enumerate(names):
            seed_ids(cfg, name, 2000, seed=50 + i)
            conn.execute(f'DELETE FROM "public"."{name}"')
            conn.execute(f'ANALYZE "public"."{name}"')
            (reltuples, relpages) = conn.execute(
                "SELECT reltuples, relpages FROM pg_class WHERE oid = %s::regclass", (f'"public"."{name}"',)
            ).fetchone()
            assert reltuples == 0 and relpages > 0, (name, reltuples, relpages)
    seeded = _seed(cfg, names, 30)
    summary = drain(cfg, open_lake(cfg.lake))
    assert summary["status"] == "ok", summary
    assert [(q["dequeued"], q["batches"], q["backlog_left"]) for q in summary["queues"]] == [(30, 1, 0)] * 6
    got = journal(lake_root)["id"].to_pylist()
    assert len(got) == len(set(got)) == 180 and set(got) == set().union(*seeded.values())
    assert sorted(len(qs) for qs in _by_batch(lake_root).values()) == [3, 3]


def test_a_queue_another_drain_holds_is_skipped_and_the_rest_drained(fresh_pg_uri: str, tmp_path: Path) -> None:
    names = NAMES[:3]
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", names, batch_size=100)
    install(cfg)
    _seed(cfg, names, 20)
    with db.connect(cfg.transport) as other:  # type: ignore[attr-defined]
        assert take_drain_lock(other, queue_ref(names[0], cfg.transport))  # type: ignore[attr-defined]
        summary = drain(cfg, open_lake(cfg.lake))
    statuses = [(q["status"], q["dequeued"]) for q in summary["queues"]]
    assert statuses == [("skipped", 0), ("ok", 20), ("ok", 20)], summary
    assert "lock held" in summary["queues"][0]["error"]
    assert queue_depth(cfg, names[0]) == 20
    assert len(_by_batch(tmp_path / "lake")) == 1
    again = drain(cfg, open_lake(cfg.lake))  # the lock is free now: its rows, on its own
    assert again["dequeued"] == 20 and queue_depth(cfg, names[0]) == 0


def test_queues_that_outgrew_the_estimate_go_on_with_their_own_workers(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimate said 10 rows a queue (so all 6 share a batch of 100); each holds 150. The first
    fills the batch, the rest find no room: every queue goes on with its own worker, nothing is lost,
    and each queue's figures count every batch."""
    names = NAMES[:6]
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, names, batch_size=100)
    install(cfg)
    seeded = _seed(cfg, names, 150)

    def stale(database, refs):  # type: ignore[no-untyped-def]
        return Estimate({r.canonical: Backlog(10, 0) for r in refs})

    monkeypatch.setattr(drain_run, "estimate", stale)
    summary = drain(cfg, open_lake(cfg.lake))
    assert summary["status"] == "ok", summary
    assert [(q["dequeued"], q["backlog_left"]) for q in summary["queues"]] == [(150, 0)] * 6
    assert sum(q["batches"] for q in summary["queues"]) == 12  # 100 together + 50, then 2 each of the rest
    shared = [b for b, qs in _by_batch(lake_root).items() if b.endswith(":1") and "together" in b]
    assert len(shared) == 1
    got = journal(lake_root)["id"].to_pylist()
    assert len(got) == 900 == len(set(got)) and set(got) == set().union(*seeded.values())


def test_a_batch_of_small_queues_killed_after_its_claim_lands_once_with_its_first_queue(
    fresh_pg_uri: str, tmp_path: Path
) -> None:
    """Killed after the DB commit of a shared batch: its rows are gone from four queues and held by
    one claim, filed under the batch's first queue. The next run resolves it (one claim, on that
    queue) and every row is in the journal once."""
    names = NAMES[:8]
    lake_root = tmp_path / "lake"
    cfg, seeded, left, cmd, env = _killed_after_a_shared_claim(fresh_pg_uri, lake_root, names)
    final = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr[-2000:]
    summary = json.loads(final.stdout.strip().splitlines()[-1])
    assert summary["claims_resolved"] == left
    assert [q["claims_resolved"] for q in summary["queues"] if q["claims_resolved"]] == [1] * left
    got = journal(lake_root)["id"].to_pylist()
    assert len(got) == len(set(got)) == 200 and set(got) == set().union(*seeded.values())
    assert claim_count(cfg) == 0 and all(queue_depth(cfg, n) == 0 for n in names)


def _killed_after_a_shared_claim(uri: str, lake_root: Path, names: list[str]):  # type: ignore[no-untyped-def]
    """``names`` (8 queues of 25 rows, four to a batch of 100) drained by a command killed after the
    DB commit of its first shared batch: (config, seeded ids, claims left, the command, its env)."""
    cfg = make_config(uri, lake_root, names, batch_size=100)
    install(cfg)
    seeded = _seed(cfg, names, 25)
    conf = write_config(lake_root.parent / "d.yaml", lake_root, names, batch_size=100)
    env = {**os.environ, "QUEUELAKE_CONNECTION": uri, "QUEUELAKE_TEST_KILL_AT": "after_db_commit:1"}
    cmd = [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    # counted once the killed run's sessions are gone: the other batch's claim commit, on its way when
    # the process died, has landed (or not) by then, so ``left`` and the emptied queues agree with what
    # the next run resolves
    wait_for_no_drain(uri)
    left = claim_count(cfg)  # the other batch (two run at once) may have committed its claim just before
    assert left in (1, 2)
    emptied = [n for n in names if queue_depth(cfg, n) == 0]
    assert len(emptied) == 4 * left, "a claimed batch did not take four queues' rows"
    env.pop("QUEUELAKE_TEST_KILL_AT")
    return cfg, seeded, left, cmd, env


@pytest.mark.parametrize("on", ["driver", "processes"])
def test_a_shared_batch_is_landed_by_a_run_without_its_first_queue(fresh_pg_uri: str, tmp_path: Path, on: str) -> None:
    """A killed shared batch's claim is filed under its first queue; runs that drain only the other
    queues (``--queue``) land it all the same, under the first queue's lock, without receiving from it:
    not while another drain holds that lock (that drain lands it), and once the lock is free. The same
    whether the run drains on the driver or in processes."""
    names = NAMES[:8]
    lake_root = tmp_path / "lake"
    _, seeded, left, _, _ = _killed_after_a_shared_claim(fresh_pg_uri, lake_root, names)
    cfg = make_config(fresh_pg_uri, lake_root, names, batch_size=100, on=on)
    table = claims.claims_ref(cfg.transport)  # type: ignore[attr-defined]
    with db.connect(cfg.transport) as conn:  # type: ignore[attr-defined]
        anchors = {c.queue for c in claims.every_claim(conn, table)}
    assert len(anchors) == left
    members = [n for n in names if queue_ref(n, cfg.transport).canonical not in anchors]  # type: ignore[attr-defined]
    # sent since the kill: the runs below must not receive them
    later = {a: seed_ids(cfg, a, 5, seed=700 + i) for i, a in enumerate(sorted(anchors))}
    with db.connect(cfg.transport) as other:  # type: ignore[attr-defined]
        for anchor in anchors:
            assert take_drain_lock(other, queue_ref(anchor, cfg.transport))  # type: ignore[attr-defined]
        held = drain(cfg, open_lake(cfg.lake), queue_names=members)
    assert held["claims_resolved"] == 0 and claim_count(cfg) == left, held
    summary = drain(cfg, open_lake(cfg.lake), queue_names=members)
    assert summary["status"] == "ok", summary
    assert summary["claims_resolved"] == left and claim_count(cfg) == 0, summary
    assert all(queue_depth(cfg, a) == 5 for a in anchors)  # nothing received from them
    got = journal(lake_root)["id"].to_pylist()
    assert len(got) == len(set(got)) == 200 and set(got) == set().union(*seeded.values())
    assert not set(got) & set().union(*later.values())


def test_a_shared_batch_that_cannot_be_landed_fails_the_queues_whose_rows_it_holds(
    fresh_pg_uri: str, tmp_path: Path
) -> None:
    """The claim filed under a queue outside the run cannot be landed (its staged files were removed,
    as a VACUUM of uncommitted files would): the queues whose rows it holds fail, naming the queue it
    is filed under and why, and the run fails; the run's other queues drain as usual, and the claims
    stay for a later run (``status`` shows them)."""
    names = NAMES[:8]
    lake_root = tmp_path / "lake"
    _, seeded, left, _, _ = _killed_after_a_shared_claim(fresh_pg_uri, lake_root, names)
    cfg = make_config(fresh_pg_uri, lake_root, names, batch_size=100)
    table = claims.claims_ref(cfg.transport)  # type: ignore[attr-defined]
    with db.connect(cfg.transport) as conn:  # type: ignore[attr-defined]
        left_behind = claims.every_claim(conn, table)
    anchors = {c.queue for c in left_behind}
    stranded = {q for c in left_behind for q in json.loads(c.staged)["queues"]} - anchors
    for claim in left_behind:
        for f in json.loads(claim.staged)["files"]:
            (lake_root / "messages" / f["path"]).unlink()
    members = [n for n in names if queue_ref(n, cfg.transport).canonical not in anchors]  # type: ignore[attr-defined]
    summary = drain(cfg, open_lake(cfg.lake), queue_names=members)
    assert summary["status"] == "failed", summary
    failed = {q["queue"]: q["error"] for q in summary["queues"] if q["status"] == "failed"}
    assert set(failed) == stranded and len(stranded) == 3 * left, summary
    assert all("claimed under" in e and "staged files" in e for e in failed.values()), failed
    assert all(any(a in e for a in anchors) for e in failed.values()), failed
    assert all(q["status"] == "ok" for q in summary["queues"] if q["queue"] not in stranded), summary
    assert summary["claims_resolved"] == 0 and claim_count(cfg) == left
    canonical = {n: queue_ref(n, cfg.transport).canonical for n in names}  # type: ignore[attr-defined]
    landed = set().union(*(seeded[n] for n in names if canonical[n] not in stranded | anchors))
    assert set(journal(lake_root)["id"].to_pylist()) == landed


@pytest.mark.slow
def test_exactly_once_under_sigkill_at_every_step_of_a_shared_batch(fresh_pg_uri: str, tmp_path: Path) -> None:
    """Eight small queues, two to a batch, refilled and drained by runs killed at every step of the
    claim protocol (inside the receive, the staging, the claim, the Delta commit): every row is in the
    journal exactly once after a clean run or taken by a competing receiver of one queue (never both),
    and nothing is left in a queue or a claim."""
    names = NAMES[:8]
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, names, batch_size=100)
    install(cfg)
    conf = write_config(tmp_path / "d.yaml", lake_root, names, batch_size=100)
    env_base = {**os.environ, "QUEUELAKE_CONNECTION": fresh_pg_uri}
    cmd = [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)]
    seeded: set[str] = set()
    killed: collections.Counter[str] = collections.Counter()
    # sends and a competing receiver on one of the queues throughout, slow enough for it to stay small
    # and for the drain to take some of its rows
    with Traffic(cfg, names[3], pause=0.5, take_pause=0.02) as live:
        for attempt, point in enumerate(PROTOCOL_POINTS * 2):
            for i, name in enumerate(names):
                if queue_depth(cfg, name) < 40:
                    seeded |= seed_ids(cfg, name, 40, seed=1000 * attempt + i)
            env = dict(env_base)
            if point == "lake_before_commit":
                env["QUEUELAKE_TEST_KILL_BEFORE_COMMIT"] = "1"
            else:
                env["QUEUELAKE_TEST_KILL_AT"] = f"{point}:{1 + attempt % 3}"
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
            assert proc.returncode in (-9, 0), proc.stderr[-3000:]
            killed[point] += proc.returncode == -9
        # the competed queue in a shared batch (checked below): as a rule in the runs above, but a fast
        # competitor may have emptied it before each of them took its rows. Then clean runs with the traffic
        # paused, so that it holds rows the competitor cannot take: the first lands what the killed runs
        # left and empties every queue, so the second finds 40 rows in each, two queues to a batch
        extra = 0
        while not _shared_a_batch(live.ref.canonical, lake_root) and extra < 3:
            extra += 1
            with live.paused():
                wait_for_no_drain(fresh_pg_uri)
                for i, name in enumerate(names):
                    if queue_depth(cfg, name) < 40:
                        seeded |= seed_ids(cfg, name, 40, seed=100_000 * extra + i)
                proc = subprocess.run(cmd, env=env_base, capture_output=True, text=True, timeout=300)
                assert proc.returncode == 0, proc.stderr[-3000:]
    assert not live.errors, live.errors
    assert live.taken, "the competitor took nothing: the test proves nothing"
    assert set(killed) == set(PROTOCOL_POINTS) and all(killed.values()), killed
    wait_for_no_drain(fresh_pg_uri)  # no session of the last killed run holds a queue's lock: none is skipped
    final = subprocess.run(cmd, env=env_base, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr[-3000:]
    got = journal(lake_root)["id"].to_pylist()
    taken = set(live.taken)
    print(
        f"kills {sum(killed.values())}, seeded {len(seeded)}, sent {len(live.sent)}, competitor {len(taken)}, "
        f"runs with the traffic paused {extra}"
    )
    assert len(got) == len(set(got)), f"{len(got) - len(set(got))} duplicates in the journal"
    assert len(taken) == len(live.taken), "the competitor received a row twice"
    assert not set(got) & taken, "rows both in the journal and taken by the competitor"
    expected = seeded | set(live.sent)
    assert set(got) | taken == expected, f"missing {len(expected - set(got) - taken)}"
    assert _shared_a_batch(live.ref.canonical, lake_root), "the competed queue never shared a batch"
    assert claim_count(cfg) == 0 and all(queue_depth(cfg, n) == 0 for n in names)


def _fill(uri: str, queue: str, rows: list[dict]) -> dict[str, bool]:
    """Rows inserted as another program would (literal SQL values); returns each id's expiry as the
    database judges it."""
    expired = {}
    with psycopg.connect(uri, autocommit=True) as conn:
        for row in rows:
            (gone,) = conn.execute(
                f'INSERT INTO "public"."{queue}" (id, expires, headers, body) '
                "VALUES (%s, CAST(%s AS timestamp), %s, %s) "
                "RETURNING (expires IS NOT NULL AND expires <= (now() AT TIME ZONE 'UTC'))",
                (row["id"], row["expires"], row["headers"], row["body"]),
            ).fetchone()
            expired[row["id"]] = gone
    return expired


@pytest.mark.parametrize("on", ["driver", "processes"])
def test_values_at_the_edges_of_their_types_in_a_shared_batch(fresh_pg_uri: str, tmp_path: Path, on: str) -> None:
    """Every named edge value of Expires and of the wire times, spread over four small queues that
    share a batch: nothing stops it, each queue keeps its own rows and figures, and each value
    becomes what it becomes in a queue of its own (``test_edges.py``)."""
    names = NAMES[:4]
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, names, batch_size=500)
    install(cfg)
    rows = [{"expires": e, "headers": '{"NServiceBus.MessageId":"m"}', "body": b"x"} for e in EXPIRES]
    for when in WIRE_TIMES:
        for key in (hdr.TIME_SENT, hdr.PROCESSING_STARTED, hdr.TIME_OF_FAILURE):
            rows.append({"expires": None, "headers": orjson.dumps({key: when}).decode(), "body": b"y"})
    rows = [{**r, "id": str(uuid.uuid4())} for r in rows]
    sent: dict[str, dict[str, bool]] = {
        name: _fill(fresh_pg_uri, name, rows[i :: len(names)]) for i, name in enumerate(names)
    }
    conf = tmp_path / "d.json"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(lake_root), "engine": "delta-rs"},
                "drain": {"queues": names, "batch_size": 500, "on": on, "processes": 1},
            }
        )
    )
    env = {**os.environ, "QUEUELAKE_CONNECTION": fresh_pg_uri}
    proc = subprocess.run(
        [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["status"] == "ok", summary
    by_queue = {q["queue"]: q for q in summary["queues"]}
    journal_rows = journal(lake_root).to_pylist()
    # on the driver one batch; in processes a batch per job (two jobs of two queues per process)
    assert all(len(qs) > 1 for qs in _by_batch(lake_root).values()), "a queue did not share its batch"
    for name, ids in sent.items():
        canonical = queue_ref(name, cfg.transport).canonical  # type: ignore[attr-defined]
        mine = {r["id"]: r for r in journal_rows if r["queue"] == canonical}
        assert set(mine) == set(ids), name
        expired = sum(ids.values())
        figures = by_queue[canonical]
        assert (figures["dequeued"], figures["expired"]) == (len(ids), expired), figures
        assert figures["landed"] + figures["quarantined"] == len(ids) - expired, figures
        for row_id, gone in ids.items():
            assert (mine[row_id]["outcome"] == "expired") == gone, mine[row_id]
    by_id = {r["id"]: r for r in journal_rows}
    outcome = {r["expires"]: by_id[r["id"]]["outcome"] for r in rows if r["headers"].endswith('"m"}')}
    assert outcome["infinity"] == "landed" and outcome["-infinity"] == "expired"
    assert outcome["0044-03-15 12:30:00.5 BC"] == "expired" and outcome["20000-01-01 00:00:00"] == "landed"
    max_value = next(r for r in rows if r["headers"] == orjson.dumps({hdr.TIME_SENT: WIRE_TIMES[0]}).decode())
    assert by_id[max_value["id"]]["time_sent"] == TOP
    assert claim_count(cfg) == 0 and all(queue_depth(cfg, n) == 0 for n in names)


def test_a_row_that_cannot_be_written_in_a_shared_batch_is_quarantined_in_its_queue(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever fails for one row between the build and the claim (the file statistics, made to fail
    on one header value) quarantines that row in its own queue; the shared batch's other rows land."""
    stats_fail_on(monkeypatch, "poison")
    names = NAMES[:3]
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, names, batch_size=100)
    install(cfg)
    for name in names:
        rows = [
            {
                "id": str(uuid.uuid4()),
                "expires": None,
                "headers": orjson.dumps({hdr.MESSAGE_ID: f"m{i}"}).decode(),
                "body": b"x",
            }
            for i in range(10)
        ]
        if name == names[1]:
            rows[4]["headers"] = orjson.dumps({hdr.MESSAGE_ID: "poison"}).decode()
        _fill(fresh_pg_uri, name, rows)
    summary = drain(cfg, open_lake(cfg.lake))
    assert summary["status"] == "ok", summary
    figures = [(q["landed"], q["quarantined"]) for q in summary["queues"]]
    assert figures == [(10, 0), (9, 1), (10, 0)], summary
    (bad,) = [r for r in journal(lake_root).to_pylist() if r["outcome"] == "quarantined"]
    assert bad["queue"] == queue_ref(names[1], cfg.transport).canonical  # type: ignore[attr-defined]
    assert bad["error"] == "journal could not be stored for this row: OverflowError: date value out of range"
    assert len(_by_batch(lake_root)) == 1 and claim_count(cfg) == 0


def test_a_lake_that_fails_whatever_the_rows_fails_the_shared_batch_and_loses_nothing(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every write to the lake's storage fails while the same rows write fine elsewhere: no queue's
    rows are to blame, so none is quarantined; every queue of the batch fails and keeps its rows."""
    lake_root = tmp_path / "lake"
    storage_down(monkeypatch, lake_root)
    names = NAMES[:3]
    cfg = make_config(fresh_pg_uri, lake_root, names, batch_size=100)
    install(cfg)
    _seed(cfg, names, 10)
    summary = drain(cfg, open_lake(cfg.lake))
    assert summary["status"] == "failed", summary
    assert all("No space left on device" in q["error"] for q in summary["queues"]), summary
    assert [queue_depth(cfg, n) for n in names] == [10, 10, 10]
    assert claim_count(cfg) == 0


def test_a_queue_whose_receive_fails_in_a_shared_batch_fails_alone(fresh_pg_uri: str, tmp_path: Path) -> None:
    """Another program renamed one queue's ``headers`` column: its receive failed inside the shared
    batch's transaction, and its batch-mates failed with its error on every run, their rows never
    drained (a review). The batch is received again without it: only it fails, naming its own error."""
    names = NAMES[:6]
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, names, batch_size=100)
    install(cfg)
    seeded = _seed(cfg, names, 30)
    broken = queue_ref(names[1], cfg.transport)
    with psycopg.connect(fresh_pg_uri, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE {broken.qualified} RENAME COLUMN headers TO "Headers"')  # type: ignore[attr-defined]

    summary = drain(cfg, open_lake(cfg.lake))

    by_queue = {q["queue"]: q for q in summary["queues"]}
    bad = by_queue[broken.canonical]  # type: ignore[attr-defined]
    assert bad["status"] == "failed" and names[1] in bad["error"], bad
    others = [q for name, q in by_queue.items() if name != broken.canonical]  # type: ignore[attr-defined]
    assert [(q["status"], q["landed"], q.get("error")) for q in others] == [("ok", 30, None)] * 5, others
    rows = journal(lake_root).select(["id", "queue"]).to_pylist()
    assert len(rows) == 150 == len({r["id"] for r in rows})
    assert {r["id"] for r in rows} == set().union(*(seeded[n] for n in names if n != names[1]))
    assert claim_count(cfg) == 0 and queue_depth(cfg, names[1]) == 30


def test_the_claim_of_a_queue_taken_out_of_the_config_is_landed_by_the_next_drain(
    fresh_pg_uri: str, tmp_path: Path
) -> None:
    """A drain of one queue killed after its claim's commit, then the queue taken out of the config (a
    decommissioned endpoint): no later drain resolved the claim, its rows out of the queue and out of the
    journal, while ``status`` said the next drain would (a review). The next drain of the other queues
    lands it, from this lake's journal folder; a claim whose files are not there is left alone."""
    names = ["Gone", "Kept", "Theirs"]
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, names, batch_size=1000)
    install(cfg)
    seeded = _seed(cfg, names, 25)
    conf = write_config(tmp_path / "d.yaml", lake_root, ["Gone"], batch_size=1000)
    env = {**os.environ, "QUEUELAKE_CONNECTION": fresh_pg_uri, "QUEUELAKE_TEST_KILL_AT": "after_db_commit:1"}
    cmd = [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)]
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    wait_for_no_drain(fresh_pg_uri)
    assert claim_count(cfg) == 1 and queue_depth(cfg, "Gone") == 0

    elsewhere = make_config(fresh_pg_uri, tmp_path / "another-lake", ["Theirs"], batch_size=1000)
    other = drain(elsewhere, open_lake(elsewhere.lake))  # another deployment's lake: not its claim
    assert other["claims_resolved"] == 0 and claim_count(cfg) == 1, other

    kept = make_config(fresh_pg_uri, lake_root, ["Kept"], batch_size=1000)
    summary = drain(kept, open_lake(kept.lake))
    assert summary["status"] == "ok" and summary["claims_resolved"] == 1, summary
    assert claim_count(cfg) == 0
    got = journal(lake_root)["id"].to_pylist()
    assert len(got) == len(set(got)) == 50 and set(got) == seeded["Gone"] | seeded["Kept"]
