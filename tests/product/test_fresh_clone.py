"""The README's demo command works from a fresh clone: `make demo` creates its own .venv, installs what
the demo needs, runs the demo end to end on the embedded default (its report matches the seeded traffic)
and ends with the demo's JSON summary; the next commands it prints work as printed. This is the suite's
one delta-rs demo (``test_demo_engines`` runs the delta-spark one).

The clone is a `git clone` of this repository, so it holds what is committed (HEAD), not uncommitted
edits: in CI (a clean clone of the submission) that is the same thing. The venv is a new, empty one in
the clone, filled from PyPI with pip's cache (the pyspark wheel comes from the cache after the first
build); nothing is shared with the environment running this test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _clean_env() -> dict[str, str]:
    """The environment of someone who has just cloned: no venv activated, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    active = os.environ.get("VIRTUAL_ENV")
    if active:  # e.g. `make test` runs the suite with its .venv first on PATH
        bin_dir = str(Path(active) / "bin")
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != bin_dir)
    return env


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A folder outside pytest's basetemp: run as root, pgserver starts PostgreSQL as another user, who
    must reach the binaries in the clone's venv, and pytest makes /tmp/pytest-of-<user> private again
    (0700) whenever a pytest session starts, which would lock that user out midway."""
    path = Path(tempfile.mkdtemp(prefix="queuelake-fresh-clone-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_make_demo_from_a_fresh_clone(workdir: Path) -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    for tool in ("git", "make"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    clone = workdir / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    assert (clone / "Makefile").is_file(), "HEAD has no Makefile (this test clones what is committed)"
    assert not (clone / ".venv").exists()

    proc = subprocess.run(
        ["make", "demo", "DEMO_ARGS=--messages 300"],
        cwd=clone,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    summary = json.loads(lines[-1])
    assert summary["command"] == "demo" and summary["status"] == "ok", summary
    # it ran in .demo/, not in the checkout, and landed what it seeded
    assert Path(summary["lake"]) == clone / ".demo" / "lake"
    assert (clone / ".demo" / "lake" / "messages" / "_delta_log").is_dir()
    assert not (clone / "lake").exists()
    journal = {queue.split(".")[-1].strip('"'): counts for queue, counts in summary["journal"].items()}
    assert journal == summary["expected"]
    assert summary["engine"] == "delta-rs"  # a fresh clone has no Delta jars: `auto` is delta-rs
    assert_demo_report(proc.stdout, summary, clone / ".demo", workdir)

    # the venv make created runs the clone's code, not the one running this test (asked from .demo/, where
    # no folder named queuelake could pass for the package)
    where = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-c", "import queuelake; print(queuelake.__file__)"],
        cwd=clone / ".demo",
        env=_clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).resolve().is_relative_to((clone / "lib").resolve()), where


def assert_demo_report(stdout: str, summary: dict, demo_dir: Path, cwd: Path) -> None:
    """What the demo reports and leaves: every outcome seeded, events to both subscribers, its config,
    database and lake, and the next commands, which work as printed."""
    assert "Drained into the journal" in stdout and "Published:" in stdout
    assert summary["expected"]["Sales"]["expired"] > 0 and summary["expected"]["Sales"]["quarantined"] > 0
    assert summary["expected"]["error"]["landed"] > 0 and summary["expected"]["audit"]["landed"] > 0
    # the worked example published events to both subscribers and commands to Billing
    to = summary["published"]["to"]
    events = "Publish Lakehouse.Events.CustomerTotalsUpdated"
    assert to['"public"."Billing"'][events] == to['"public"."Shipping"'][events] > 0
    assert summary["published"]["copies"] == sum(n for types in to.values() for n in types.values())

    config = demo_dir / "queuelake-demo.yaml"
    assert summary["config"] == str(config) and config.is_file()
    assert (demo_dir / ".queuelake" / "pgdata" / "PG_VERSION").is_file()
    for command in summary["next"]:
        assert command in stdout
    # each as printed, in a plain shell elsewhere: no venv on PATH, another folder
    status, drained, *notebook = [as_printed(command, cwd) for command in summary["next"]]
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
