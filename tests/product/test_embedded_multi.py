"""The embedded default with several queues: one throwaway PostgreSQL per process however many drain
threads ask for it at once, and nothing left running after the command ends, however it ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from queuelake.config import load
from queuelake.lake.engines import open_lake

from tests.helpers.cli import run_cli
from tests.helpers.publish import row, write_outbound

REPO = Path(__file__).resolve().parents[2]
QUEUES = ["Sales", "Billing", "Shipping", "audit", "error"]


def write_config(tmp_path: Path, engine: str = "delta-rs") -> tuple[Path, Path]:
    data = tmp_path / "pgdata"
    conf = tmp_path / "embedded.yaml"
    conf.write_text(
        json.dumps(
            {
                "transport": {"dialect": "postgresql", "driver": "psycopg", "connection": None, "embedded": str(data)},
                "lake": {"root": str(tmp_path / "lake"), "engine": engine},
                "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": "1"}},
                "drain": {"queues": QUEUES, "batch_size": 500, "workers_per_queue": 2},
                "transforms": [
                    {
                        "name": "customer_totals",
                        "function": "queuelake.commands.demo.orders:customer_totals",
                        "output": "outbound_customer_totals",
                    }
                ],
                "publish": {"endpoint": "Lakehouse", "outputs": ["outbound_customer_totals"]},
            }
        )
    )
    return conf, data


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "QUEUELAKE_CONNECTION"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "lib"), env.get("PYTHONPATH", "")) if p)
    return env


def cli(args: list[str], timeout: float = 300) -> tuple[int, dict[str, Any], str]:
    """No QUEUELAKE_CONNECTION: the config's embedded server is the database."""
    result = run_cli(args, None, timeout=timeout)
    assert result.stdout.strip(), result.stderr[-3000:]
    return result.returncode, json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def install(conf: Path) -> None:
    code, summary, err = cli(["install", "-c", str(conf)])
    assert code == 0, (summary, err[-3000:])


def servers_of(data: Path) -> list[psutil.Process]:
    """postgres processes whose command line names this data folder (the postmaster's -D)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(str(data) in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def assert_nothing_left(data: Path) -> None:
    deadline = time.monotonic() + 10
    while servers_of(data) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = servers_of(data)
    assert not left, [p.cmdline() for p in left]


def seed(data: Path, per_queue: int) -> None:
    """Send traffic to every queue through the embedded server, as its own process (which stops it)."""
    script = f"""
import sys
from queuelake.config import load
from queuelake.context import connect
from queuelake.commands.demo import traffic
from queuelake.transport.table_refs import queue_ref
cfg = load(sys.argv[1])
with connect(cfg) as conn:
    for i, q in enumerate({QUEUES!r}):
        traffic.seed(conn, queue_ref(q, cfg.transport), traffic.order_events({per_queue}, seed=i + 1))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script, str(data.parent / "embedded.yaml")],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_drain_of_several_queues_starts_one_server_and_stops_it(tmp_path: Path) -> None:
    conf, data = write_config(tmp_path)
    code, summary, err = cli(["install", "-c", str(conf)])
    assert code == 0 and summary["status"] == "ok", (summary, err[-3000:])
    assert_nothing_left(data)
    seed(data, 300)
    assert_nothing_left(data)

    code, summary, err = cli(["drain", "-c", str(conf)])
    assert code == 0 and summary["status"] == "ok", (summary, err[-3000:])
    assert summary["dequeued"] == 300 * len(QUEUES)
    assert "another server might be running" not in err and "Traceback" not in err, err[-3000:]
    assert_nothing_left(data)

    # an empty rerun (the server's data folder exists now) ends the same way
    code, summary, err = cli(["drain", "-c", str(conf)])
    assert code == 0 and summary["status"] == "ok" and summary["dequeued"] == 0, (summary, err[-3000:])
    assert_nothing_left(data)


def test_two_processes_share_one_data_folder(tmp_path: Path) -> None:
    conf, data = write_config(tmp_path)
    install(conf)
    seed(data, 200)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(2)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in results]
    for p, s, (_, err) in zip(procs, summaries, results):
        assert p.returncode == 0 and s["status"] == "ok", (s, err[-3000:])
    # each queue drained by exactly one of them (the other skipped it: lock held) or shared, never twice
    assert sum(s["dequeued"] for s in summaries) == 200 * len(QUEUES)
    assert_nothing_left(data)


def _drain_in_background(conf: Path) -> subprocess.Popen[str]:
    """``queuelake drain`` of up to 60 s, its output piped: for signals and kills sent while it drains."""
    return subprocess.Popen(
        [sys.executable, "-m", "queuelake", "drain", "-c", str(conf), "--max-seconds", "60"],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def test_sigterm_stops_the_embedded_server(tmp_path: Path) -> None:
    conf, data = write_config(tmp_path)
    install(conf)
    seed(data, 20_000)
    proc = _drain_in_background(conf)
    deadline = time.monotonic() + 60
    while not servers_of(data) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    summary = json.loads(out.strip().splitlines()[-1])
    assert proc.returncode in (0, 143), err[-3000:]
    assert summary["status"] == ("ok" if proc.returncode == 0 else "interrupted"), summary
    assert_nothing_left(data)


def test_a_postmaster_killed_under_a_drain_is_said_in_one_line(tmp_path: Path) -> None:
    """The embedded server's postmaster SIGKILLed mid-drain (the OOM killer, an operator): the command
    failed, then its exit waited for ``pg_ctl stop`` and printed its output and a traceback after the
    summary (a review). Now one line says the server was gone; the next command starts it again."""
    conf, data = write_config(tmp_path)
    install(conf)
    seed(data, 20_000)
    proc = _drain_in_background(conf)
    pid_file = data / "postmaster.pid"
    deadline = time.monotonic() + 60
    while not (servers_of(data) and pid_file.exists()) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)
    os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert out.strip(), err[-3000:]
    json.loads(out.strip().splitlines()[-1])  # a summary, whatever it says
    assert f"the embedded PostgreSQL in {data} was gone before this command ended" in err, err[-3000:]
    assert "Traceback" not in err and "pg_ctl" not in err, err[-3000:]
    assert_nothing_left(data)
    code, summary, err = cli(["drain", "-c", str(conf)])
    assert code == 0 and summary["status"] == "ok", (summary, err[-3000:])
    assert_nothing_left(data)


def test_a_postmaster_started_again_by_another_command_is_stopped_by_the_last_one(tmp_path: Path) -> None:
    """A's postmaster killed, command C started it again and ended first: C left it to A, whose pid was
    in pgserver's list of handles, and A, finding its own postmaster gone, stopped nothing. The server
    outlived every command (a review). The last one to end stops it now."""
    conf, data = write_config(tmp_path)
    install(conf)
    go = tmp_path / "go"
    holder = f"""
import pathlib, time
from queuelake.config import load
from queuelake.context import connect
with connect(load({str(conf)!r})) as conn:
    conn.raw.execute("SELECT 1")
pathlib.Path({str(tmp_path / "attached")!r}).write_text("x")
while not pathlib.Path({str(go)!r}).exists():
    time.sleep(0.2)
"""
    log = (tmp_path / "holder.err").open("w")
    a = subprocess.Popen([sys.executable, "-c", holder], env=_env(), stdout=log, stderr=log, cwd=REPO)
    deadline = time.monotonic() + 120
    while not (tmp_path / "attached").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (tmp_path / "attached").exists(), (tmp_path / "holder.err").read_text()[-3000:]
    os.kill(int((data / "postmaster.pid").read_text().split()[0]), signal.SIGKILL)
    time.sleep(1)
    code, summary, err = cli(["drain", "-c", str(conf)])  # C: starts it again, ends before A
    assert code == 0 and summary["status"] == "ok", (summary, err[-3000:])
    assert [p for p in servers_of(data) if p.status() != psutil.STATUS_ZOMBIE], "C stopped the server A holds"
    go.write_text("x")
    assert a.wait(timeout=120) == 0, (tmp_path / "holder.err").read_text()[-3000:]
    log.close()
    deadline = time.monotonic() + 10
    while [p for p in servers_of(data) if p.status() != psutil.STATUS_ZOMBIE] and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p.cmdline() for p in servers_of(data) if p.status() != psutil.STATUS_ZOMBIE]
    assert not left, (left, (tmp_path / "holder.err").read_text()[-3000:])


def test_a_failing_command_stops_the_server(tmp_path: Path) -> None:
    conf, data = write_config(tmp_path)
    install(conf)
    code, summary, err = cli(["drain", "-c", str(conf), "--queue", "NoSuchQueue"])
    assert code == 1 and summary["status"] == "failed", summary
    assert "Traceback" not in err
    assert_nothing_left(data)


def server_starts(data: Path) -> int:
    """How many times a server was started on this data folder: pgserver's ``pg_ctl -l`` appends the
    server's log to ``<data>/log``, one "ready to accept connections" per start."""
    log = data / "log"
    return log.read_text(errors="replace").count("ready to accept connections") if log.exists() else 0


def test_an_idle_publish_starts_no_server(tmp_path: Path) -> None:
    """The command opens the queue database's handle up front; the server is started only when a
    connection is needed, and a publish whose outputs hold nothing to send needs none."""
    conf, data = write_config(tmp_path)
    install(conf)
    assert_nothing_left(data)
    starts = server_starts(data)
    assert starts >= 1

    code, summary, err = cli(["publish", "-c", str(conf)])
    assert code == 0 and summary["status"] == "ok", (summary, err[-3000:])
    assert summary["published"] == 0 and [o["status"] for o in summary["outputs"]] == ["skipped"]
    assert "nothing to do" in err
    assert server_starts(data) == starts, "the idle publish started the embedded server"
    assert not (data / "postmaster.pid").exists()


def test_a_publish_with_rows_to_send_still_sends(tmp_path: Path) -> None:
    conf, data = write_config(tmp_path)
    settings = json.loads(conf.read_text())
    settings["drain"]["also_destinations"] = ["Billing"]  # sent to and drained: the drain below finds it
    conf.write_text(json.dumps(settings))
    install(conf)
    lake = open_lake(load(str(conf)).lake)
    write_outbound(
        lake, "outbound_customer_totals", [row(f"k{i}", intent="Send", destination="Billing") for i in range(3)]
    )
    starts = server_starts(data)

    code, summary, err = cli(["publish", "-c", str(conf)])
    assert code == 0 and summary["status"] == "ok", (summary, err[-3000:])
    assert summary["published"] == 3 and summary["undeliverable"] == 0, summary
    assert server_starts(data) == starts + 1
    assert_nothing_left(data)
    # what it sent is in the queue: a drain of Billing (its own process, its own server start) finds it
    code, summary, err = cli(["drain", "-c", str(conf), "--queue", "Billing"])
    assert code == 0 and summary["dequeued"] == 3, (summary, err[-3000:])
    assert_nothing_left(data)


@pytest.mark.slow
def test_run_with_the_embedded_default(tmp_path: Path) -> None:
    conf, data = write_config(tmp_path, engine="auto")
    install(conf)
    seed(data, 100)
    code, summary, err = cli(["run", "-c", str(conf)], timeout=900)
    assert code == 0 and summary["status"] == "ok", (summary, err[-3000:])
    assert summary["drain"]["dequeued"] == 100 * len(QUEUES)
    assert_nothing_left(data)
