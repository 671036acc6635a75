"""Every way out ends well: whatever goes wrong, a command exits non-zero, prints its JSON summary as
the last stdout line, shows no traceback (unless --debug) and never the connection string; SIGTERM
ends it with status "interrupted" and exit 143, and a drain stopped so loses and repeats nothing."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from queuelake import cli, errors, stopping
from queuelake.lake.reading import read_table

from tests.helpers.cli import CliResult, run_cli, signalled_when_held
from tests.helpers.drain import install, make_config, seed_ids, write_config
from tests.helpers.redaction import cut_words, shows_secret

REPO = Path(__file__).resolve().parents[2]
SECRET_URI = "postgresql://queuelake:s3cr3t-Pa55@db.example.invalid:5432/queues"


def _env(connection: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "QUEUELAKE_CONNECTION"}
    if connection is not None:
        env["QUEUELAKE_CONNECTION"] = connection
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (extra.pop("PYTHONPATH", ""), str(REPO / "lib"), env.get("PYTHONPATH", "")) if p
    )
    return {**env, **extra}


def _summary(stdout: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines, "no output on stdout"
    return json.loads(lines[-1])


def _run(args: list[str], connection: str | None, timeout: float = 300, **extra: str) -> CliResult:
    return run_cli(args, connection, timeout=timeout, **extra)


# --- in-process: the CLI's handling, with stand-in commands -------------------------------------


def _boom(args: Any) -> dict[str, Any]:
    raise RuntimeError(f'cannot reach {os.environ["QUEUELAKE_CONNECTION"]}\n  File "x.py", line 1, in f\n    g()')


_SLEPT_THROUGH: list[bool] = []


def _replace_run(monkeypatch: pytest.MonkeyPatch, command: str, run: Any) -> None:
    """``command`` runs ``run`` instead, for this test."""
    monkeypatch.setitem(cli.COMMANDS, command, dataclasses.replace(cli.COMMANDS[command], run=run))


def _sigterm_self(args: Any) -> dict[str, Any]:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the handler raises in the main thread before this ends
    _SLEPT_THROUGH.append(True)
    return {"status": "ok"}


def _sigterm_graceful(args: Any) -> dict[str, Any]:
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(50):  # a loop that honours the flag at its next boundary
        if stopping.requested():
            return {"status": "ok", "batches": 1}
        time.sleep(0.1)
    return {"status": "ok", "batches": 50}


def _parent_gone_in_bursts(args: Any) -> dict[str, Any]:
    """What the kernel does when spark-submit's JVM dies: the parent-death signal once per thread the
    child is passed through, some to the main thread, some to others (a review saw two, 30 ms apart)."""
    import threading

    for _ in range(3):
        os.kill(os.getpid(), stopping.PARENT_GONE)
    other = threading.Thread(target=lambda: [os.kill(os.getpid(), stopping.PARENT_GONE) for _ in range(3)])
    other.start()
    stopping.join(other)
    return _sigterm_graceful_after_signals()


def _sigterm_graceful_after_signals() -> dict[str, Any]:
    for _ in range(50):  # a loop that honours the flag at its next boundary
        if stopping.requested():
            return {"status": "ok", "batches": 1}
        time.sleep(0.1)
    return {"status": "ok", "batches": 50}


def test_a_dead_parents_signals_are_one_graceful_stop(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Six parent-death signals: one stop at the next batch boundary, never "stop now" (two SIGTERMs
    were: the orphan ended with no ``runs`` row, or hung in its handlers)."""
    _replace_run(monkeypatch, "drain", _parent_gone_in_bursts)
    monkeypatch.setattr(stopping, "_parent_watched", True)  # as ``jobs.stop_with_parent`` sets it
    code = cli.main(["drain"])
    summary = _summary(capsys.readouterr().out)
    assert code == 143 and summary["status"] == "interrupted" and summary["batches"] == 1, summary
    stopping.reset()


def _signal_to_a_worker_thread(args: Any) -> dict[str, Any]:
    """A drain's main thread waits on its workers; the kernel may give SIGTERM to a worker's thread.
    Python runs the handler only in the main thread, once it runs Python again."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    started = threading.Event()

    def work() -> int:
        started.set()
        for batch in range(1, 101):  # 10 s of batches unless asked to stop
            if stopping.requested():
                return batch
            time.sleep(0.1)
        return 100

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(work), pool.submit(time.sleep, 0)]
        started.wait(5)
        worker = next(t for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor"))
        signal.pthread_kill(worker.ident, signal.SIGTERM)  # type: ignore[arg-type]
        batches = stopping.results(futures)[0]
    return {"status": "ok", "batches": batches}


def test_a_signal_the_kernel_gives_a_worker_thread_still_stops_the_drain(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The main thread waited on its workers with no timeout, so a SIGTERM delivered to a worker's
    thread was handled only when the queues were drained to the end (a review, after Airflow's kill)."""
    _replace_run(monkeypatch, "drain", _signal_to_a_worker_thread)
    code = cli.main(["drain"])
    summary = _summary(capsys.readouterr().out)
    assert code == 143 and summary["status"] == "interrupted" and summary["batches"] < 50, summary
    assert summary["error"] == "stopped by signal SIGTERM", summary  # said why, as a raised stop says it
    stopping.reset()


def test_a_command_that_returns_interrupted_says_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """``run`` stopped between its steps returned "interrupted" with no error in its summary and no closing
    log line, where a command stopped by an exception says "stopped by signal SIGTERM" (a review)."""
    _replace_run(monkeypatch, "drain", lambda args: {"status": "interrupted", "skipped": ["bodies"]})
    with caplog.at_level("WARNING", logger="queuelake"):
        cli.main(["drain"])
    summary = _summary(capsys.readouterr().out)
    assert summary["status"] == "interrupted" and summary["error"] == "stopped as asked", summary
    assert "drain interrupted: stopped as asked" in caplog.text
    stopping.reset()


def test_any_exception_is_a_clean_failure_without_the_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QUEUELAKE_CONNECTION", SECRET_URI)
    _replace_run(monkeypatch, "status", _boom)
    code = cli.main(["status", "-c", "/nonexistent.yaml"])
    out = capsys.readouterr()
    summary = _summary(out.out)
    assert code == 1 and summary["status"] == "failed" and summary["command"] == "status"
    assert "RuntimeError: cannot reach" in summary["error"] and summary["error_kind"] == "unexpected"
    assert "s3cr3t-Pa55" not in out.out + out.err and SECRET_URI not in out.out + out.err
    assert "File " not in summary["error"] and "Traceback" not in out.err


@pytest.mark.parametrize("password", ["postgres", "admin", "a", "queues", "example"])
def test_a_common_word_secret_is_hidden_and_the_message_kept(
    password: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A password that is a word (or part of the user, host or database names) is hidden as the
    secret it is, and the words of the message are left whole."""
    monkeypatch.setenv("QUEUELAKE_CONNECTION", f"postgresql://postgres:{password}@db.example.invalid:5432/queues")
    _replace_run(monkeypatch, "status", _boom)
    assert cli.main(["status", "-c", "/nonexistent.yaml"]) == 1
    out = capsys.readouterr()
    assert _summary(out.out)["error"] == "RuntimeError: cannot reach <connection string>"
    assert "status failed: RuntimeError: cannot reach <connection string> (--debug" in out.err
    assert not shows_secret(out.out + out.err, password) and not cut_words(out.out + out.err)
    # --debug: the traceback is redacted by the same rules
    assert cli.main(["--debug", "status", "-c", "/nonexistent.yaml"]) == 1
    out = capsys.readouterr()
    assert "Traceback" in out.err and "cannot reach <connection string>" in out.err
    assert not shows_secret(out.out + out.err, password) and not cut_words(out.out + out.err), out.err


def _raises(exc: BaseException) -> Any:
    def run(args: Any) -> dict[str, Any]:
        raise exc

    return run


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (errors.ConfigError("drain.batch_size must be at least 1"), "config"),
        (errors.ArgumentError("--limit must be 0 or more"), "arguments"),
        (errors.AddressError("queue address is empty"), "address"),
        (errors.TransportError("Sales: table does not exist"), "transport"),
        (errors.LakeError("messages: written by delta-spark"), "lake"),
        (errors.DrainError("no queues to drain"), "drain"),
        (errors.PublishError("outbound table x does not exist"), "publish"),
        (errors.ReplayError("replay r1 is already running"), "replay"),
        (ModuleNotFoundError("No module named 'pyspark'", name="pyspark"), "missing-dependency"),
        (KeyError("x"), "unexpected"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_a_failure_names_its_kind(
    exc: BaseException, kind: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The summary's ``error_kind`` tells a scheduler what failed without parsing the message."""
    _replace_run(monkeypatch, "status", _raises(exc))
    assert cli.main(["status", "-c", "/nonexistent.yaml"]) == 1
    summary = _summary(capsys.readouterr().out)
    assert summary["status"] == "failed" and summary["error_kind"] == kind, summary


def test_a_missing_config_file_is_a_config_failure(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status", "-c", "/nonexistent/queuelake.yaml"]) == 1
    summary = _summary(capsys.readouterr().out)
    assert summary["error_kind"] == "config" and "/nonexistent/queuelake.yaml" in summary["error"], summary


def test_sigterm_interrupts_a_command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _replace_run(monkeypatch, "status", _sigterm_self)
    before = signal.getsignal(signal.SIGTERM)
    code = cli.main(["status"])
    assert not _SLEPT_THROUGH, "SIGTERM did not stop the command: it ran to its end"
    summary = _summary(capsys.readouterr().out)
    assert code == 143 and summary["status"] == "interrupted"
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back
    stopping.reset()


def test_first_sigterm_lets_a_drain_stop_at_a_boundary(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _replace_run(monkeypatch, "drain", _sigterm_graceful)
    code = cli.main(["drain"])
    summary = _summary(capsys.readouterr().out)
    assert code == 143 and summary["status"] == "interrupted" and summary["batches"] == 1
    stopping.reset()


def _stop_replaced_by_a_cancelled_job(args: Any) -> dict[str, Any]:
    """As pyspark's ``toArrow`` does when the second signal's stop arrives in it: its ``finally`` waits
    for the job the handler cancelled, and raises that job's error instead."""
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # the first: stop at a boundary
        os.kill(os.getpid(), signal.SIGTERM)  # the second: stop now, raised here
        time.sleep(5)
    finally:
        raise RuntimeError("org.apache.spark.SparkException: Exception thrown in awaitResult")
    return {"status": "ok"}


def test_a_stop_an_error_replaced_on_its_way_out_is_still_a_stop(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second SIGTERM or Ctrl-C during ``bodies`` ended it "failed", error_kind "unexpected", in 5 of 19
    tries (found by a review): the cancelled Spark job's error replaced the stop."""
    _replace_run(monkeypatch, "status", _stop_replaced_by_a_cancelled_job)
    code = cli.main(["status"])
    summary = _summary(capsys.readouterr().out)
    assert code == 143 and summary["status"] == "interrupted", summary
    stopping.reset()


class PanicException(BaseException):
    """As pyo3 names a Rust panic (``pyo3_runtime.PanicException``): a BaseException."""


def _panics(args: Any) -> dict[str, Any]:
    raise PanicException("exceeded serde_json's recursion limit")


def test_a_rust_panic_is_a_failure_with_its_summary(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """deltalake's panic on a body nested too deep ended ``bodies`` with a traceback and no summary."""
    _replace_run(monkeypatch, "status", _panics)
    code = cli.main(["status"])
    summary = _summary(capsys.readouterr().out)
    assert code == 1 and summary["status"] == "failed" and summary["error_kind"] == "unexpected", summary
    assert "recursion limit" in summary["error"], summary


def test_a_hangup_stops_a_command_unless_nohup_ignores_it() -> None:
    """SIGHUP (a closed terminal) is a stop request like SIGTERM, exit 129; under ``nohup``, which
    ignores it so the command outlives its terminal, it stays ignored. A child started in
    ``ignored_while_starting_children`` (Spark's JVM, the drain's processes) ignores every stop signal;
    the handlers before are back."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert signal.SIGHUP not in stopping.stop_signals()
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        assert signal.SIGHUP in stopping.stop_signals()
        term = signal.getsignal(signal.SIGTERM)
        with stopping.ignored_while_starting_children():
            assert signal.getsignal(signal.SIGHUP) is signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL and signal.getsignal(signal.SIGTERM) is term
    finally:
        signal.signal(signal.SIGHUP, before)


def test_describe_drops_stack_frames() -> None:
    class FakeJavaError(Exception):
        pass

    text = (
        "An error occurred while calling o42.save.\n: org.apache.spark.SparkException: Job aborted.\n"
        "\tat org.apache.spark.Foo.bar(Foo.scala:1)\n\t... 12 more\n"
        "Traceback (most recent call last):\n  File \"/t/mod.py\", line 3, in f\n    raise ValueError('no')\n"
        "ValueError: no"
    )
    out = cli.describe(FakeJavaError(text))
    assert "Job aborted" in out and "ValueError: no" in out
    assert "Foo.scala" not in out and "File " not in out and "raise ValueError" not in out


# --- subprocess: real commands ------------------------------------------------------------------


def test_lake_error_is_a_clean_failure(fresh_pg_uri: str, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "lake"
    not_a_dir.write_text("a file where the lake root should be")
    conf = write_config(tmp_path / "drain.yaml", not_a_dir, ["Sales"], batch_size=100)
    install(make_config(fresh_pg_uri, tmp_path / "unused", ["Sales"]))

    proc = _run(["drain", "-c", str(conf)], fresh_pg_uri)
    summary = _summary(proc.stdout)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert summary["status"] == "failed" and summary["command"] == "drain" and summary["error"]
    assert summary["error_kind"] == "lake", summary
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert fresh_pg_uri not in proc.stdout + proc.stderr

    debug = _run(["--debug", "drain", "-c", str(conf)], fresh_pg_uri)
    assert debug.returncode == 1 and _summary(debug.stdout)["status"] == "failed"
    assert "Traceback" in debug.stderr
    assert fresh_pg_uri not in debug.stdout + debug.stderr


@pytest.mark.slow
def test_failing_transform_is_a_clean_failure(fresh_pg_uri: str, tmp_path: Path) -> None:
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "badtransform.py").write_text(
        "import os\n\ndef explode(spark, lake):\n"
        "    raise ValueError('transform exploded near ' + os.environ['QUEUELAKE_CONNECTION'])\n"
    )
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, ["Sales"])
    install(cfg)
    seed_ids(cfg, "Sales", 20, seed=7)
    conf = tmp_path / "job.yaml"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(lake_root), "engine": "auto"},
                "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": "1"}},
                "drain": {"queues": ["Sales"], "batch_size": 100},
                "transforms": [{"name": "bad", "function": "badtransform:explode", "output": "outbound_bad"}],
            }
        )
    )
    assert _summary(_run(["drain", "-c", str(conf)], fresh_pg_uri).stdout)["status"] == "ok"
    proc = _run(["transform", "-c", str(conf)], fresh_pg_uri, timeout=600, PYTHONPATH=str(mods))
    summary = _summary(proc.stdout)
    assert proc.returncode != 0 and summary["status"] == "failed", (summary, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert fresh_pg_uri not in proc.stdout + proc.stderr


def test_sigterm_stops_a_drain_exactly_once(fresh_pg_uri: str, tmp_path: Path) -> None:
    lake_root = tmp_path / "lake"
    proc, ids = _drain_under_way(fresh_pg_uri, tmp_path, seed=13)
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # the drain did not honour the flag: the second SIGTERM stops it now
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    summary = _summary(out)
    assert proc.returncode == 143, err[-3000:]
    assert summary["status"] == "interrupted" and summary["command"] == "drain", summary
    assert "Traceback" not in err, err[-3000:]

    journal_ids = read_table(str(lake_root / "messages"))["id"].to_pylist() if (lake_root / "messages").exists() else []
    assert len(journal_ids) == len(set(journal_ids)), "duplicates in the journal"
    import psycopg

    with psycopg.connect(fresh_pg_uri) as conn:
        left = [r[0] for r in conn.execute('SELECT id::text FROM "public"."Sales"').fetchall()]
    assert len(left) == len(set(left))
    assert not set(left) & set(journal_ids), "rows both in the journal and still in the queue"
    assert set(left) | set(journal_ids) == ids and len(left) + len(journal_ids) == len(ids)


def _drain_under_way(
    uri: str, tmp_path: Path, seed: int, env: dict[str, str] | None = None, **drain: object
) -> tuple[subprocess.Popen[str], set[str]]:
    """A drain of 200,000 seeded rows into ``tmp_path/lake``, started as a command, once the journal holds
    its first batch (it is under way, its signal handlers set); and the ids seeded. The caller's signal
    goes at once: the rows take about 2 s to drain, and a fixed wait after the journal's creation let the
    whole drain finish first once its commits got cheaper."""
    lake_root = tmp_path / "lake"
    cfg = make_config(uri, lake_root, ["Sales"])
    install(cfg)
    ids = seed_ids(cfg, "Sales", 200_000, seed=seed)
    conf = write_config(tmp_path / "drain.yaml", lake_root, ["Sales"], batch_size=2000, **drain)
    proc = subprocess.Popen(
        [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)],
        env={**_env(uri), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    first_batch = lake_root / "messages" / "_delta_log" / f"{1:020d}.json"
    deadline = time.monotonic() + 60
    while not first_batch.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the drain ended before SIGTERM: seed more rows"
    return proc, ids


@pytest.mark.parametrize("on", ["driver", "processes"])
def test_a_second_sigterm_keeps_the_drains_counts_and_runs_rows(fresh_pg_uri: str, tmp_path: Path, on: str) -> None:
    """A second SIGTERM ("stop now") during a drain printed only ``interrupted``: no counts, no ``runs``
    row, while the journal had grown (a review, after Airflow's kill). The workers, threads, stop at their
    batch boundary either way: the second signal is said and the drain ends as after the first. So do
    the local processes of ``drain.on: processes`` (a later review: no counts, mostly no runs rows)."""
    lake_root = tmp_path / "lake"
    held = tmp_path / "held"  # a worker holds its second batch staged for 2 s: the pool surely runs
    hold = {"QUEUELAKE_TEST_HOLD_AT": "after_stage:2:2", "QUEUELAKE_TEST_HOLD_MARK": str(held)}
    proc, _ = _drain_under_way(fresh_pg_uri, tmp_path, seed=17, env=hold, on=on)
    deadline = time.monotonic() + 60
    while not held.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held.exists(), "the drain never reached its held batch"
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    summary = _summary(out)
    assert proc.returncode == 143 and summary["status"] == "interrupted", (summary, err[-3000:])
    journal = read_table(str(lake_root / "messages"))["id"].to_pylist()
    assert summary["landed"] == len(journal) > 0 and summary["run_id"], summary
    runs = read_table(str(lake_root / "runs")).to_pylist()
    assert [r for r in runs if r["run_id"] == summary["run_id"]], runs
    # both signals came while a worker held its batch: the second is said, before the pool's end
    pool_ended = err.find("message(s) from 1 queue(s)")
    said = err.find("stops at its next batch boundary all the same")
    assert said != -1 and (pool_ended == -1 or said < pool_ended), err[-3000:]


def _run_with_steps(
    monkeypatch: pytest.MonkeyPatch,
    outcomes: dict[str, tuple[str, bool]],
    bare: bool = False,
    held: tuple[str, ...] = (),
) -> tuple[list[str], dict]:
    """``run_all`` with each step replaced: ``outcomes`` maps a step to (its status, whether SIGTERM
    arrives during it); returns the steps that ran and the run's summary. ``bare``: a config with no
    transforms and no publish outputs. ``held``: the bodies or transform steps whose lock another
    process holds (an erase, maintain's retention): ``one_at_a_time`` finds it taken."""
    import argparse
    import contextlib

    from queuelake import config as config_mod
    from queuelake import context
    from queuelake.commands import sessions
    from queuelake.commands.run import run_all
    from queuelake.pipeline import step_locks, transform
    from queuelake.pipeline.bodies import run as bodies
    from queuelake.pipeline.drain import run as drain
    from queuelake.pipeline.publish import run as publish

    ran: list[str] = []

    def step(name: str):
        status, stop = outcomes.get(name, ("ok", False))

        def run(*args: Any, **kwargs: Any) -> dict[str, Any]:
            ran.append(name)
            if stop:
                stopping.request()  # SIGTERM arrives during this step
            if status == "raises":  # an error outside what the step fails alone (a Spark job over every type)
                raise RuntimeError(f"{name} broke" + (f" at {secret}" if name == "transform" else ""))
            if status == "cancelled":  # a second signal's stop, replaced by the cancelled Spark job's error
                try:
                    raise stopping.Interrupted("stopped by signal SIGTERM")
                except stopping.Interrupted:
                    raise RuntimeError(f"{name}'s Spark job was cancelled") from None
            if status == "failed in one queue":  # a queue table dropped by another program, the others drained
                queues = [{"queue": "A", "status": "ok"}, {"queue": "B", "status": "failed", "error": "gone"}]
                return {"status": "failed", "error": "B: gone", "queues": queues}
            if status == "failed in every queue":
                return {"status": "failed", "error": "gone", "queues": [{"queue": "B", "status": "failed"}]}
            return {"status": status, **({"error": f"{name} broke"} if status == "failed" else {})}

        return run

    secret = "postgresql://job:S3cr3t-Pa55w0rd@db/x"  # an error quoting it is redacted, as cli redacts its own
    loaded = SimpleNamespace(
        bodies=SimpleNamespace(enabled=True),
        transforms=[] if bare else [SimpleNamespace(name="scores")],
        publish=SimpleNamespace(outputs=[] if bare else ["scores"]),
        transport=SimpleNamespace(connection=secret),
        lake=SimpleNamespace(storage_options={}),
    )
    monkeypatch.setattr(config_mod, "load", lambda path: loaded)
    monkeypatch.setattr(sessions, "spark_for", lambda cfg, spark: None)
    monkeypatch.setattr(sessions, "lake_for", lambda cfg, spark=None: None)
    monkeypatch.setattr(sessions, "runs_only_lake", lambda cfg: None)
    monkeypatch.setattr(sessions.Sessions, "step", lambda self, run, pending, writes=None: run(None, None, None))
    monkeypatch.setattr(context, "open_database", lambda cfg: None)
    if held:  # the real one_at_a_time, its lock found taken (or free) without a database

        @contextlib.contextmanager
        def lock(cfg: Any, name: str, wait_seconds: float = 0.0) -> Any:
            yield name not in held

        monkeypatch.setattr(step_locks, "held", lock)
    else:
        monkeypatch.setattr(step_locks, "one_at_a_time", lambda cfg, name, run: run())  # no database to lock in
    monkeypatch.setattr(drain, "drain", step("drain"))
    monkeypatch.setattr(bodies, "bodies", step("bodies"))
    monkeypatch.setattr(transform, "transform", step("transform"))
    monkeypatch.setattr(publish, "publish", step("publish"))
    args = argparse.Namespace(config="x.yaml", queues=None, max_messages=None, max_seconds=None)
    try:
        return ran, run_all(args)
    finally:
        stopping.reset()


def test_run_skips_later_steps_once_sigterm_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    ran, out = _run_with_steps(monkeypatch, {"drain": ("ok", True)})
    assert ran == ["drain"]
    assert out["status"] == "interrupted" and out["skipped"] == ["bodies", "transform", "publish"]


@pytest.mark.parametrize("failing", ["bodies", "transform"])
def test_a_failed_bodies_or_transform_step_does_not_stop_the_steps_after_it(
    monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """One message type whose bodies failed every run stopped every later transform and publish (found
    by a review): the run goes on, and fails at its end."""
    ran, out = _run_with_steps(monkeypatch, {failing: ("failed", False)})
    assert ran == ["drain", "bodies", "transform", "publish"]
    assert out["status"] == "failed" and out[failing]["error"] == f"{failing} broke"


@pytest.mark.parametrize("step", ["drain", "bodies", "publish"])
def test_a_step_interrupted_by_a_stop_request_makes_the_run_interrupted(
    monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """A SIGTERM (Airflow's cancel) during the drain: the drain stopped at a batch boundary and said
    "interrupted", and the run reported "failed", exit 1 (found by a review)."""
    ran, out = _run_with_steps(monkeypatch, {step: ("interrupted", True)})
    order = ["drain", "bodies", "transform", "publish"]
    assert ran == order[: order.index(step) + 1]
    assert out["status"] == "interrupted" and out["skipped"] == order[order.index(step) + 1 :], out


def test_a_stop_after_a_failed_step_makes_the_run_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bodies failed, then SIGTERM arrived during transform: the run said "failed" (exit 1), and a
    scheduler read a failure where it had asked for a stop (exit 143). It is interrupted, the failed
    step named."""
    ran, out = _run_with_steps(monkeypatch, {"bodies": ("failed", False), "transform": ("interrupted", True)})
    assert ran == ["drain", "bodies", "transform"]
    assert out["status"] == "interrupted" and out["skipped"] == ["publish"] and out["failed_steps"] == ["bodies"]
    ran, out = _run_with_steps(monkeypatch, {"bodies": ("failed", False), "transform": ("ok", True)})
    assert out["status"] == "interrupted" and out["skipped"] == ["publish"] and out["failed_steps"] == ["bodies"]


def test_a_failed_step_is_named_with_the_steps_it_kept_from_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """A drain failed by its status (its runs rows not written: a full disk) ended the run with bodies,
    transform and publish not run, and its summary named neither (a review); a raised error's did."""
    ran, out = _run_with_steps(monkeypatch, {"drain": ("failed", False)})
    assert ran == ["drain"] and out["status"] == "failed", out
    assert out["failed_steps"] == ["drain"] and out["skipped"] == ["bodies", "transform", "publish"], out
    ran, out = _run_with_steps(monkeypatch, {"bodies": ("failed", False)})  # the run goes on after bodies
    assert out["status"] == "failed" and out["failed_steps"] == ["bodies"] and "skipped" not in out, out


def test_a_run_without_transforms_or_outputs_does_not_list_them_as_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A drain-only config whose drain failed listed "transform" and "publish" as skipped, work left
    undone that was never asked for (found by a review); bodies, on by default, is still listed."""
    ran, out = _run_with_steps(monkeypatch, {"drain": ("failed", False)}, bare=True)
    assert out["failed_steps"] == ["drain"] and out["skipped"] == ["bodies"], out
    ran, out = _run_with_steps(monkeypatch, {"drain": ("ok", True)}, bare=True)  # SIGTERM during the drain
    assert out["status"] == "interrupted" and out["skipped"] == ["bodies"], out
    with pytest.raises(RuntimeError, match="cancelled") as info:
        _run_with_steps(monkeypatch, {"drain": ("cancelled", True)}, bare=True)
    done = stopping.done_before(stopping.stop_within(info.value))
    assert done["interrupted_step"] == "drain" and done["skipped"] == ["bodies"], done


@pytest.mark.parametrize("failing", ["bodies", "transform"])
def test_a_bodies_or_transform_step_that_raises_does_not_stop_the_steps_after_it(
    monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """A step that raised (a transform's Spark job failing on one message, a body no column name can
    hold) ended the run there: the later transforms and publish never ran (found by a review)."""
    ran, out = _run_with_steps(monkeypatch, {failing: ("raises", False)})
    assert ran == ["drain", "bodies", "transform", "publish"]
    assert out["status"] == "failed" and out[failing]["error"].startswith(f"RuntimeError: {failing} broke")
    assert "S3cr3t-Pa55w0rd" not in out[failing]["error"]
    assert out[failing]["error_kind"] == "unexpected"


def test_a_step_that_raises_after_a_stop_signal_is_a_failure_and_the_run_interrupted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first, graceful signal cancels no Spark job: an error after it is the step's own failure (a
    review found it re-raised, and the run said "failed", exit 1, with no step's summary). The run then
    stops, "interrupted"; a stop that a cancelled job's error replaced is still the command's stop."""
    ran, out = _run_with_steps(monkeypatch, {"bodies": ("raises", True)})
    assert ran == ["drain", "bodies"] and out["status"] == "interrupted", out
    assert out["failed_steps"] == ["bodies"] and out["skipped"] == ["transform", "publish"]
    assert out["bodies"]["error"].startswith("RuntimeError: bodies broke")
    with pytest.raises(RuntimeError, match="cancelled") as info:
        _run_with_steps(monkeypatch, {"bodies": ("cancelled", True)})
    stop = stopping.stop_within(info.value)
    assert isinstance(stop, stopping.Interrupted)
    # the steps done before the second signal go with the stop to the summary (it had none: a review)
    done = stopping.done_before(stop)
    assert done["drain"]["status"] == "ok" and done["interrupted_step"] == "bodies", done
    assert done["skipped"] == ["transform", "publish"], done


def test_a_step_that_raises_after_failed_ones_names_them_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk: bodies and transform failed alone, then publish raised; the summary's failed_steps
    named publish only (a review)."""
    with pytest.raises(RuntimeError, match="publish broke") as info:
        _run_with_steps(
            monkeypatch, {"bodies": ("failed", False), "transform": ("failed", False), "publish": ("raises", False)}
        )
    done = stopping.done_before(info.value)
    assert done["failed_steps"] == ["bodies", "transform", "publish"] and done["skipped"] == [], done


@pytest.mark.parametrize("step", ["bodies", "transform"])
def test_a_step_whose_lock_another_process_held_makes_the_run_incomplete(
    monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """An erase (or maintain's retention) held the transform step's lock: the run skipped its transform and
    said "ok", exit 0, with only a warning and the step's nested ``skipped`` (a review). A scheduler reads
    that a configured step did not run: "incomplete" (exit 1, as a drain that left rows others held), the
    step named in ``held_steps``; the other steps still ran."""
    order = ["drain", "bodies", "transform", "publish"]
    ran, out = _run_with_steps(monkeypatch, {}, held=(step,))
    assert ran == [s for s in order if s != step], ran
    assert out["status"] == "incomplete" and out["held_steps"] == [step], out
    assert out[step]["status"] == "ok" and "an erase" in out[step]["skipped"], out
    assert f"the {step} step did not run" in out["error"] and "skipped" not in out, out
    # a failure or a stop still says so first, the held step named beside it
    ran, out = _run_with_steps(monkeypatch, {"publish": ("failed", False)}, held=(step,))
    assert out["status"] == "failed" and out["failed_steps"] == ["publish"] and out["held_steps"] == [step], out
    ran, out = _run_with_steps(monkeypatch, {"publish": ("interrupted", True)}, held=(step,))
    assert out["status"] == "interrupted" and out["held_steps"] == [step], out
    ran, out = _run_with_steps(monkeypatch, {}, held=("publish",))  # no lock held on its steps: ok
    assert out["status"] == "ok" and "held_steps" not in out, out


def test_a_failed_drain_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    ran, out = _run_with_steps(monkeypatch, {"drain": ("failed", False)})
    assert ran == ["drain"] and out["status"] == "failed"
    ran, out = _run_with_steps(monkeypatch, {"drain": ("failed in every queue", False)})
    assert ran == ["drain"] and out["status"] == "failed"


def test_a_drain_failed_in_some_queues_only_lets_the_steps_after_it_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """One of 113 queue tables dropped (a decommissioned endpoint): the drain landed the other queues'
    rows, and the run skipped bodies, transform and publish for all of them, every run (a review)."""
    ran, out = _run_with_steps(monkeypatch, {"drain": ("failed in one queue", False)})
    assert ran == ["drain", "bodies", "transform", "publish"], ran
    assert out["status"] == "failed" and out["failed_steps"] == ["drain"] and "skipped" not in out, out


_CHILD = """
import os, signal, sys, time
from queuelake.jobs import stop_with_parent
from queuelake.stopping import PARENT_GONE
got = []
signal.signal(PARENT_GONE, lambda *a: got.append(1))
stop_with_parent()
print("ready", flush=True)
for _ in range(400):
    if got:
        with open(sys.argv[1] + ".part", "w") as out:
            out.write("stopped")
        os.replace(sys.argv[1] + ".part", sys.argv[1])  # the test polls: never an empty file
        break
    time.sleep(0.05)
"""
_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_job_is_asked_to_stop_when_spark_submit_is_killed(tmp_path) -> None:
    """Airflow's cancel kills spark-submit alone (SIGKILL), and the job's Python, its child, ran on
    orphaned: the drain went on after the task had failed (found by a review). A job now gets SIGTERM
    when its parent dies, and stops as on the scheduler's own SIGTERM."""
    flag = tmp_path / "stopped"
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, _CHILD, str(flag)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        parent.kill()  # SIGKILL, as the operator's on_kill sends spark-submit
        parent.wait(10)
        deadline = time.monotonic() + 15
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert flag.exists() and flag.read_text() == "stopped"
    finally:
        parent.kill()


def test_a_library_starting_cannot_replace_the_commands_handlers() -> None:
    """pyspark's SparkContext sets its own SIGINT handler while it starts; Ctrl-C then broke the
    session's construction and the stop was lost (a review). ``handlers_kept`` leaves ours in place,
    and still lets a start ignore the signals (``ignored_while_starting_children``)."""

    def ours(signum: int, frame: object) -> None:
        pass

    def theirs(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, ours)
    stopping.keep_handlers({signal.SIGINT: ours})
    try:
        with stopping.handlers_kept():
            signal.signal(signal.SIGINT, theirs)
            assert signal.getsignal(signal.SIGINT) is ours
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.signal(signal.SIGINT, ours)
        signal.signal(signal.SIGINT, theirs)  # outside, as before
        assert signal.getsignal(signal.SIGINT) is theirs
    finally:
        stopping.keep_handlers({})
        signal.signal(signal.SIGINT, before)


def test_a_signal_after_the_summary_changes_nothing(tmp_path: Path) -> None:
    """A SIGTERM landing after the summary was printed, before the process ended, killed it: a signal's
    exit code (-15) under an "ok" summary, so a scheduler saw a killed task whose work was done (a
    review). The program ignores stop signals once its summary is out."""
    ended = signalled_when_held(["spark-packages"], None, hold="program_ending:3", cwd=tmp_path, timeout=60)
    assert ended.returncode == 0 and ended.summary["status"] == "ok", ended


def test_stdout_closed_by_its_reader_ends_without_a_traceback(tmp_path: Path) -> None:
    """``queuelake failures | head -1``: the command's output, then its summary, met a pipe whose reader had
    gone, and it ended in a Python traceback (a review). Its output stops there: exit 141 (SIGPIPE's, as git
    and the shell's tools) when the command's own output could not be written; its own exit code when only
    the summary could not."""
    conf = tmp_path / "c.yaml"
    conf.write_text(f'transport: {{connection: "postgresql://x@127.0.0.1:1/x"}}\nlake: {{root: {tmp_path / "lake"}}}\n')

    def closed_stdout(args: list[str]) -> subprocess.CompletedProcess[str]:
        read, write = os.pipe()
        os.close(read)  # no reader: every write to stdout fails with EPIPE
        try:
            return subprocess.run(
                [sys.executable, "-m", "queuelake", *args, "-c", str(conf)],
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                cwd=tmp_path,
                env=_env(None),
                timeout=120,
            )
        finally:
            os.close(write)

    sql = closed_stdout(["install", "--print-sql"])  # the command's own output: the SQL script
    assert sql.returncode == 141 and "Traceback" not in sql.stderr, sql.stderr
    assert "stdout was closed by its reader" in sql.stderr
    summary_only = closed_stdout(["tables"])  # fails (no lake): only its summary goes to stdout
    assert summary_only.returncode == 1 and "Traceback" not in summary_only.stderr, summary_only.stderr
    assert "the summary was not printed" in summary_only.stderr


def test_a_broken_pipe_is_stdout_closing_only_when_stdout_has_lost_its_reader() -> None:
    """A BrokenPipeError names no file: one from another pipe (a worker process's, a socket) is the
    command's failure, not "stdout was closed by its reader" with exit 141."""
    read, write = os.pipe()
    try:
        with os.fdopen(os.dup(write), "w") as stream:
            assert not cli.reader_gone(stream)  # its reader is there
            os.close(read)
            read = -1
            assert cli.reader_gone(stream)  # gone
    finally:
        os.close(write)
        if read >= 0:
            os.close(read)


def test_a_publish_stopped_while_its_session_starts_keeps_its_counts_at_the_top(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The publish step attaches its counts under "publish" to a stop that ends it (``run`` nests its
    steps so); the ``publish`` command alone put them there too, where every other ending of it has them at
    the top: a script reading ``summary["published"]`` failed only for a stop while Spark started (a review)."""
    from queuelake.commands import sessions

    def stopped_while_starting(self: Any, step: Any, pending: Any, writes: Any = None) -> dict[str, Any]:
        stop = stopping.Interrupted("stopped while the Spark session started")
        counts = {"status": "interrupted", "run_id": "r", "published": 3, "copies": 6, "outputs": [{"output": "o"}]}
        stopping.partial(stop, {"publish": counts})
        raise stop

    monkeypatch.setattr(sessions.Sessions, "step", stopped_while_starting)
    config = tmp_path / "queuelake.yaml"
    config.write_text(
        f"transport: {{connection: 'postgresql://u@localhost/d'}}\nlake: {{root: '{tmp_path / 'lake'}'}}\n"
    )
    code = cli.main(["publish", "-c", str(config)])
    summary = _summary(capsys.readouterr().out)
    assert code != 0 and summary["status"] == "interrupted", summary
    assert "publish" not in summary and summary["published"] == 3 and summary["copies"] == 6, summary
    assert summary["outputs"] == [{"output": "o"}] and summary["error"] == "stopped while the Spark session started"
    stopping.reset()
