"""The demo runs end to end on the embedded default and its report matches the seeded traffic; it never
deletes what it did not create, and leaves a database, a lake and a config that the next commands use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from queuelake.errors import QueuelakeError
from queuelake.examples import demo


def queuelake(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "queuelake", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


@pytest.mark.slow
def test_demo_end_to_end(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"  # created by the demo
    proc = queuelake(["demo", "--workdir", str(workdir), "--messages", "600", "--engine", "delta-rs"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["status"] == "ok"
    assert summary["engine"] == "delta-rs"
    report = "\n".join(lines[:-1])
    assert "Drained into the journal" in report and "Published:" in report
    # what landed, per queue and outcome, is exactly what was seeded
    journal = {queue.split(".")[-1].strip('"'): counts for queue, counts in summary["journal"].items()}
    assert journal == summary["expected"]
    assert summary["expected"]["Sales"]["expired"] > 0 and summary["expected"]["Sales"]["quarantined"] > 0
    assert summary["expected"]["error"]["landed"] > 0 and summary["expected"]["audit"]["landed"] > 0
    # the worked example published events to both subscribers and commands to Billing
    to = summary["published"]["to"]
    billing = to['"public"."Billing"']
    shipping = to['"public"."Shipping"']
    events = "Publish Lakehouse.Events.CustomerTotalsUpdated"
    assert billing[events] == shipping[events] > 0
    assert summary["published"]["copies"] == sum(n for types in to.values() for n in types.values())
    assert (workdir / "lake" / "messages" / "_delta_log").is_dir()

    # what it leaves: its config, database and lake, and the commands to try next, which work
    config = workdir / "queuelake-demo.yaml"
    assert summary["config"] == str(config) and config.is_file()
    assert (workdir / ".queuelake" / "pgdata" / "PG_VERSION").is_file()
    for command in summary["next"]:
        assert command in report
    # each as printed, in a plain shell elsewhere: no venv on PATH, another folder
    ran = [as_printed(command, tmp_path) for command in summary["next"]]
    status, drained, *notebook = ran
    assert summary["next"][0].endswith(f"queuelake status -c {config}")
    queues = json.loads(status.stdout.strip().splitlines()[-1])["queues"]
    sources = [q for q in queues if q["role"] == "drained"]
    assert [q["exists"] for q in sources] == [True, True, True] and all(q["depth"] == 0 for q in sources)
    holding = {q["queue"]: q["depth"] for q in queues if q["role"] != "drained"}  # what publish sent, waiting
    assert {'"public"."Billing"', '"public"."Shipping"'} <= set(holding) and sum(holding.values()) > 0
    assert json.loads(drained.stdout.strip().splitlines()[-1])["dequeued"] == 0  # the demo drained it all
    assert len(notebook) == 1  # a checkout: the notebook is offered, and ran


def as_printed(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a printed command with sh, as a user pastes it: a PATH without the venv's bin."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd), "XDG_RUNTIME_DIR": "/tmp"}
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    assert proc.returncode == 0, (command, proc.stderr[-3000:])
    return proc


@pytest.mark.parametrize("existing", ["lake", ".queuelake/pgdata", "queuelake-demo.yaml"])
def test_demo_refuses_what_it_did_not_create(tmp_path: Path, existing: str) -> None:
    path = tmp_path / existing
    if existing.endswith(".yaml"):
        path.write_text("mine: true\n", encoding="utf-8")
    else:
        path.mkdir(parents=True)
        (path / "precious.txt").write_text("not the demo's", encoding="utf-8")
    proc = queuelake(["demo", "--workdir", str(tmp_path), "--messages", "10"], tmp_path, timeout=120)
    assert proc.returncode == 1
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["status"] == "failed"
    assert str(path) in summary["error"] and "did not create" in summary["error"] and "--workdir" in summary["error"]
    assert path.exists() and (existing.endswith(".yaml") or (path / "precious.txt").is_file())
    assert not (tmp_path / "lake" / "messages").exists()  # it did nothing else either


def test_a_rerun_replaces_only_what_an_earlier_demo_made(tmp_path: Path) -> None:
    demo.prepare_workdir(tmp_path)  # the first run records what it makes
    (tmp_path / "lake" / "messages").mkdir(parents=True)
    (tmp_path / "queuelake-demo.yaml").write_text("{}", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("the user's", encoding="utf-8")
    demo.prepare_workdir(tmp_path)  # a rerun: the earlier demo's lake and config go, nothing else
    assert not (tmp_path / "lake").exists() and not (tmp_path / "queuelake-demo.yaml").exists()
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "the user's"
    # a marker that does not list the lake (a user's lake next to a demo's database) still refuses
    (tmp_path / ".queuelake" / "demo-created.json").write_text('{"created": [".queuelake/pgdata"]}', encoding="utf-8")
    (tmp_path / "lake").mkdir()
    with pytest.raises(QueuelakeError, match="did not create"):
        demo.prepare_workdir(tmp_path)
    assert (tmp_path / "lake").is_dir()


def test_demo_config_is_the_built_in_one_in_the_workdir(tmp_path: Path) -> None:
    cfg = demo.demo_config(tmp_path, engine="delta-rs")
    assert cfg.lake.root == str(tmp_path / "lake") and cfg.lake.engine == "delta-rs"
    assert cfg.transport.embedded == str(tmp_path / ".queuelake" / "pgdata")
    assert cfg.drain.queues == demo.DRAINED and cfg.transforms[0].destinations == ["Billing"]
