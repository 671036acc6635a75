"""Ctrl-C in a Spark stage is a stop request, as SIGTERM is (issue 59): pyspark's SparkContext installs its own
SIGINT handler when it starts (cancel every job, KeyboardInterrupt), and the command's is put back
(``stopping.restore_handlers``). The first Ctrl-C lets ``bodies`` finish the slice in hand, then it stops with
its counts, its ``runs`` row and the JSON summary, exit 130; the next run does the rest, every row once. A real
SIGINT to a real ``queuelake bodies`` process, on real PostgreSQL, Spark and Delta tables."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import yaml
from queuelake.commands.demo import traffic
from queuelake.config import load
from queuelake.lake.engines import open_lake
from queuelake.lake.reading import read_table
from queuelake.transport import db, installer
from queuelake.transport.table_refs import queue_ref

from tests.helpers.cli import as_from_a_terminal
from tests.helpers.stages import drain

REPO = Path(__file__).resolve().parents[2]
ORDERS = "body_sales_messages_events_orderplaced"


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "queuelake.yaml"
    settings = {
        "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
        "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
        "spark": {"slice_rows": 100},
        "drain": {"queues": ["Sales"], "batch_size": 50, "workers_per_queue": 1},
    }
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return path


def _bodies(
    config: Path, uri: str, interrupt_on: str | None, signum: int = signal.SIGINT, again_after: float | None = None
) -> tuple[int, dict, str]:
    """``queuelake bodies`` in a process group of its own; with ``interrupt_on``, one ``signum`` once a
    log line holds it, to the whole group (Spark's JVM too), as a terminal sends Ctrl-C and a hang-up,
    and as Airflow's task runner and systemd send SIGTERM; with ``again_after``, a second that many
    seconds later ("stop now")."""
    env = {**os.environ, "QUEUELAKE_CONNECTION": uri}
    proc = subprocess.Popen(
        [sys.executable, "-m", "queuelake", "bodies", "-c", str(config)],
        env=env,
        cwd=config.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=as_from_a_terminal,
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        sent = False
        for line in proc.stderr:
            lines.append(line)
            if not sent and interrupt_on and interrupt_on in line and proc.poll() is None:
                os.killpg(proc.pid, signum)
                sent = True  # once: a second would be "stop now"
                if again_after is not None:
                    threading.Timer(again_after, lambda: proc.poll() is None and os.killpg(proc.pid, signum)).start()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # stdout only: ``communicate`` would read stderr too, racing the reader for the very line that
    # should trigger the SIGINT (a CI run lost it so, and the command ran to its end)
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait(timeout=600)
    reader.join(timeout=30)
    return proc.returncode, json.loads(out.strip().splitlines()[-1]), "".join(lines)


def test_ctrl_c_stops_bodies_after_the_slice_in_hand_and_the_next_run_does_the_rest(
    fresh_pg_uri: str, tmp_path: Path
) -> None:
    """Ctrl-C, a hang-up (the terminal or ssh session closed) and a scheduler's SIGTERM, each sent to the
    command's whole process group: Spark's JVM ignores them (pyspark's start had it ignore SIGINT only,
    so a hang-up or a SIGTERM shut it down under the slice in hand and the command failed), the command
    stops at the boundary and exits 128 + the signal. One after the other on one lake: each next run (the
    next signal's, then a plain one) goes on where the stopped one left off, every row once."""
    config = _config(tmp_path)
    cfg = load(str(config), env={"QUEUELAKE_CONNECTION": fresh_pg_uri})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        traffic.seed(conn, queue_ref("Sales", cfg.transport), traffic.order_events(600, seed=59))
        conn.commit()
    assert drain(cfg, open_lake(cfg.lake))["landed"] == 600  # 12 journal versions: slices of about 100 rows

    typed_before = 0
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        name = signal.Signals(signum).name
        code, summary, log = _bodies(config, fresh_pg_uri, interrupt_on="bodies slice 1/", signum=signum)
        assert code == 128 + signum, (name, log[-3000:])
        assert summary["command"] == "bodies" and summary["status"] == "interrupted", (name, summary)
        assert f"{name}: bodies stops at the next batch boundary" in log, log[-3000:]
        assert "bodies: asked to stop; slice 2 of " in log, (name, log[-3000:])
        assert "Traceback" not in log and "KeyboardInterrupt" not in log, (name, log[-3000:])
        assert summary["slices"] == 1 and summary["rows_read"] > 0, (name, summary)  # its counts: the one slice
        runs = read_table(str(tmp_path / "lake" / "runs")).to_pylist()
        assert [r["command"] for r in runs if r["run_id"] == summary["run_id"]], (name, runs)  # its runs row
        typed = read_table(str(tmp_path / "lake" / ORDERS))["message_id"].to_pylist()
        # one slice more than the stopped run before it left, none twice, not all
        assert typed_before < len(typed) < 600 and len(typed) == len(set(typed)), (name, len(typed), typed_before)
        typed_before = len(typed)

    code, again, log = _bodies(config, fresh_pg_uri, interrupt_on=None)
    assert code == 0 and again["status"] == "ok", log[-3000:]
    typed = read_table(str(tmp_path / "lake" / ORDERS))["message_id"].to_pylist()
    assert len(typed) == 600 == len(set(typed))  # every order once, across the four runs


def test_a_second_ctrl_c_stops_bodies_now_with_the_slices_done(fresh_pg_uri: str, tmp_path: Path) -> None:
    """A second Ctrl-C inside a slice's Spark job stops the command now: its jobs cancelled from a thread
    of their own (cancelling from the handler, on the main thread's Py4J connection in the middle of a
    call, broke it: "reentrant call", a review), the slices committed before it in the summary and
    ``runs`` (the summary said "interrupted" alone)."""
    config = _config(tmp_path)
    cfg = load(str(config), env={"QUEUELAKE_CONNECTION": fresh_pg_uri})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        traffic.seed(conn, queue_ref("Sales", cfg.transport), traffic.order_events(600, seed=61))
        conn.commit()
    assert drain(cfg, open_lake(cfg.lake))["landed"] == 600

    code, summary, log = _bodies(config, fresh_pg_uri, interrupt_on="bodies slice 2/", again_after=0.3)
    assert code == 130 and summary["status"] == "interrupted", log[-3000:]
    assert "reentrant call" not in log and "Py4JNetworkError" not in log, log[-3000:]
    done = summary.get("bodies") or summary  # stopped now (inside slice 2), or at its end if it was quick
    assert done["slices"] >= 1 and done["rows_read"] > 0, summary
    runs = read_table(str(tmp_path / "lake" / "runs")).to_pylist()
    assert [r for r in runs if r["run_id"] == done["run_id"]], runs

    code, again, log = _bodies(config, fresh_pg_uri, interrupt_on=None)
    assert code == 0 and again["status"] == "ok", log[-3000:]
    typed = read_table(str(tmp_path / "lake" / ORDERS))["message_id"].to_pylist()
    assert len(typed) == 600 == len(set(typed))
    # every typed row counted by the run that wrote it: the stopped slice's, committed before the stop,
    # by the stopped run (its redo finds them written); they were counted by neither (a review)
    runs = read_table(str(tmp_path / "lake" / "runs")).to_pylist()
    counted = [r["rows_out"] for r in runs if r["command"] == "bodies" and r["table"] == ORDERS]
    assert sum(counted) == 600, runs
