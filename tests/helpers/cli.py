"""The one way the tests run the CLI: ``python -m queuelake ARGS`` in a process of its own, as a user or a
scheduler runs it, with this checkout's ``lib`` first on PYTHONPATH.

``run_cli`` returns a ``CliResult``: the exit code, stdout, stderr and the JSON summary (the last line of
stdout; with ``--print-sql`` stdout is only SQL and the summary is stderr's last line). ``cli`` and
``cli_logged`` are the scheduled-job tests' shorthand: the summary of a command that must exit as its
status says (0 when ``ok``, else 1).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "lib"
CONNECTION = "QUEUELAKE_CONNECTION"


class _Inherit:
    def __repr__(self) -> str:
        return "INHERIT"


INHERIT: Any = _Inherit()  # ``connection=INHERIT``: QUEUELAKE_CONNECTION as the environment has it


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str
    args: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(init=False)  # {} when no last line is a JSON object

    def __post_init__(self) -> None:
        # the summary is stdout's last line; with --print-sql stdout is only SQL and it is stderr's
        self.summary = last_json(self.stdout) or last_json(self.stderr) or {}

    @property
    def code(self) -> int:
        return self.returncode

    @property
    def before_summary(self) -> str:
        """stdout without its last line (what a command printed before its summary, e.g. ``find``'s rows)."""
        return "\n".join(self.stdout.strip().splitlines()[:-1])

    def checked(self) -> CliResult:
        """Asserts there is a summary and that the exit code is what its status says (0 when ok, else 1)."""
        assert self.summary, f"no JSON summary; stderr:\n{self.stderr[-3000:]}"
        assert self.returncode == (0 if self.summary.get("status") == "ok" else 1), self
        return self

    def __repr__(self) -> str:
        return (
            f"CliResult(args={self.args!r}, code={self.returncode}, stdout={self.stdout[-2000:]!r}, "
            f"stderr={self.stderr[-2000:]!r})"
        )


def last_json(text: str) -> dict[str, Any] | None:
    """The last non-blank line of ``text`` if it is a JSON object."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    try:
        value = json.loads(lines[-1])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def cli_env(connection: str | None = INHERIT, env: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment ``run_cli`` gives the command: ``env`` (default: this process's), QUEUELAKE_CONNECTION
    set to ``connection`` (removed when None, as it is when INHERIT), ``extra`` on top, and PYTHONPATH:
    ``extra``'s, then this checkout's ``lib``, then the environment's."""
    out = dict(os.environ if env is None else env)
    if connection is not INHERIT:
        out.pop(CONNECTION, None)
        if connection is not None:
            out[CONNECTION] = connection
    first = extra.pop("PYTHONPATH", "")
    out.update(extra)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (first, str(LIB), out.get("PYTHONPATH", "")) if p)
    return out


def run_cli(
    args: Sequence[str],
    connection: str | None = INHERIT,
    *,
    cwd: Path | str = REPO,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    **extra: str,
) -> CliResult:
    """``python -m queuelake ARGS`` in ``cwd``; the environment is ``cli_env(connection, env, **extra)``."""
    argv = [str(a) for a in args]
    proc = subprocess.run(
        [sys.executable, "-m", "queuelake", *argv],
        cwd=cwd,
        env=cli_env(connection, env, **extra),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr, argv)


def signalled_when_held(
    args: Sequence[str],
    connection: str | None = INHERIT,
    *,
    hold: str,
    signals: Sequence[int] = (signal.SIGTERM,),
    cwd: Path | str = REPO,
    timeout: float = 120,
    **extra: str,
) -> CliResult:
    """``python -m queuelake ARGS`` held at a kill point (``hold``: ``point:seconds[:n]``, as
    ``QUEUELAKE_TEST_HOLD_AT`` takes it), then sent ``signals`` in turn once it is surely there (its hold
    mark exists): a stop that lands in the middle of the work on any machine, fast or loaded."""
    mark = Path(cwd) / f"held-{os.getpid()}-{hold.replace(':', '-')}"
    mark.unlink(missing_ok=True)
    argv = [str(a) for a in args]
    env = cli_env(connection, None, QUEUELAKE_TEST_HOLD_AT=hold, QUEUELAKE_TEST_HOLD_MARK=str(mark), **extra)
    proc = subprocess.Popen(
        [sys.executable, "-m", "queuelake", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )
    deadline = time.monotonic() + timeout
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if not mark.exists():
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{argv[0]} never reached its hold {hold!r}: {CliResult(proc.returncode, out, err, argv)}")
    for sig in signals:
        proc.send_signal(sig)
        time.sleep(0.05)
    out, err = proc.communicate(timeout=timeout)
    return CliResult(proc.returncode, out, err, argv)


def summary_of(proc: subprocess.CompletedProcess[str]) -> dict:
    """The JSON summary (stdout's last line) of a command a test started itself (``Popen``, kill loops)."""
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cli_logged(args: Sequence[str], uri: str, cwd: Path) -> tuple[dict, str]:
    """(the JSON summary, stderr) of one command on the database ``uri``; its exit code must match its status."""
    result = run_cli(args, uri, cwd=cwd).checked()
    return result.summary, result.stderr


def cli(args: Sequence[str], uri: str, cwd: Path) -> dict:
    """The JSON summary of one command on the database ``uri``; its exit code must match its status."""
    return cli_logged(args, uri, cwd)[0]


def as_from_a_terminal() -> None:
    """``preexec_fn`` for a command a test signals as a terminal would: SIGHUP at its default, as a
    shell's job has it, whatever the test run inherited (a CI started under ``nohup`` ignores it, and an
    ignored signal stays ignored in every child: the command kept it so, as it should under ``nohup``)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def without_spark(folder: Path) -> str:
    """A PYTHONPATH entry (made in ``folder``) under which pyspark, py4j and delta-spark cannot be imported,
    as on a delta-rs-only install (``pip install queuelake`` without the ``spark`` extra): its
    ``sitecustomize`` puts None for them in ``sys.modules``, which makes ``import pyspark`` fail as if it were
    not installed. For ``run_cli(..., PYTHONPATH=without_spark(tmp_path))``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\n\nfor _name in ('pyspark', 'py4j', 'delta'):\n    sys.modules[_name] = None\n", encoding="utf-8"
    )
    return str(folder)
