"""The notebooks in ``notebooks/`` run end to end on a small lake and draw their plots.

A lake is written with deltalake directly (the journal schemas, realistic business, audit and error rows,
expired and quarantined ones, a runs table). One subprocess (one local Spark) then executes every notebook
file as plain Python (``# MAGIC`` lines are comments) in several scenarios: the full lake, a lake with no
audit or error rows and an empty ``runs`` table, a lake root with no tables at all, and once as on
Databricks (a stand-in ``dbutils`` whose widgets name the lake, a predefined ``spark`` and ``display``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("matplotlib", reason="the notebooks plot with matplotlib: pip install -e '.[notebooks]'")

from deltalake import write_deltalake  # noqa: E402
from queuelake import notebook_support  # noqa: E402
from queuelake.pipeline.journal import MESSAGES_SCHEMA, RUNS_SCHEMA  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
NAMES = ["journal_overview", "error_queue", "audit_processing"]

EXPECTED_PLOTS = {
    "journal_overview": {"throughput", "lag", "outcomes", "runs"},
    "error_queue": {"error_exception_types", "error_endpoints", "error_failures_over_time"},
    "audit_processing": {"audit_by_message_type", "audit_by_endpoint", "audit_distribution"},
}

T0 = dt.datetime(2026, 5, 1, 9, 0, tzinfo=dt.timezone.utc)
ASSEMBLY = ", Shop.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null"


# ---------------------------------------------------------------- the lake


def _wire(ts: dt.datetime) -> str:
    """NServiceBus' wire form of a time: ``2024-05-01 13:45:10:123456 Z``."""
    return ts.strftime("%Y-%m-%d %H:%M:%S:%f Z")


class Journal:
    """Rows of the ``messages`` table, built the way the drain would decode them."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.rows: list[dict[str, Any]] = []
        self.seq: dict[str, int] = {}
        self.batches: dict[tuple[str, dt.datetime], str] = {}

    def _identity(self, queue: str, drained_at: dt.datetime) -> dict[str, Any]:
        self.seq[queue] = self.seq.get(queue, 0) + 1
        batch = self.batches.setdefault((queue, drained_at), str(uuid.UUID(int=self.rng.getrandbits(128))))
        return {
            "queue": queue,
            "seq": self.seq[queue],
            "id": str(uuid.UUID(int=self.rng.getrandbits(128))),
            "batch_id": batch,
            "drained_at": drained_at,
        }

    def _drain_time(self, sent: dt.datetime) -> dt.datetime:
        """Batches land every 5 minutes: the first drain tick after the message was sent (+ a few seconds)."""
        minutes = (sent - T0).total_seconds() // 300 + 1
        return T0 + dt.timedelta(minutes=5 * minutes, seconds=self.rng.uniform(0, 3))

    def landed(self, queue: str, message_type: str, sent: dt.datetime, endpoint: str, **decoded: Any) -> None:
        drained_at = self._drain_time(sent)
        message_id = str(uuid.UUID(int=self.rng.getrandbits(128)))
        headers = {
            "NServiceBus.MessageId": message_id,
            "NServiceBus.MessageIntent": "Send",
            "NServiceBus.EnclosedMessageTypes": message_type + ASSEMBLY,
            "NServiceBus.ContentType": "application/json",
            "NServiceBus.ConversationId": message_id,
            "NServiceBus.OriginatingEndpoint": endpoint,
            "NServiceBus.OriginatingMachine": "web-01",
            "NServiceBus.TimeSent": _wire(sent),
        }
        for column, header in [
            ("processing_started", "NServiceBus.ProcessingStarted"),
            ("processing_ended", "NServiceBus.ProcessingEnded"),
            ("time_of_failure", "NServiceBus.TimeOfFailure"),
        ]:
            if decoded.get(column) is not None:
                headers[header] = _wire(decoded[column])
        for column, header in [
            ("processing_endpoint", "NServiceBus.ProcessingEndpoint"),
            ("failed_queue", "NServiceBus.FailedQ"),
            ("exception_type", "NServiceBus.ExceptionInfo.ExceptionType"),
            ("exception_message", "NServiceBus.ExceptionInfo.Message"),
        ]:
            if decoded.get(column) is not None:
                headers[header] = decoded[column]
        self.rows.append(
            {
                **self._identity(queue, drained_at),
                "outcome": "landed",
                "headers": list(headers.items()),
                "body": b'{"OrderId": "%d"}' % self.rng.randrange(10**6),
                "message_id": message_id,
                "message_intent": "Send",
                "enclosed_message_types": [message_type + ASSEMBLY],
                "message_type": message_type,
                "content_type": "application/json",
                "conversation_id": message_id,
                "originating_endpoint": endpoint,
                "originating_machine": "web-01",
                "time_sent": sent,
                **decoded,
            }
        )

    def expired(self, queue: str, sent: dt.datetime) -> None:
        """Only the identity and ``expires`` are kept for an expired row."""
        self.rows.append(
            {
                **self._identity(queue, self._drain_time(sent)),
                "outcome": "expired",
                "expires": sent + dt.timedelta(seconds=30),
            }
        )

    def quarantined(self, queue: str, sent: dt.datetime, raw: str, error: str) -> None:
        self.rows.append(
            {
                **self._identity(queue, self._drain_time(sent)),
                "outcome": "quarantined",
                "error": error,
                "raw_headers": raw,
            }
        )

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=MESSAGES_SCHEMA)


def business_traffic(journal: Journal, hours: float = 3) -> None:
    rng = journal.rng
    for queue, message_type, count in [
        ('"public"."Sales"', "Shop.Messages.PlaceOrder", 240),
        ('"public"."Billing"', "Shop.Messages.OrderPlaced", 160),
    ]:
        for _ in range(count):
            sent = T0 + dt.timedelta(seconds=rng.uniform(0, hours * 3600))
            journal.landed(queue, message_type, sent, "WebShop")
    for i in range(12):
        journal.expired('"public"."Sales"', T0 + dt.timedelta(minutes=13 * i + 2))
    journal.quarantined('"public"."Billing"', T0 + dt.timedelta(minutes=40), "{not json", "headers are not valid JSON")
    journal.quarantined(
        '"public"."Billing"',
        T0 + dt.timedelta(minutes=95),
        '{"NServiceBus.TimeSent": "yesterday"}',
        "header NServiceBus.TimeSent: 'yesterday' is not a wire-format time",
    )


def audit_and_error_traffic(journal: Journal, hours: float = 3) -> None:
    rng = journal.rng
    handlers = [  # message type, processing endpoint, median processing ms
        ("Shop.Messages.PlaceOrder", "Sales", 12.0),
        ("Shop.Messages.OrderPlaced", "Billing", 45.0),
        ("Shop.Messages.OrderBilled", "Shipping", 150.0),
    ]
    for _ in range(300):
        message_type, endpoint, median = rng.choice(handlers)
        sent = T0 + dt.timedelta(seconds=rng.uniform(0, hours * 3600))
        started = sent + dt.timedelta(milliseconds=rng.lognormvariate(4, 1))
        ended = started + dt.timedelta(milliseconds=rng.lognormvariate(0, 0.6) * median)
        journal.landed(
            '"public"."audit"',
            message_type,
            sent,
            "WebShop",
            processing_started=started,
            processing_ended=ended,
            processing_endpoint=endpoint,
        )
    exceptions = [  # type, message, failing endpoint, the message type it handled, weight
        (
            "System.TimeoutException",
            "The operation timed out after 00:00:30",
            "Billing",
            "Shop.Messages.OrderPlaced",
            5,
        ),
        ("Shop.Billing.CardDeclinedException", "Card declined: no funds", "Billing", "Shop.Messages.OrderPlaced", 3),
        ("System.InvalidOperationException", "Order 42 is already shipped", "Shipping", "Shop.Messages.OrderBilled", 2),
        ("Microsoft.Data.SqlClient.SqlException", "Transaction was deadlocked", "Sales", "Shop.Messages.PlaceOrder", 1),
    ]
    pattern = [e for e in exceptions for _ in range(e[4])]
    for i in range(66):
        exception_type, message, endpoint, message_type, _weight = pattern[i % len(pattern)]
        sent = T0 + dt.timedelta(seconds=rng.uniform(0, hours * 3600))
        started = sent + dt.timedelta(milliseconds=80)
        failed = started + dt.timedelta(seconds=rng.uniform(1, 60))
        journal.landed(
            '"public"."error"',
            message_type,
            sent,
            "WebShop",
            processing_started=started,
            processing_ended=failed,
            processing_endpoint=endpoint,
            failed_queue=endpoint,
            exception_type=exception_type,
            exception_message=message,
            time_of_failure=failed,
        )


def runs_table(queues: list[str], count: int = 6) -> pa.Table:
    rows = []
    for i in range(count):
        started = T0 + dt.timedelta(minutes=30 * i)
        for q, queue in enumerate(queues):
            dequeued = 100 + 37 * q + 11 * i
            seconds = 2.0 + q * 0.4
            failed = i == 3 and q == 0
            rows.append(
                {
                    "run_id": str(uuid.UUID(int=i + 1)),
                    "command": "drain",
                    "queue": queue,
                    "started_at": started,
                    "ended_at": started + dt.timedelta(seconds=seconds),
                    "dequeued": 0 if failed else dequeued,
                    "landed": 0 if failed else dequeued - 2,
                    "expired": 0 if failed else 1,
                    "quarantined": 0 if failed else 1,
                    "batches": 1,
                    "seconds": seconds,
                    "rate": 0.0 if failed else dequeued / seconds,
                    "backlog_left": max(0, 500 - 90 * i + 10 * q),
                    "status": "failed" if failed else "ok",
                    "error": "connection reset by peer" if failed else None,
                }
            )
    return pa.Table.from_pylist(rows, schema=RUNS_SCHEMA)


@pytest.fixture(scope="module")
def lakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("notebook_lakes")
    full = Journal()
    business_traffic(full)
    audit_and_error_traffic(full)
    write_deltalake(str(base / "full" / "messages"), full.table())
    write_deltalake(
        str(base / "full" / "runs"),
        runs_table(['"public"."Sales"', '"public"."Billing"', '"public"."audit"', '"public"."error"']),
    )

    business = Journal(seed=11)
    for i in range(50):
        business.landed('"public"."Sales"', "Shop.Messages.PlaceOrder", T0 + dt.timedelta(minutes=i), "WebShop")
    write_deltalake(str(base / "business_only" / "messages"), business.table())
    write_deltalake(str(base / "business_only" / "runs"), RUNS_SCHEMA.empty_table())
    return {"full": base / "full", "business_only": base / "business_only", "missing": base / "no_such_lake"}


# ---------------------------------------------------------------- running the notebooks

RUNNER = r"""
import contextlib, io, json, os, runpy, sys, time, traceback

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

jobs = json.loads(sys.argv[1])
results = {}
spark = None


class Widgets:
    def __init__(self, preset):
        self.preset, self.defined = dict(preset), {}

    def text(self, name, default, label=None):
        self.defined[name] = default

    def dropdown(self, name, default, choices, label=None):
        assert default in choices, (name, default, choices)
        self.defined[name] = default

    def get(self, name):
        return self.preset.get(name, self.defined[name])


class DbUtils:
    def __init__(self, preset):
        self.widgets = Widgets(preset)


for job in jobs:
    os.environ["QUEUELAKE_LAKE_ROOT"] = job["lake_root"]
    os.environ["QUEUELAKE_NOTEBOOK_OUTPUT"] = job["output"]
    for name in ("QUEUELAKE_AUDIT_QUEUE", "QUEUELAKE_ERROR_QUEUE"):
        os.environ.pop(name, None)
    os.environ.update(job.get("env", {}))
    init = {}
    displayed = []
    if job.get("widgets") is not None:  # as on Databricks: dbutils, spark and display predefined
        if spark is None:
            from queuelake.spark import get_spark
            spark = get_spark()
        dbutils = DbUtils(job["widgets"])
        init = {"dbutils": dbutils, "spark": spark, "display": displayed.append}
    out = io.StringIO()
    result = {"ok": True}
    started = time.monotonic()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(job["notebook"], init_globals=init, run_name="__main__")
    except BaseException:
        result = {"ok": False, "error": traceback.format_exc()}
    plt.close("all")
    result["stdout"] = out.getvalue()
    result["displayed"] = len(displayed)
    result["seconds"] = round(time.monotonic() - started, 1)
    if init:
        result["widgets"] = sorted(init["dbutils"].widgets.defined)
    results[job["key"]] = result
    print(f"{job['key']}: {'ok' if result['ok'] else 'FAILED'} in {result['seconds']} s", file=sys.stderr, flush=True)

with open(sys.argv[2], "w") as f:
    json.dump(results, f)
sys.exit(0 if all(r["ok"] for r in results.values()) else 1)
"""


@pytest.fixture(scope="module")
def runs(lakes: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every (scenario, notebook) run in one subprocess; results keyed ``scenario/notebook``."""
    out = tmp_path_factory.mktemp("notebook_output")
    jobs = []
    for scenario in ("full", "business_only", "missing"):
        for name in NAMES:
            jobs.append(
                {
                    "key": f"{scenario}/{name}",
                    "notebook": str(NOTEBOOKS / f"{name}.py"),
                    "lake_root": str(lakes[scenario]),
                    "output": str(out / scenario / name),
                }
            )
    # As on Databricks: the environment points nowhere, the widgets name the lake and the error queue.
    jobs.append(
        {
            "key": "databricks/error_queue",
            "notebook": str(NOTEBOOKS / "error_queue.py"),
            "lake_root": str(lakes["missing"]),
            "output": str(out / "databricks" / "error_queue"),
            "widgets": {"lake_root": str(lakes["full"]), "error_queue": "error"},
        }
    )
    # The audit queue named through the environment, in its canonical PostgreSQL form.
    jobs.append(
        {
            "key": "named_queue/audit_processing",
            "notebook": str(NOTEBOOKS / "audit_processing.py"),
            "lake_root": str(lakes["full"]),
            "output": str(out / "named_queue" / "audit_processing"),
            "env": {"QUEUELAKE_AUDIT_QUEUE": '"public"."audit"'},
        }
    )
    results_file = out / "results.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for var in ("QUEUELAKE_BUCKET", "QUEUELAKE_ERROR_QUEUE", "QUEUELAKE_AUDIT_QUEUE"):
        env.pop(var, None)
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(jobs), str(results_file)],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert results_file.exists(), f"runner died (exit {proc.returncode}):\n{proc.stderr[-5000:]}"
    results = json.loads(results_file.read_text())
    failed = {k: r["error"] for k, r in results.items() if not r["ok"]}
    assert not failed, "\n\n".join(f"{k}:\n{e}" for k, e in failed.items())
    assert proc.returncode == 0, proc.stderr[-5000:]
    for job in jobs:
        results[job["key"]]["output"] = Path(job["output"])
    return results


def _plots(folder: Path) -> dict[str, int]:
    return {p.stem: p.stat().st_size for p in folder.glob("*.png")} if folder.exists() else {}


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_databricks_source_format(name: str) -> None:
    lines = (NOTEBOOKS / f"{name}.py").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "# Databricks notebook source"
    cells = "\n".join(lines[1:]).split("\n# COMMAND ----------\n")
    assert len(cells) >= 4
    markdown = [c.strip() for c in cells if c.strip().startswith("# MAGIC %md")]
    assert markdown, "no markdown cells"
    for cell in markdown:
        assert all(line == "# MAGIC" or line.startswith("# MAGIC ") for line in cell.splitlines()), cell
    text = "\n".join(lines)
    # The widgets are made by the shared support module, with the dbutils the notebook hands it.
    support = Path(notebook_support.__file__).read_text(encoding="utf-8")
    assert 'dbutils=globals().get("dbutils")' in text and "from queuelake.notebook_support import" in text
    assert "dbutils.widgets.text(name, value)" in support and 'param("lake_root", "./lake")' in text
    assert "QUEUELAKE_NOTEBOOK_OUTPUT" in text and "open_lake(LakeConfig(root=LAKE_ROOT" in text


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_draws_its_plots(runs: dict[str, dict[str, Any]], name: str) -> None:
    result = runs[f"full/{name}"]
    plots = _plots(result["output"])
    assert set(plots) == EXPECTED_PLOTS[name], result["stdout"]
    assert all(size > 5000 for size in plots.values()), plots  # a real picture, not an empty canvas
    assert "note:" not in result["stdout"], result["stdout"]


@pytest.mark.slow
def test_notebook_tables_show_the_data(runs: dict[str, dict[str, Any]]) -> None:
    overview = runs["full/journal_overview"]["stdout"]
    for text in ("public.Sales", "public.error", "lag time_sent -> drained_at", "headers are not valid JSON"):
        assert text in overview
    assert "connection reset by peer" in overview  # the failed run is listed
    errors = runs["full/error_queue"]["stdout"]
    for text in ("System.TimeoutException", "Card declined: no funds", "Microsoft.Data.SqlClient.SqlException"):
        assert text in errors
    assert re.search(r"public\.error\s+66\s", errors), errors  # every failed message counted once
    audit = runs["full/audit_processing"]["stdout"]
    for text in ("Shop.Messages.OrderBilled", "critical_p90_ms", "Shipping"):
        assert text in audit
    assert "System.TimeoutException" not in audit  # error-queue rows are not audit rows


@pytest.mark.slow
def test_notebooks_without_audit_or_error_rows(runs: dict[str, dict[str, Any]]) -> None:
    overview = runs["business_only/journal_overview"]
    assert set(_plots(overview["output"])) == {"throughput", "lag"}
    assert "note: no expired or quarantined rows" in overview["stdout"]
    assert "note: lake table 'runs' is empty" in overview["stdout"]
    errors = runs["business_only/error_queue"]
    assert not _plots(errors["output"]) and "note: no failed messages" in errors["stdout"]
    audit = runs["business_only/audit_processing"]
    assert not _plots(audit["output"]) and "note: no audited messages" in audit["stdout"]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebooks_on_a_lake_without_tables(runs: dict[str, dict[str, Any]], name: str) -> None:
    result = runs[f"missing/{name}"]
    assert not _plots(result["output"])
    assert "note: no lake table 'messages'" in result["stdout"]


@pytest.mark.slow
def test_notebook_as_on_databricks(runs: dict[str, dict[str, Any]]) -> None:
    """Widgets win over the environment; ``spark`` and ``display`` come predefined."""
    result = runs["databricks/error_queue"]
    assert result["widgets"] == ["bucket", "error_queue", "lake_root"]
    assert set(_plots(result["output"])) == EXPECTED_PLOTS["error_queue"]
    assert result["displayed"] >= 3  # tables went to display(), not print


@pytest.mark.slow
def test_notebook_with_a_named_queue(runs: dict[str, dict[str, Any]]) -> None:
    result = runs["named_queue/audit_processing"]
    assert set(_plots(result["output"])) == EXPECTED_PLOTS["audit_processing"]
    assert "public.audit" in result["stdout"] and "note:" not in result["stdout"]
