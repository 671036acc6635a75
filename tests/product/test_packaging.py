"""The wheel fits the runtime: the base wheel leaves Spark to whoever runs it.

A Databricks ``python_wheel_task`` installs the wheel into a runtime that already has its own pyspark
(DBR 17.3 LTS: Spark 4.0). Had the wheel required the pinned pyspark 4.1, pip would replace the
runtime's Spark on every run, so pyspark and delta-spark are the ``spark`` extra, and the commands that
need no Spark work without it.

The check, as a runtime would see it: build the wheel the way databricks.yml does (``pip wheel
--no-deps``, from a copy of the sources, so the checkout stays clean), make a new, empty venv (no system
site-packages), install pyspark 4.0.1 first, as the runtime's own Spark, then the base wheel, and look at
what pip left. Then remove pyspark and check the Spark commands name the extra instead of failing with
an ImportError traceback.

Caches keep it quick. pyspark is a ~430 MB sdist that pip builds once (about 80 s) and then takes from
its wheel cache (seconds). The base wheel's dependencies (deltalake, pyarrow, great-expectations: ~200
MB, 48 files) are installed from a wheelhouse, ``$QUEUELAKE_TEST_WHEELHOUSE`` or
``~/.cache/queuelake/wheelhouse``, filled by ``pip wheel`` when something is missing from it: pip
keeps no HTTP cache of PyPI's files on our machines, and downloading them took 1 to 2.5 minutes on every
run. Measured on a shared 2-core machine: 33 s warm (1.5 minutes under heavy load), 2.4 minutes with an
empty wheelhouse, plus ~80 s once per machine to build pyspark 4.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from queuelake import cli, versions

REPO = Path(__file__).resolve().parents[2]
RUNTIME_PYSPARK = "4.0.1"  # a Spark 4.0 runtime's pyspark (DBR 17.3 LTS is Spark 4.0), not the pinned 4.1
SPARK_PACKAGES = {"pyspark", "delta-spark"}
EXTRA_HINT = "pip install 'queuelake[spark]'"
# a connection string that must never be printed (install --print-sql needs no connection at all)
SECRET = "not-a-real-password-7f3a"
MINIMAL_CONFIG = f"""\
transport:
  dialect: postgresql
  connection: postgresql://ql:{SECRET}@127.0.0.1:1/nsb
lake:
  root: {{lake}}
drain:
  queues: [Sales, audit, error]
"""


def _env() -> dict[str, str]:
    """No venv activated and no PYTHONPATH: the venv's Python sees only what was installed into it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    active = os.environ.get("VIRTUAL_ENV")
    if active:
        bin_dir = str(Path(active) / "bin")
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != bin_dir)
    return env


def _run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"{proc.args}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc


def _summary(text: str) -> dict:
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "no output"
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base wheel, built as databricks.yml builds it, from a copy of what setup.py packages."""
    src = tmp_path_factory.mktemp("wheel-src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("setup.py", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("lib", "sql"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    dist = tmp_path_factory.mktemp("dist")
    _ok(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--wheel-dir", str(dist), str(src)], src))
    (built,) = dist.glob("queuelake-*.whl")
    return built


def _requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as whl:
        (name,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(whl.read(name).decode("utf-8"))
    return [Requirement(r) for r in metadata.get_all("Requires-Dist") or []]


@pytest.mark.slow
def test_wheel_metadata_has_spark_only_in_the_spark_extra(wheel: Path) -> None:
    requires = _requires(wheel)
    base = {r.name.lower() for r in requires if r.marker is None}
    assert "deltalake" in base  # the base wheel brings the Rust engine: it needs no JVM
    assert not base & (SPARK_PACKAGES | {"py4j"}), base
    extras = {"spark", "dev", "embedded", "notebooks", "airflow"}
    spark = {r.name.lower(): r for r in requires if r.name.lower() in SPARK_PACKAGES}
    assert set(spark) == SPARK_PACKAGES, requires
    for req in spark.values():
        assert req.marker is not None
        # the marker holds for the spark extra alone: not for a plain install, nor for any other extra
        holds = {extra for extra in extras | {""} if req.marker.evaluate({"extra": extra})}
        assert holds == {"spark"}, (str(req), holds)
    # the extra's pins are the ones in versions.py
    pinned = {Requirement(versions.PYSPARK_REQUIREMENT), Requirement(versions.DELTA_SPARK_REQUIREMENT)}
    assert {(r.name, str(r.specifier)) for r in spark.values()} == {(r.name, str(r.specifier)) for r in pinned}


def _wheelhouse() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("QUEUELAKE_TEST_WHEELHOUSE") or cache / "queuelake" / "wheelhouse")


def _install_with_wheelhouse(python: Path, wheel: Path, cwd: Path) -> None:
    """``pip install wheel`` from the wheelhouse alone; when that cannot resolve (a cold cache, a changed
    requirement), ``pip wheel`` what is missing into it and install again. Versions stay as first
    downloaded: this checks what pip does with pyspark, not the newest deltalake."""
    house = _wheelhouse()
    house.mkdir(parents=True, exist_ok=True)
    offline = [str(python), "-m", "pip", "install", "-q", "--no-input", "--no-compile", "--no-index"]
    offline += ["--find-links", str(house), str(wheel)]
    if _run(offline, cwd).returncode == 0:
        return
    # pip wheel, not pip download: an sdist lands built, so the --no-index install needs no build backend
    _ok(_run([str(python), "-m", "pip", "wheel", "-q", "--no-input", "-w", str(house), str(wheel)], cwd))
    for stale in house.glob("queuelake-*.whl"):  # the wheel itself lands there too
        stale.unlink()
    _ok(_run(offline, cwd))


def _venv_version(python: Path, cwd: Path, dist: str) -> str | None:
    code = (
        "import importlib.metadata as m, sys\n"
        f"try: print(m.version({dist!r}))\n"
        "except m.PackageNotFoundError: print('absent')\n"
    )
    out = _ok(_run([str(python), "-c", code], cwd)).stdout.strip()
    return None if out == "absent" else out


@pytest.mark.slow
def test_base_wheel_leaves_the_runtimes_pyspark_alone(wheel: Path, tmp_path: Path) -> None:
    venv, work = tmp_path / "runtime", tmp_path / "work"
    work.mkdir()  # commands run here: nothing of the checkout is on sys.path
    _ok(_run([sys.executable, "-m", "venv", str(venv)], tmp_path, timeout=300))
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    pip = [str(python), "-m", "pip", "install", "-q", "--no-input", "--no-compile"]
    assert _venv_version(python, work, "pyspark") is None  # a clean venv: nothing inherited

    # the runtime's own Spark first, then the base wheel (what a python_wheel_task does)
    _ok(_run([*pip, f"pyspark=={RUNTIME_PYSPARK}"], work))
    _install_with_wheelhouse(python, wheel, work)
    left = _venv_version(python, work, "pyspark")
    assert left == RUNTIME_PYSPARK, f"the base wheel replaced the runtime's pyspark {RUNTIME_PYSPARK}: {left}"
    assert _venv_version(python, work, "delta-spark") is None, "the base wheel installed delta-spark"
    assert _venv_version(python, work, "queuelake") == "0.1.0"

    # the wheel's code (not the checkout's) imports, and the commands that need no Spark work
    where = _ok(_run([str(python), "-c", "import queuelake.cli, queuelake; print(queuelake.__file__)"], work))
    assert Path(where.stdout.strip()).resolve().is_relative_to(venv.resolve()), where.stdout
    help_text = _ok(_run([str(bin_dir / "queuelake"), "--help"], work)).stdout
    assert "spark-packages" in help_text and "install" in help_text

    config = work / "minimal.yaml"
    config.write_text(MINIMAL_CONFIG.format(lake=work / "lake"), encoding="utf-8")
    printed = _ok(_run([str(bin_dir / "queuelake"), "install", "--print-sql", "-c", str(config)], work))
    assert "CREATE TABLE" in printed.stdout.upper()
    # the summary is the last line of stdout, or of stderr where stdout is kept for the script alone
    last = _summary(printed.stdout) if printed.stdout.strip().endswith("}") else _summary(printed.stderr)
    assert last["command"] == "install" and last["status"] == "ok", last
    assert SECRET not in printed.stdout + printed.stderr

    # spark-packages reads the runtime's pyspark: Delta for Spark 4.0, with a warning that 4.1 is pinned
    packages = _ok(_run([str(bin_dir / "queuelake"), "spark-packages"], work))
    assert packages.stdout.splitlines()[0] == versions.delta_coordinate(RUNTIME_PYSPARK)
    summary = _summary(packages.stdout)
    assert summary["pyspark"] == RUNTIME_PYSPARK and "warning" in summary, summary

    # without any pyspark: still importable, and the Spark commands name the extra in their summary
    _ok(_run([str(python), "-m", "pip", "uninstall", "-y", "-q", "pyspark", "py4j"], work))
    assert _venv_version(python, work, "pyspark") is None
    _ok(_run([str(bin_dir / "queuelake"), "--help"], work))
    # a step with nothing to do needs no Spark (it says so): it works without pyspark too
    idle = _ok(_run([str(bin_dir / "queuelake"), "transform", "-c", str(config)], work, timeout=300))
    assert _summary(idle.stdout)["status"] == "ok" and "nothing to do" in idle.stderr, idle.stderr
    proc = _run([str(bin_dir / "queuelake"), "spark-packages"], work, timeout=300)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    summary = _summary(proc.stdout)
    assert summary["command"] == "spark-packages" and summary["status"] == "failed", summary
    assert EXTRA_HINT in summary["error"], summary
    assert "Traceback" not in proc.stdout + proc.stderr
    assert SECRET not in proc.stdout + proc.stderr + idle.stdout + idle.stderr


def test_a_spark_command_without_pyspark_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same in this process, quickly: a None in sys.modules makes ``import pyspark`` fail as if it
    were not installed."""
    for name in [m for m in sys.modules if m == "pyspark" or m.startswith("pyspark.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    assert cli.main(["spark-packages"]) == 1
    out = capsys.readouterr()
    summary = _summary(out.out)
    assert summary["command"] == "spark-packages" and summary["status"] == "failed", summary
    assert summary["error"].startswith(f"spark-packages needs pyspark, which is not installed: {EXTRA_HINT}")
    assert "Traceback" not in out.out + out.err


def test_missing_spark_follows_the_cause_chain() -> None:
    try:
        try:
            raise ModuleNotFoundError("No module named 'delta.tables'", name="delta.tables")
        except ImportError as exc:
            raise RuntimeError("cannot open the journal") from exc
    except RuntimeError as exc:
        assert cli.missing_spark(exc) == "delta-spark"
    assert cli.missing_spark(ModuleNotFoundError("No module named 'py4j'", name="py4j")) == "pyspark"
    # other missing modules are not Spark's: their error stays as it is
    assert cli.missing_spark(ModuleNotFoundError("No module named 'deltalake'", name="deltalake")) is None
    assert cli.missing_spark(ValueError("pyspark")) is None
