"""The README's demo command works from a fresh clone: `make demo` creates its own .venv, installs what
the demo needs and ends with the demo's JSON summary.

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
