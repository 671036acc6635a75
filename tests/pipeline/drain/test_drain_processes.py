"""The drain in local processes (``drain.on: processes``): the executors' tasks run in Python processes
of this machine, spawned by ``queuelake drain`` (run here as a user runs it, in a subprocess), against
real PostgreSQL and a real delta-rs journal; the command commits what they claim.

Kills: a process SIGKILLed at each step of the claim protocol (its job runs again in a new process:
a new drain of its queues), the command SIGKILLed in its poller (its processes find it gone, stop,
and the next run resolves what they claimed), and a SIGTERM (the processes stop at a batch
boundary). Every seeded row is in the journal exactly once, nothing is left in the claims table.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from queuelake.config import Config, ConfigError, from_dict
from queuelake.lake.reading import read_table
from queuelake.pipeline.drain.processes import process_count
from queuelake.transport.activity import PeakConnections
from queuelake.transport.database import QueueDatabase

from tests.helpers.cli import as_from_a_terminal, summary_of
from tests.helpers.drain import claim_count, commit_spacing, install, journal, make_config, queue_depth, seed_ids
from tests.helpers.kills import TASK_POINTS, drain_sessions, end_sessions, wait_for_no_drain

LIB = str(Path(__file__).resolve().parents[3] / "lib")
SMALL, BIG = 12, 3  # queues of one batch, and of several
SMALL_ROWS, BIG_ROWS, BATCH = 100, 1_000, 250


def write_conf(path: Path, lake_root: Path, names: list[str], **drain: object) -> Path:
    path.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(lake_root), "engine": "delta-rs"},
                "drain": {"queues": names, "batch_size": BATCH, "workers_per_queue": 2, "on": "processes", **drain},
            }
        )
    )
    return path


def drain(
    conf: Path, uri: str, timeout: float = 300, no_aws: bool = False, **env: str
) -> subprocess.CompletedProcess[str]:
    """``queuelake drain`` as a user runs it; ``no_aws``: no AWS_* setting reaches it (only the lake's
    storage options may reach the store)."""
    full = {**os.environ, "QUEUELAKE_CONNECTION": uri, "PYTHONPATH": LIB, **env}
    if no_aws:
        full = {k: v for k, v in full.items() if not k.startswith("AWS_")}
    for name in ("QUEUELAKE_TEST_KILL_AT", "QUEUELAKE_TEST_KILL_TOKENS"):
        if name not in env:
            full.pop(name, None)
    cmd = [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)]
    return subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=timeout)


def seed_system(uri: str, lake_root: Path, seed: int) -> tuple[object, dict[str, set[str]]]:
    """Small queues of one batch and big ones of several: a job packs the small ones."""
    names = [f"Small{i:02d}" for i in range(SMALL)] + [f"Big{i}" for i in range(BIG)]
    cfg = make_config(uri, lake_root, names)
    install(cfg)
    seeded = {
        name: seed_ids(cfg, name, SMALL_ROWS if name.startswith("Small") else BIG_ROWS, seed=seed + i)
        for i, name in enumerate(names)
    }
    return cfg, seeded


def assert_every_row_once(cfg: object, lake_root: Path, seeded: dict[str, set[str]]) -> None:
    rows = journal(lake_root)
    ids = rows["id"].to_pylist()
    assert len(ids) == len(set(ids)) == sum(len(s) for s in seeded.values())
    for name, want in seeded.items():
        got = {i for i, q in zip(ids, rows["queue"].to_pylist()) if q == f'"public"."{name}"'}
        assert got == want, name
    assert claim_count(cfg) == 0
    assert all(queue_depth(cfg, n) == 0 for n in seeded)


def task_pids(stderr: str) -> set[int]:
    return {int(p) for p in re.findall(r"a task of \d+ queue\(s\), python \S+, pid (\d+)", stderr)}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its new parent) is gone too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_commit_interval_spaces_the_pollers_group_commits(fresh_pg_uri: str, tmp_path: Path) -> None:
    """``drain.commit_interval_seconds`` with processes: the command's poller commits what it finds at
    most once per interval, however fast the processes claim (back to back it polls again at once)."""
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, ["Deep"])
    install(cfg)
    seeded = {"Deep": seed_ids(cfg, "Deep", 1_200, seed=77)}
    conf = write_conf(
        tmp_path / "drain.json", lake_root, ["Deep"], processes=1, batch_size=50, commit_interval_seconds=1.0
    )
    proc = drain(conf, fresh_pg_uri)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = summary_of(proc)
    assert summary["dequeued"] == 1_200 and summary["queues"][0]["batches"] == 24, summary
    spacing = commit_spacing(lake_root)
    assert len(spacing) == summary["journal_commits"] - 1 >= 1 and min(spacing) >= 0.5, spacing
    assert summary["largest_group"] > 1, summary
    assert_every_row_once(cfg, lake_root, seeded)


def test_many_queues_drained_in_local_processes(fresh_pg_uri: str, tmp_path: Path) -> None:
    lake_root = tmp_path / "lake"
    cfg, seeded = seed_system(fresh_pg_uri, lake_root, seed=300)
    # group commits by design (drain.commit_interval_seconds), not by the machine's pace: a poll finding
    # one claim at a time would commit batch by batch
    conf = write_conf(tmp_path / "drain.json", lake_root, list(seeded), processes=2, commit_interval_seconds=0.2)
    proc = drain(conf, fresh_pg_uri)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = summary_of(proc)
    total = SMALL * SMALL_ROWS + BIG * BIG_ROWS
    assert summary["status"] == "ok" and summary["on"] == "processes", summary
    assert summary["dequeued"] == summary["landed"] == total, summary
    assert summary["processes"] == 2 and BIG < summary["jobs"] < SMALL + BIG, summary  # small queues share jobs
    # each process: a queue's lock, 2 workers, ADBC's; the command's poller
    assert summary["peak_connections"] == 2 * 4 + 1, summary
    for q in summary["queues"]:
        rows = SMALL_ROWS if "Small" in q["queue"] else BIG_ROWS
        assert (q["status"], q["dequeued"], q["landed"], q["backlog_left"]) == ("ok", rows, rows, 0), q
    assert summary["journal_commits"] < summary["dequeued"] / BATCH, summary  # group commits
    assert_every_row_once(cfg, lake_root, seeded)
    # small queues of a job share batches (``small_queues.py``): 2 of 100 rows to a batch of 250
    batches = journal(lake_root).select(["batch_id", "queue"]).to_pylist()
    shared = {b["batch_id"] for b in batches if "together" in b["batch_id"]}
    assert shared and all(len({b["queue"] for b in batches if b["batch_id"] == s}) == 2 for s in shared)
    runs = [r for r in read_table(str(lake_root / "runs")).to_pylist() if r["run_id"] == summary["run_id"]]
    assert sorted(r["queue"] for r in runs) == sorted(f'"public"."{n}"' for n in seeded)
    # the queues were drained by two other processes, each running several jobs, and both are gone
    pids = task_pids(proc.stderr)
    assert len(pids) == 2 and os.getpid() not in pids, proc.stderr[-3000:]
    assert len(re.findall(r"a task of \d+ queue\(s\)", proc.stderr)) == summary["jobs"]
    assert not any(alive(p) for p in pids)
    assert drain_sessions(fresh_pg_uri) == 0


def test_a_tasks_lock_session_on_adbc_serves_its_workers_and_its_committer(fresh_pg_uri: str, tmp_path: Path) -> None:
    """A task's lock session is used by its queue's workers (each confirms the lock before its claim) and
    by its committer (which reads the claims the driver has not committed yet): two threads' statements
    overlapping on one ADBC session hung the drain for good (a review: 2,400 of 80,000 rows, then
    nothing). Every statement on a shared session takes its ``shared`` lock."""
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, ["Deep"])
    install(cfg)
    seeded = {"Deep": seed_ids(cfg, "Deep", 20_000, seed=78)}
    conf = tmp_path / "drain.json"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}", "driver": "adbc"},
                "lake": {"root": str(lake_root), "engine": "delta-rs"},
                "drain": {"queues": ["Deep"], "batch_size": 100, "workers_per_queue": 4, "on": "processes"},
            }
        )
    )
    proc = drain(conf, fresh_pg_uri, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert summary_of(proc)["landed"] == 20_000
    assert_every_row_once(cfg, lake_root, seeded)


def test_connections_stay_within_the_reported_bound_with_an_idle_process(fresh_pg_uri: str, tmp_path: Path) -> None:
    """One queue, two processes: one drains, the other idles holding its ADBC database from its start;
    the bound the summary reports counts it, and the connections seen from outside stay within it."""
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, ["Alone"])
    install(cfg)
    seeded = {"Alone": seed_ids(cfg, "Alone", 2_000, seed=9)}
    conf = write_conf(tmp_path / "drain.json", lake_root, ["Alone"], processes=2)
    with PeakConnections(fresh_pg_uri) as watch:
        proc = drain(conf, fresh_pg_uri)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = summary_of(proc)
    # the drainer: its lock, 2 workers, ADBC's; the idle one: ADBC's; the command's poller
    assert summary["peak_connections"] == 4 + 1 + 1, summary
    assert 4 <= watch.peak <= summary["peak_connections"], (watch.peak, watch.at_peak)
    assert_every_row_once(cfg, lake_root, seeded)


@pytest.mark.slow
@pytest.mark.parametrize("point", TASK_POINTS)
def test_a_process_killed_at_every_step_of_the_claim(fresh_pg_uri: str, tmp_path: Path, point: str) -> None:
    """Two processes SIGKILLed at ``point`` (their 2nd time there: a packed job's 2nd queue, or a big
    queue's 2nd batch): their jobs run again in new processes, which wait for the command to commit
    what the dead ones claimed. Every row once; every queue's figures exact."""
    lake_root = tmp_path / "lake"
    cfg, seeded = seed_system(fresh_pg_uri, lake_root, seed=400)
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    for k in range(2):
        (tokens / str(k)).touch()
    conf = write_conf(tmp_path / "drain.json", lake_root, list(seeded), processes=2)
    proc = drain(conf, fresh_pg_uri, QUEUELAKE_TEST_KILL_AT=f"{point}:2", QUEUELAKE_TEST_KILL_TOKENS=str(tokens))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not list(tokens.iterdir()), "fewer than two processes were killed"
    assert proc.stderr.count("its process died; the job runs again in a new process") == 2, proc.stderr[-3000:]
    summary = summary_of(proc)
    total = SMALL * SMALL_ROWS + BIG * BIG_ROWS
    assert summary["status"] == "ok" and summary["dequeued"] == summary["landed"] == total, summary
    for q in summary["queues"]:
        rows = SMALL_ROWS if "Small" in q["queue"] else BIG_ROWS
        assert (q["status"], q["dequeued"], q["landed"], q["backlog_left"]) == ("ok", rows, rows, 0), q
    assert_every_row_once(cfg, lake_root, seeded)
    assert not any(alive(p) for p in task_pids(proc.stderr))


def one_deep_queue(
    uri: str, tmp_path: Path, rows: int, seed: int
) -> tuple[Config, Path, dict[str, set[str]], Path, dict[str, str]]:
    """One queue ``Deep`` of ``rows`` drained by one process, a batch of 100 at a time: (its config, the
    lake's root, the ids seeded, the drain's config file, the command's environment)."""
    lake_root = tmp_path / "lake"
    cfg = make_config(uri, lake_root, ["Deep"])
    install(cfg)
    seeded = {"Deep": seed_ids(cfg, "Deep", rows, seed=seed)}
    conf = write_conf(tmp_path / "drain.json", lake_root, ["Deep"], processes=1, batch_size=100, workers_per_queue=1)
    return cfg, lake_root, seeded, conf, {**os.environ, "QUEUELAKE_CONNECTION": uri, "PYTHONPATH": LIB}


def test_the_commands_commit_session_lost_fails_its_queues_and_the_next_run_lands_their_claims(
    fresh_pg_uri: str, tmp_path: Path
) -> None:
    """The command's claims poller loses its session (``pg_terminate_backend``) while a process drains:
    the process stops at its next batch boundary, and its queue says *failed* with the poller's error,
    not *interrupted* as though a stop had been asked (a review); the next run commits what it claimed,
    every row once, and counts those rows (``rows_resolved``): every row in some summary."""
    cfg, lake_root, seeded, conf, env = one_deep_queue(fresh_pg_uri, tmp_path, 2_000, seed=81)
    mark = tmp_path / "held"
    # the process held 6 s after its 3rd batch's claim
    env.update({"QUEUELAKE_TEST_HOLD_AT": "after_db_commit:6:3", "QUEUELAKE_TEST_HOLD_MARK": str(mark)})
    cmd = [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mark.exists(), "the process never held"
    assert end_sessions(fresh_pg_uri, "queuelake-drain-commit") == 1
    out, err = proc.communicate(timeout=300)
    first = json.loads(out.strip().splitlines()[-1])
    assert proc.returncode == 1 and first["status"] == "failed", (first, err[-3000:])
    (queue,) = first["queues"]
    assert queue["status"] == "failed" and queue["error_kind"] == "transport", queue
    # psycopg says the one or the other, by whether the server's notice arrived before the next statement
    assert any(said in queue["error"] for said in ("terminat", "connection is closed")), queue

    # the batches the process claimed and the poller did not commit (none when it committed all three)
    claimed = claim_count(cfg)
    assert queue_depth(cfg, "Deep") == 2_000 - first["dequeued"] - 100 * claimed, claimed

    second = drain(conf, fresh_pg_uri)
    assert second.returncode == 0, second.stderr[-4000:]
    again = summary_of(second)
    # every row in one summary: the first run's claims are the second's rows_resolved
    assert (again["claims_resolved"], again["rows_resolved"]) == (claimed, 100 * claimed), again
    assert again["dequeued"] + again["rows_resolved"] + first["dequeued"] == 2_000, (first, again)
    assert again["queues"][0]["rows_resolved"] == 100 * claimed, again
    assert_every_row_once(cfg, lake_root, seeded)


def test_the_commit_session_lost_after_a_process_died_ends_the_command(fresh_pg_uri: str, tmp_path: Path) -> None:
    """A process SIGKILLed while its stop watch waited, then the command's commit session lost: the
    command passes the stop on to its processes and ends. It hung for good: a multiprocessing Event's
    ``set`` waited for the dead process to wake (a review)."""
    cfg, lake_root, seeded, conf, env = one_deep_queue(fresh_pg_uri, tmp_path, 20_000, seed=83)
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    (tokens / "0").touch()
    env.update({"QUEUELAKE_TEST_KILL_AT": "after_stage:3", "QUEUELAKE_TEST_KILL_TOKENS": str(tokens)})
    cmd = [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)]
    err_path = tmp_path / "err"
    with err_path.open("w") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        deadline = time.monotonic() + 120
        while "its process died" not in err_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "its process died" in err_path.read_text(), err_path.read_text()[-3000:]
        while "a task of 1 queue(s)" not in err_path.read_text().split("its process died")[-1]:
            time.sleep(0.2)  # the job's second attempt, in a new process, is draining
        end_sessions(fresh_pg_uri, "queuelake-drain-commit")
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail("the command hung after its commit session went")
    assert proc.returncode == 1 and summary_of_text(out)["status"] == "failed", err_path.read_text()[-3000:]
    again = drain(conf, fresh_pg_uri)
    assert again.returncode == 0, again.stderr[-4000:]
    assert_every_row_once(cfg, lake_root, seeded)


def summary_of_text(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_a_job_whose_processes_keep_dying_fails_its_queues_only(fresh_pg_uri: str, tmp_path: Path) -> None:
    """A process killed on every attempt (more tokens than attempts): its job's queues fail, naming
    the cause; the other queues drain; whatever was claimed is in the journal once, and the next run
    drains what is left."""
    lake_root = tmp_path / "lake"
    names = ["Doomed", "Fine"]
    cfg = make_config(fresh_pg_uri, lake_root, names)
    install(cfg)
    seeded = {"Doomed": seed_ids(cfg, "Doomed", 5_000, seed=1), "Fine": seed_ids(cfg, "Fine", 1_000, seed=2)}
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    for k in range(4):
        (tokens / str(k)).touch()
    conf = write_conf(tmp_path / "drain.json", lake_root, names, processes=1, workers_per_queue=1)
    proc = drain(conf, fresh_pg_uri, QUEUELAKE_TEST_KILL_AT="after_stage:2", QUEUELAKE_TEST_KILL_TOKENS=str(tokens))
    assert proc.returncode == 1, proc.stderr[-4000:]
    summary = summary_of(proc)
    by_queue = {q["queue"]: q for q in summary["queues"]}
    doomed, fine = by_queue['"public"."Doomed"'], by_queue['"public"."Fine"']
    assert doomed["status"] == "failed" and "died 4 time(s)" in doomed["error"], summary
    # each attempt claimed a batch before its process died, and the command committed them all
    assert doomed["landed"] == doomed["dequeued"] == 4 * BATCH, doomed
    assert (fine["status"], fine["landed"]) == ("ok", 1_000), fine
    assert "postgresql://" not in proc.stderr + proc.stdout
    # every killed attempt got one batch in (claimed at its first pass, committed by the command)
    rows = journal(lake_root)["id"].to_pylist()
    assert len(rows) == len(set(rows)) and summary["landed"] == len(rows), summary
    final = drain(write_conf(tmp_path / "plain.json", lake_root, names), fresh_pg_uri)
    assert final.returncode == 0, final.stderr[-4000:]
    assert_every_row_once(cfg, lake_root, seeded)


# a command whose process is still starting when the command is SIGKILLed: argv is a file for the
# process's pid. The process's setup arrives slowly (unpickling it waits until the command is gone),
# as a spawn's imports do on a loaded machine; by the time its set-up runs, init is its parent.
COMMAND_GONE_BEFORE_ITS_PROCESS_STARTED = """
import multiprocessing, os, signal, sys, time
from concurrent.futures import ProcessPoolExecutor
from queuelake.pipeline.drain import processes

class ArrivesLate:
    def __init__(self, pid_file):
        self.pid_file = pid_file
    def __setstate__(self, state):
        self.__dict__.update(state)
        command = os.getppid()
        with open(self.pid_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(self.pid_file + ".tmp", self.pid_file)
        while os.getppid() == command:
            time.sleep(0.01)

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    initargs = (ArrivesLate(sys.argv[1]), context.Event(), 20, None, os.getpid())
    pool = ProcessPoolExecutor(1, context, initializer=processes._set_up_process, initargs=initargs)
    pool.submit(int)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_process_still_starting_when_the_command_is_killed_ends(tmp_path: Path) -> None:
    """The command SIGKILLed while one of its processes is still starting: the process ends once set
    up, though its parent is init by then (it used to watch init's pid, and stayed with its ADBC
    connection for good: a CI run found that connection 120 s after the kill)."""
    script, pid_file = tmp_path / "command.py", tmp_path / "process.pid"
    script.write_text(COMMAND_GONE_BEFORE_ITS_PROCESS_STARTED)
    env = {**os.environ, "PYTHONPATH": LIB}
    log = tmp_path / "command.log"
    with log.open("w") as out:  # a file, not a pipe: a process that lingers would hold the pipe open
        command = subprocess.run(
            [sys.executable, str(script), str(pid_file)], env=env, stdout=out, stderr=out, timeout=120
        )
    assert command.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 60
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    still = alive(pid)
    if still:
        os.kill(pid, signal.SIGKILL)
    assert not still, "a process set up after its command was killed is still running"
    assert f"its process {pid} ends" in log.read_text()


@pytest.mark.slow
def test_the_command_killed_while_its_processes_drain(fresh_pg_uri: str, tmp_path: Path) -> None:
    """The command SIGKILLed right after a group commit: its processes find its poller's lock free,
    stop and close their connections; nothing lingers. The next run commits what they claimed."""
    lake_root = tmp_path / "lake"
    cfg, seeded = seed_system(fresh_pg_uri, lake_root, seed=500)
    conf = write_conf(tmp_path / "drain.json", lake_root, list(seeded), processes=2)
    killed = drain(conf, fresh_pg_uri, QUEUELAKE_TEST_KILL_AT="after_delta_commit:2")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    wait_for_no_drain(fresh_pg_uri)
    deadline = time.monotonic() + 30
    pids = task_pids(killed.stderr)
    assert pids, killed.stderr[-3000:]
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(p) for p in pids), "a killed command's processes are still running"
    left = claim_count(cfg)
    final = drain(conf, fresh_pg_uri)
    assert final.returncode == 0, final.stderr[-4000:]
    summary = summary_of(final)
    assert summary["status"] == "ok" and summary["claims_resolved"] == left, summary
    assert_every_row_once(cfg, lake_root, seeded)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGTERM, False), (signal.SIGTERM, True), (signal.SIGINT, True), (signal.SIGHUP, True)],
    ids=["SIGTERM", "SIGTERM-group", "SIGINT-group", "SIGHUP-group"],
)
def test_a_signal_stops_the_processes_at_a_batch_boundary(
    fresh_pg_uri: str, tmp_path: Path, signum: int, to_group: bool
) -> None:
    """A SIGTERM (a scheduler's cancel: to the command alone, or to its whole process group as Airflow's
    task runner and systemd send it), a SIGINT (Ctrl-C) or a SIGHUP (the terminal closed), the last two to
    the whole group as a terminal sends them, while the command's processes drain big queues in small
    batches: it passes the stop on; each process ends its batch in hand, the command commits it and exits
    128 + the signal with status interrupted and its counts. Nothing lost, nothing twice, nothing claimed
    left; the next run drains the rest."""
    lake_root = tmp_path / "lake"
    names = [f"Long{i}" for i in range(3)]
    cfg = make_config(fresh_pg_uri, lake_root, names)
    install(cfg)
    seeded = {n: seed_ids(cfg, n, 20_000, seed=600 + i) for i, n in enumerate(names)}
    conf = write_conf(tmp_path / "drain.json", lake_root, names, processes=2, batch_size=100, workers_per_queue=1)
    env = {**os.environ, "QUEUELAKE_CONNECTION": fresh_pg_uri, "PYTHONPATH": LIB}
    env.pop("QUEUELAKE_TEST_KILL_AT", None)
    cmd = [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    # its own process group, as a terminal's job has
    with subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=as_from_a_terminal, **pipes) as proc:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and sum(queue_depth(cfg, n) for n in names) > 58_000:
            time.sleep(0.1)
        if to_group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, stderr[-4000:]
    assert "Traceback" not in stderr and "stops at the next batch boundary" in stderr, stderr[-4000:]
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["status"] == "interrupted", summary
    left = sum(queue_depth(cfg, n) for n in names)
    rows = journal(lake_root)["id"].to_pylist()
    assert len(rows) == len(set(rows)) == summary["landed"] == 60_000 - left, summary
    assert 0 < left, "the drain ended before the SIGTERM: nothing was stopped"
    assert claim_count(cfg) == 0
    assert not any(alive(p) for p in task_pids(stderr))
    final = drain(write_conf(tmp_path / "rest.json", lake_root, names, batch_size=5_000), fresh_pg_uri)
    assert final.returncode == 0, final.stderr[-4000:]
    assert_every_row_once(cfg, lake_root, seeded)


def test_processes_drain_into_a_journal_on_object_storage(fresh_pg_uri: str, tmp_path: Path, s3: str) -> None:
    """The journal on S3 (a moto server): each process opens the journal's folder on the store with the
    lake's storage options (credentials from the command's environment), stages there, and the command
    commits. Two processes SIGKILLed after a claim's DB commit (their staged files named by a claim
    only): every row once, read back from S3; nothing on the local disk; the secret in no output."""
    from tests.helpers.s3 import BUCKET, KEY_ID, SECRET, assert_drained_once_into, storage_options

    root = f"s3://{BUCKET}/processes-{os.getpid()}"
    names = [f"Store{i}" for i in range(4)]
    cfg = make_config(fresh_pg_uri, tmp_path / "unused", names)
    install(cfg)
    seeded = {name: seed_ids(cfg, name, 1_000, seed=950 + i) for i, name in enumerate(names)}
    conf = write_conf(tmp_path / "drain.json", tmp_path / "unused", names, processes=2)
    data = json.loads(conf.read_text())
    data["lake"] = {"root": root, "engine": "delta-rs", "storage_options": storage_options(s3)}
    conf.write_text(json.dumps(data))
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    for k in range(2):
        (tokens / str(k)).touch()
    proc = drain(
        conf,
        fresh_pg_uri,
        no_aws=True,
        QUEUELAKE_TEST_KILL_AT="after_db_commit:2",
        QUEUELAKE_TEST_KILL_TOKENS=str(tokens),
        QL_TEST_S3_KEY_ID=KEY_ID,
        QL_TEST_S3_SECRET=SECRET,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = summary_of(proc)
    assert summary["status"] == "ok" and summary["on"] == "processes", summary
    assert not list(tokens.iterdir()), "fewer than two processes were killed"
    assert summary["dequeued"] == summary["landed"] == 4_000, summary
    assert SECRET not in proc.stdout + proc.stderr
    assert_drained_once_into(root, s3, seeded)
    assert claim_count(cfg) == 0
    assert all(queue_depth(cfg, n) == 0 for n in names)
    assert not list(tmp_path.glob("**/_delta_log")), "nothing may land on the local disk"


def test_drain_processes_is_a_count_within_the_connection_budget() -> None:
    with pytest.raises(ConfigError, match="drain.processes"):
        from_dict({"drain": {"on": "processes", "processes": 0}}, env={})
    with pytest.raises(ConfigError, match="drain.processes"):
        from_dict({"drain": {"on": "processes", "processes": True}}, env={})
    with pytest.raises(ConfigError, match="drain.on"):
        from_dict({"drain": {"on": "threads"}}, env={})

    def count(cfg: Config) -> int:
        return process_count(QueueDatabase(cfg.transport), cfg.drain)

    assert count(from_dict({"drain": {"on": "processes"}}, env={})) == min(os.cpu_count() or 1, 5)
    # 8 wanted; 24 connections: 23 for the processes, each holding 1 + 2 workers + 1 (ADBC's) at most
    cfg = from_dict({"drain": {"on": "processes", "processes": 8, "receive_driver": "psycopg"}}, env={})
    assert count(cfg) == 23 // 3
    tight = from_dict({"drain": {"on": "processes", "processes": 8, "max_connections": 5}}, env={})
    assert count(tight) == 1


def test_small_queues_spread_evenly_over_the_processes_whatever_their_rows() -> None:
    """On executors a job of small queues holds at most 8 batches of rows; in processes there is no
    cap: 500 queues of a batch each make two jobs per process, not 7 jobs (3 + 3 + 1: one process
    draining the last job alone while the other idles)."""
    from queuelake.pipeline.drain.backlog import Backlog
    from queuelake.pipeline.drain.executors import plan_jobs
    from queuelake.transport.table_refs import queue_ref

    transport = from_dict({"transport": {"connection": "x"}}, env={}).transport
    refs = [queue_ref(f"q{i}", transport) for i in range(500)]
    backlogs = {r.canonical: Backlog(1_000, 0) for r in refs}
    todo = [(r, 1) for r in refs]
    capped = plan_jobs(todo, backlogs, batch_size=10_000, max_messages=None, slots=2)
    assert [len(j) for j in capped] == [80] * 6 + [20]
    even = plan_jobs(todo, backlogs, batch_size=10_000, max_messages=None, slots=2, pack_batches=None)
    assert [len(j) for j in even] == [125] * 4
    assert [r for j in even for r, _ in j] == refs
