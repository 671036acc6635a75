"""The drain's promise under SIGKILL, with live traffic and a competing receiver on the same table.

Every row that leaves the queue is in the journal exactly once or was taken by the competitor, never
both; no row the journal holds is ever receivable again; nothing stays in the queue or in a claim.
Kills land at random instants (from outside) and at every step of the claim protocol (from inside).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from tests.helpers.cli import run_cli
from tests.helpers.drain import claim_count, install, journal, make_config, queue_depth, seed_ids, write_config
from tests.helpers.kills import PROTOCOL_POINTS, Traffic

# points where a claim must be left behind for the next run to resolve
CLAIM_LEFT = {"after_db_commit", "lake_before_commit", "after_delta_commit"}


@pytest.mark.parametrize("where", ["before_its_commit", "after_its_commit"])
def test_a_run_killed_while_resolving_a_claim_lands_its_batch_once(
    fresh_pg_uri: str, tmp_path: Path, where: str
) -> None:
    """The start of a run commits the claims a killed run left (``resolve_claims``): killed there too,
    before the claim's Delta commit or after it (its claim not yet cleared), the next run still lands
    the batch exactly once."""
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, ["Sales"])
    install(cfg)
    seeded = seed_ids(cfg, "Sales", 1_000, seed=29)
    conf = write_config(tmp_path / "drain.yaml", lake_root, ["Sales"], batch_size=200, workers=1)
    env = {**os.environ, "QUEUELAKE_CONNECTION": fresh_pg_uri}
    cmd = [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)]

    def run(**kill: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, env={**env, **kill}, capture_output=True, text=True, timeout=300)

    first = run(QUEUELAKE_TEST_KILL_AT="after_db_commit:1")  # a batch claimed, not in the journal
    assert first.returncode == -9, first.stderr[-2000:]
    assert claim_count(cfg) == 1 and queue_depth(cfg, "Sales") == 800
    assert not (lake_root / "messages" / "_delta_log").exists() or journal(lake_root).num_rows == 0
    kill = {"QUEUELAKE_TEST_KILL_BEFORE_COMMIT": "1"} if where == "before_its_commit" else {}
    second = run(**kill, **({} if kill else {"QUEUELAKE_TEST_KILL_AT": "after_claim_resolved"}))
    assert second.returncode == -9, second.stderr[-2000:]
    assert claim_count(cfg) == 1 and queue_depth(cfg, "Sales") == 800  # killed before receiving anything
    in_journal = journal(lake_root).num_rows if (lake_root / "messages" / "_delta_log").exists() else 0
    assert in_journal == (0 if where == "before_its_commit" else 200)
    third = run()
    assert third.returncode == 0, third.stderr[-2000:]
    summary = json.loads(third.stdout.strip().splitlines()[-1])
    assert summary["dequeued"] == 800, summary
    got = journal(lake_root)["id"].to_pylist()
    assert len(got) == len(set(got)) and set(got) == seeded
    assert claim_count(cfg) == 0 and queue_depth(cfg, "Sales") == 0


@pytest.mark.slow
def test_exactly_once_under_sigkill_with_live_traffic_and_a_competitor(fresh_pg_uri: str, tmp_path: Path) -> None:
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, ["Sales"])
    install(cfg)
    seeded = seed_ids(cfg, "Sales", 40_000, seed=11)
    conf = write_config(tmp_path / "drain.yaml", lake_root, ["Sales"], batch_size=300)
    rng = random.Random(2026)
    env_base = {**os.environ, "QUEUELAKE_CONNECTION": fresh_pg_uri}
    cmd = [sys.executable, "-m", "queuelake", "drain", "-c", str(conf), "--max-messages", "2400"]
    kills, claims_seen, attempt = 0, 0, 0
    points_killed: set[str] = set()
    full_run: float | None = None  # seconds the last run that nobody killed took
    with Traffic(cfg, "Sales") as live:
        while kills < 56 and attempt < 160:
            attempt += 1
            if queue_depth(cfg, "Sales") < 3 * 2400:  # a run on a drying queue would end before its kill point
                seeded |= seed_ids(cfg, "Sales", 20_000, seed=1000 + attempt)
            env = dict(env_base)
            started = time.monotonic()
            if attempt % 2 == 0:
                point = PROTOCOL_POINTS[(attempt // 2) % len(PROTOCOL_POINTS)]
                if point == "lake_before_commit":  # inside the Delta commit: files staged, log not written
                    env["QUEUELAKE_TEST_KILL_BEFORE_COMMIT"] = "1"
                else:
                    env["QUEUELAKE_TEST_KILL_AT"] = f"{point}:{rng.randint(1, 3)}"
                proc = subprocess.run(cmd, env=env, capture_output=True, timeout=300)
                if proc.returncode == -9:
                    kills += 1
                    points_killed.add(point)
                    if point in CLAIM_LEFT:
                        claims_seen += claim_count(cfg) > 0
                elif proc.returncode == 0:
                    full_run = time.monotonic() - started
            else:
                proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                # anywhere in the run: within the length of the last uninterrupted one, once known, so
                # that kills land on a fast machine too
                until = started + (rng.uniform(0.3, 0.95) * full_run if full_run else rng.uniform(0.5, 3.0))
                while proc.poll() is None and time.monotonic() < until:
                    time.sleep(0.02)
                if proc.poll() is None:
                    proc.kill()
                    kills += 1
                else:
                    full_run = time.monotonic() - started
                proc.wait()
        assert not live.errors, live.errors
        assert live.taken, "the competitor took nothing: the test proves nothing"
    assert kills >= 50, f"only {kills} kills landed in {attempt} attempts"
    assert points_killed == set(PROTOCOL_POINTS), f"no kill landed at {set(PROTOCOL_POINTS) - points_killed}"
    assert claims_seen > 0, "no kill left a claim behind: the resolution path was never exercised"

    final = subprocess.run(
        [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)],
        env=env_base,
        capture_output=True,
        timeout=900,
        text=True,
    )
    assert final.returncode == 0, final.stderr[-3000:]
    summary = json.loads(final.stdout.strip().splitlines()[-1])
    assert summary["status"] == "ok", summary

    sent = seeded | set(live.sent)
    assert len(live.sent) == len(set(live.sent))
    landed = journal(lake_root)
    got = landed["id"].to_pylist()
    taken = live.taken
    print(
        f"kills {kills} ({len(points_killed)} protocol points), sent {len(sent)}, journal {len(got)}, "
        f"competitor {len(taken)}, claims left by kills {claims_seen}"
    )
    assert len(got) == len(set(got)), f"{len(got) - len(set(got))} duplicates in the journal"
    assert len(taken) == len(set(taken)), "the competitor received a row twice"
    both = set(got) & set(taken)
    assert not both, f"{len(both)} ids both in the journal and taken by the competitor"
    assert set(got) | set(taken) == sent, (
        f"missing {len(sent - set(got) - set(taken))}, unknown {len((set(got) | set(taken)) - sent)}"
    )
    assert pc.all(pc.equal(landed["outcome"], "landed")).as_py()
    assert queue_depth(cfg, "Sales") == 0
    assert claim_count(cfg) == 0


@pytest.mark.slow
def test_exactly_once_under_sigkill_with_many_queues_and_group_commits(fresh_pg_uri: str, tmp_path: Path) -> None:
    """Six queues drained by one run whose claimed batches go to the journal in group commits (one
    Delta commit carrying several workers' and queues' batches), killed at every step of the protocol,
    inside a group commit included, and at random instants: every row is in the journal exactly once."""
    lake_root = tmp_path / "lake"
    names = [f"Endpoint{i}" for i in range(6)]
    cfg = make_config(fresh_pg_uri, lake_root, names)
    install(cfg)
    seeded: set[str] = set()
    # group commits by design, not by the machine's pace: back to back, each batch was committed alone
    # whenever the committer kept up (24 commits for 24 batches of a run on a loaded CI machine); that
    # some commit carried several batches is asserted over all the runs (``grouped``)
    conf = write_config(tmp_path / "drain.yaml", lake_root, names, batch_size=200, commit_interval_seconds=0.2)
    rng = random.Random(32)
    env_base = {**os.environ, "QUEUELAKE_CONNECTION": fresh_pg_uri}
    cmd = [sys.executable, "-m", "queuelake", "drain", "-c", str(conf), "--max-messages", "800"]
    kills, attempt, grouped = 0, 0, 0
    points_killed: set[str] = set()
    while kills < 24 and attempt < 80:
        attempt += 1
        for i, name in enumerate(names):
            if queue_depth(cfg, name) < 2 * 800:
                seeded |= seed_ids(cfg, name, 3_000, seed=7000 + 100 * attempt + i)
        env = dict(env_base)
        if attempt % 3:
            point = PROTOCOL_POINTS[attempt % len(PROTOCOL_POINTS)]
            if point == "lake_before_commit":
                env["QUEUELAKE_TEST_KILL_BEFORE_COMMIT"] = "1"
            else:
                env["QUEUELAKE_TEST_KILL_AT"] = f"{point}:{rng.randint(1, 6)}"
            proc = subprocess.run(cmd, env=env, capture_output=True, timeout=300, text=True)
            if proc.returncode == -9:
                kills += 1
                points_killed.add(point)
        else:
            started = time.monotonic()
            proc = subprocess.run(cmd, env=env, capture_output=True, timeout=300, text=True)
            wall = time.monotonic() - started
            assert proc.returncode == 0, proc.stderr[-3000:]
            summary = json.loads(proc.stdout.strip().splitlines()[-1])
            grouped = max(grouped, summary["largest_group"])
            assert summary["journal_commits"] <= 1 + wall / 0.2, (wall, summary)  # one per interval at most
    assert kills >= 20, f"only {kills} kills landed in {attempt} attempts"
    assert points_killed == set(PROTOCOL_POINTS), f"no kill landed at {set(PROTOCOL_POINTS) - points_killed}"
    assert grouped > 1, "no commit carried more than one batch: group commits were never exercised"
    final = run_cli(["drain", "-c", str(conf)], env=env_base, timeout=900)
    assert final.returncode == 0, final.stderr[-3000:]
    got = journal(lake_root)["id"].to_pylist()
    print(f"kills {kills}, seeded {len(seeded)}, journal {len(got)}, largest group {grouped}")
    assert len(got) == len(set(got)), f"{len(got) - len(set(got))} duplicates in the journal"
    assert set(got) == seeded, f"missing {len(seeded - set(got))}, unknown {len(set(got) - seeded)}"
    assert all(queue_depth(cfg, name) == 0 for name in names)
    assert claim_count(cfg) == 0
