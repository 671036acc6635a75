"""A delta-rs-only install (``lake.engine: delta-rs``, no ``spark`` extra): the commands that need no Spark
work without pyspark, ``run`` among them while ``bodies.enabled`` is on, and a step that has work for Spark
fails naming itself and the extra to install.

The commands run as a user runs them, in a process of their own, on a real PostgreSQL and a delta-rs lake;
pyspark is made unimportable in that process (``without_spark``), the test's own process keeps it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from queuelake.commands.demo import traffic

from tests.helpers.bodies import config, send
from tests.helpers.cli import run_cli, without_spark
from tests.helpers.drain import install, journal

EXTRA_HINT = "pip install 'queuelake[spark]'"


@pytest.mark.slow
def test_run_and_the_other_commands_without_pyspark(fresh_pg_uri: str, tmp_path: Path) -> None:
    root = tmp_path / "lake"
    conf = tmp_path / "delta-rs.yaml"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(root), "engine": "delta-rs"},
                "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": "1"}},
                "drain": {"queues": ["Sales"], "batch_size": 100},
                "bodies": {"enabled": True},
            }
        ),
        encoding="utf-8",
    )
    cfg = config(fresh_pg_uri, root, "delta-rs")
    install(cfg)
    no_spark = without_spark(tmp_path / "no-spark")

    def command(*args: str, spark: bool = False, configured: bool = True):
        extra = {} if spark else {"PYTHONPATH": no_spark}
        argv = [*args, "-c", str(conf)] if configured else list(args)
        return run_cli(argv, fresh_pg_uri, cwd=tmp_path, timeout=300, **extra)

    # the hiding works: a Spark command says pyspark is missing
    hidden = command("spark-packages", configured=False)
    assert hidden.code == 1 and EXTRA_HINT in hidden.summary["error"], hidden

    # nothing drained yet: every step of the run has nothing to do, and none needs pyspark
    idle = command("run").checked()
    assert idle.summary["status"] == "ok" and idle.summary["bodies"]["status"] == "ok", idle.summary
    assert "Traceback" not in idle.stdout + idle.stderr

    # bodies with work: the step fails naming itself and the extra; the drain landed, the later steps ran
    send(cfg, "Sales", traffic.order_events(20, seed=3))
    busy = command("run").checked()
    assert busy.summary["status"] == "failed" and busy.summary["failed_steps"] == ["bodies"], busy
    assert busy.summary["drain"]["landed"] == 20, busy
    bodies = busy.summary["bodies"]
    assert bodies["error"].startswith(f"the bodies step needs pyspark, which is not installed: {EXTRA_HINT}"), bodies
    assert bodies["error_kind"] == "missing-dependency", bodies
    assert busy.summary["transform"]["status"] == "ok" and busy.summary["publish"]["status"] == "ok", busy
    assert "Traceback" not in busy.stdout + busy.stderr

    # where pyspark is installed the bodies are typed; then the delta-rs-only run has nothing new for them
    typed = command("bodies", spark=True).checked()
    assert typed.summary["rows_written"] == 20, typed
    again = command("run").checked()
    assert again.summary["status"] == "ok" and again.summary["bodies"]["note"] == "nothing new", again

    # the operator's commands on the same lake, without pyspark
    message_id = str(journal(root)["id"][0])
    for args in (
        ["drain"],
        ["status"],
        ["find", "--message-id", message_id],
        ["where", "--message-id", message_id],
        ["failures"],
        ["health"],
        ["replay", "--where", f"id = '{message_id}'", "--dry-run"],
        ["erase", "--where", f"id = '{message_id}'", "--dry-run"],
        ["maintain"],
    ):
        done = command(*args).checked()
        assert done.summary["status"] == "ok" and "Traceback" not in done.stderr, done


def test_a_run_step_that_needs_spark_is_named_in_the_failure() -> None:
    """A step whose failure ends ``run`` (the drain on executors, a publish that needs Spark) without
    pyspark: the summary's error names the step, not only "run"."""
    import argparse

    from queuelake import cli, stopping

    exc = ModuleNotFoundError("No module named 'pyspark'", name="pyspark")
    stopping.partial(exc, {"drain": {"status": "ok"}, "failed_steps": ["publish"], "skipped": []})
    summary = cli._failure(argparse.Namespace(command="run", debug=False), exc)
    assert summary["error"].startswith(f"run's publish step needs pyspark, which is not installed: {EXTRA_HINT}")
    assert summary["error_kind"] == "missing-dependency" and summary["failed_steps"] == ["publish"], summary
    # a command of one step says its own name, as before
    alone = cli._failure(argparse.Namespace(command="bodies", debug=False), ModuleNotFoundError(name="pyspark"))
    assert alone["error"].startswith(f"bodies needs pyspark, which is not installed: {EXTRA_HINT}"), alone
