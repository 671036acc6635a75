"""``queuelake demo --engine delta-spark``: the embedded demo end to end on the JVM engine.

The demo is a subprocess, as a user runs it; it finds the Delta jars ``bash jvm/fetch-jars.sh`` left in
the checkout's ``jvm/jars`` by itself (QUEUELAKE_DELTA_JARS unset; see ``commands/demo/end_to_end.use_checkout_jars``).
Nothing is downloaded. Without the jars this skips saying why (fails with QUEUELAKE_REQUIRE_DELTA_JVM=1).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from deltalake import DeltaTable
from queuelake.lake.marks import engine_of

from tests.helpers.cli import run_cli
from tests.helpers.jvm import delta_jars

OUTPUT = "outbound_customer_totals"


def _jars_or_skip() -> list[str]:
    jars, why = delta_jars()
    if not jars:
        if os.environ.get("QUEUELAKE_REQUIRE_DELTA_JVM", "") not in ("", "0"):
            pytest.fail(f"QUEUELAKE_REQUIRE_DELTA_JVM is set: {why}")
        pytest.skip(why)
    return jars


def _writer(table: Path) -> str | None:
    meta = DeltaTable(str(table)).metadata()
    return engine_of(meta.configuration, meta.description)


@pytest.mark.slow
def test_demo_on_delta_spark(tmp_path: Path) -> None:
    jars = _jars_or_skip()
    env = {k: v for k, v in os.environ.items() if k != "QUEUELAKE_DELTA_JARS"}  # the demo finds jvm/jars itself
    assert all(Path(j).parent.name == "jars" for j in jars), jars
    proc = run_cli(
        ["demo", "--engine", "delta-spark", "--workdir", str(tmp_path), "--messages", "300"],
        cwd=tmp_path,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "demo: using the Delta jars in " in proc.stderr
    # Spark's warehouse is not left in the user's folder (it made ./spark-warehouse there: a review)
    assert not (tmp_path / "spark-warehouse").exists()
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["status"] == "ok", summary
    assert summary["engine"] == "delta-spark"
    # what landed, per queue and outcome, is exactly what was seeded
    journal = {queue.split(".")[-1].strip('"'): counts for queue, counts in summary["journal"].items()}
    assert journal == summary["expected"]
    to = summary["published"]["to"]
    assert summary["published"]["copies"] == sum(n for types in to.values() for n in types.values()) > 0

    # the journal (the drain's claim protocol) and runs (written by every command, Spark or not) are
    # delta-rs's, the outputs the JVM engine's
    lake = Path(summary["lake"])
    assert _writer(lake / "messages") == "delta-rs"
    assert _writer(lake / OUTPUT) == "delta-spark"
    assert _writer(lake / "runs") == "delta-rs"
    # every outbound row the JVM engine wrote was published (read back with the other engine)
    outbound = DeltaTable(str(lake / OUTPUT)).to_pyarrow_table(columns=["key"])
    assert outbound.num_rows == summary["published"]["rows"] > 0
    # no failed message has an audit copy (processed, then failed at the same endpoint, no retry between:
    # `failures` listed as open what `conversation` drew as retried, a review)
    copies = DeltaTable(str(lake / "messages")).to_pyarrow_table(columns=["queue", "message_id"]).to_pylist()
    failed = {r["message_id"] for r in copies if r["queue"] == '"public"."error"'}
    audited = {r["message_id"] for r in copies if r["queue"] == '"public"."audit"'}
    assert failed and audited and not failed & audited, sorted(failed & audited)[:3]

    # the config it wrote runs the scheduled job as it is, without the demo's environment: the jars are in
    # it (a review: every later bodies and transform failed, Delta's classes missing)
    config = tmp_path / "queuelake-demo.yaml"
    assert "spark.jars" in config.read_text(), config.read_text()
    later = run_cli(["transform", "-c", str(config)], cwd=tmp_path, env=env, timeout=900)
    assert later.returncode == 0 and later.summary["status"] == "ok", later
    # stdout is the JSON summary alone: Delta's VACUUM printed "Deleted 1 files and directories ..." there
    # from the JVM, and `maintain | jq .` failed (a review)
    maintained = run_cli(["maintain", "-c", str(config)], cwd=tmp_path, env=env, timeout=900)
    assert maintained.returncode == 0, maintained.stderr[-3000:]
    assert len(maintained.stdout.strip().splitlines()) == 1, maintained.stdout
    assert not (tmp_path / "spark-warehouse").exists()
