"""The notebooks in ``notebooks/`` run end to end on small lakes and draw plots worth opening.

Lakes are written with deltalake directly (the journal schemas, realistic business, audit and error rows,
expired and quarantined ones, a runs table). One subprocess (one local Spark) then executes every notebook
file as plain Python (``# MAGIC`` lines are comments) in several scenarios: three hours of traffic drained
every 5 minutes, a demo-like lake (everything drained at once, within seconds), a day of traffic, a lake with
no audit or error rows and an empty ``runs`` table, a lake root with no tables at all, once as on Databricks
(a stand-in ``dbutils`` whose widgets name the lake, a predefined ``spark`` and ``display``), and once run
as docs/notebooks.md says (no output folder named: the pictures go to ``./notebook-output``).

What was drawn is looked at, not only that a file was written: the runner describes every figure as it is
saved (per panel: lines and their points, bars and their window extents, axis scales, limits and ticks,
labels, texts, the legend and its window extent), and the tests check that every panel draws something and
does not mislead: time axes say UTC and span the data (not matplotlib's four years around one instant);
every value axis is linear and starts at 0; no panel is a lone point and a line of fewer than 3 points is
drawn as markers; count axes have whole-number ticks; durations are in the unit that fits them; the
legend's extent overlaps no bar and no plotted point; failed runs are marked, an idle run has no rate, and a
backlog a run did not measure is a gap (or says ``not measured``), not 0. The printed tables have no NaN,
None or NaT, no count written as ``2045.0``, and every time in one UTC format.

The typed body tables' notebook (``typed_bodies``) needs tables the bodies stage made, so its lakes are made
for real (``typed_lakes``), in this process by the stages the demo runs: the demo's topology and traffic
on the demo's config (delta-rs), drained and typed as ``queuelake demo`` does, then the bodies corpus
(``tests/helpers/bodies_corpus``) sent to its queue, drained and typed again. Not by running the demo: the
suite runs it twice already (``test_fresh_clone``, ``test_demo_engines``), and a third run cost this module
more than its notebooks. What it prints and draws is checked against the tables read with deltalake.

The endpoint health notebook (``endpoint_health``) reads what ``queuelake health`` writes: its lake is the
three hours' lake with ``endpoint_health`` and ``endpoint_daily`` brought up to date by the command's own
work (``pipeline.health.run.update``); its picture is checked like the others', and its throughput, depth
and daily table against the tables it read.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("matplotlib", reason="the notebooks plot with matplotlib: pip install -e '.[notebooks]'")

import matplotlib.dates as mdates  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from queuelake.commands.demo import end_to_end  # noqa: E402
from queuelake.config import LakeConfig, from_dict  # noqa: E402
from queuelake.lake.engines import open_lake  # noqa: E402
from queuelake.notebooks import runner as notebook_runner  # noqa: E402
from queuelake.nsb.times import format_time  # noqa: E402
from queuelake.pipeline.bodies.run import bodies  # noqa: E402
from queuelake.pipeline.health.run import update as update_health  # noqa: E402
from queuelake.pipeline.journal.schema import MESSAGES_SCHEMA  # noqa: E402
from queuelake.pipeline.runs import RUNS_SCHEMA  # noqa: E402

from tests.helpers import jvm_flags  # noqa: E402
from tests.helpers.bodies import send  # noqa: E402
from tests.helpers.bodies_corpus import corpus  # noqa: E402
from tests.helpers.stages import drain  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
NAMES = ["journal_overview", "error_queue", "audit_processing"]
TYPED = "typed_bodies"  # runs on lakes the demo's stages made (``typed_lakes``), not on NAMES' lakes
HEALTH = "endpoint_health"  # runs on a lake with what ``queuelake health`` writes

EXPECTED_PLOTS = {
    "journal_overview": {"throughput", "lag", "outcomes", "runs"},
    "error_queue": {"error_exception_types", "error_endpoints", "error_failures_over_time"},
    "audit_processing": {"audit_by_message_type", "audit_by_endpoint", "audit_distribution"},
    "typed_bodies": {"unparsed_reasons", "typed_query"},
    "endpoint_health": {"endpoint_health"},
}
# How many panels of each plot have a time x axis (the others: per queue, per type, histograms).
# Plots whose trend panel is left out when the data fills fewer than 3 buckets, and the note that says so.
TREND_PLOTS = {"lag": "no lag trend to draw", "audit_distribution": "no trend to draw"}
TIME_PANELS = {
    "throughput": 1,
    "lag": 1,
    "outcomes": 1,
    "runs": 2,
    "error_failures_over_time": 1,
    "audit_distribution": 1,
    "typed_query": 1,
    "endpoint_health": 3,  # throughput, critical time, queue depth
}

T0 = dt.datetime(2026, 5, 1, 9, 0, tzinfo=dt.timezone.utc)
ASSEMBLY = ", Shop.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null"


# ---------------------------------------------------------------- the lake


def _wire(ts: dt.datetime) -> str:
    """NServiceBus' wire form of a time: ``2024-05-01 13:45:10:123456 Z``."""
    return format_time(ts)


class Journal:
    """Rows of the ``messages`` table, built the way the drain would decode them. Drained every 5 minutes,
    or with ``drain_at`` all in one drain (as the demo does) that takes a few seconds."""

    def __init__(self, seed: int = 7, drain_at: dt.datetime | None = None) -> None:
        self.rng = random.Random(seed)
        self.drain_at = drain_at
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
        if self.drain_at is not None:
            return self.drain_at + dt.timedelta(seconds=self.rng.uniform(0, 3))
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


def runs_rows(
    queues: list[str],
    count: int = 6,
    every: dt.timedelta = dt.timedelta(minutes=30),
    start: dt.datetime = T0,
    failed: frozenset[tuple[int, int]] = frozenset({(3, 0)}),
    unmeasured: frozenset[tuple[int, int]] = frozenset(),
    idle: frozenset[tuple[int, int]] = frozenset(),
) -> list[dict[str, Any]]:
    """``count`` drain runs ``every`` apart over ``queues``; run i of queue q fails when (i, q) is in ``failed``,
    has no backlog (the peek after it failed) when in ``unmeasured``, and finds its queue empty (dequeues
    nothing, rate 0, backlog 0) when in ``idle``."""
    rows = []
    for i in range(count):
        started = start + every * i
        for q, queue in enumerate(queues):
            dequeued = 0 if (i, q) in idle else 100 + 37 * q + 11 * (i % 20)
            seconds = 2.0 + q * 0.4
            bad = (i, q) in failed
            rows.append(
                {
                    "run_id": str(uuid.UUID(int=i + 1)),
                    "command": "drain",
                    "queue": queue,
                    "started_at": started,
                    "ended_at": started + dt.timedelta(seconds=seconds),
                    "dequeued": 0 if bad else dequeued,
                    "landed": 0 if bad else dequeued - 2,
                    "expired": 0 if bad else 1,
                    "quarantined": 0 if bad else 1,
                    "batches": 1,
                    "seconds": seconds,
                    "rate": 0.0 if bad else dequeued / seconds,
                    "backlog_left": None if (i, q) in unmeasured else 0 if (i, q) in idle else backlog_of(i, q),
                    "status": "failed" if bad else "ok",
                    "error": "connection reset by peer" if bad else None,
                }
            )
    return rows


def backlog_of(i: int, q: int) -> int:
    """The backlog run i of queue q left (unless idle or not measured)."""
    return 100 + (83 * i + 10 * q) % 400


def runs_table(queues: list[str], count: int = 6, **kwargs: Any) -> pa.Table:
    return pa.Table.from_pylist(runs_rows(queues, count, **kwargs), schema=RUNS_SCHEMA)


QUEUES = ['"public"."Sales"', '"public"."Billing"', '"public"."audit"', '"public"."error"']
# The day of traffic: a run every 15 minutes; Sales' run 40 failed (its backlog not measured), Billing's
# backlog was not measured in runs 10 to 12, and the error queue was empty in the night (runs 8 to 20: idle).
DAY_FAILED = frozenset({(40, 0)})
DAY_UNMEASURED = frozenset({(40, 0), (10, 1), (11, 1), (12, 1)})
DAY_IDLE = frozenset((i, 3) for i in range(8, 21))
DAY_START = T0 - dt.timedelta(hours=9)
DEMO_DRAIN = T0 + dt.timedelta(minutes=2, seconds=30)


def demo_runs() -> pa.Table:
    """As the demo leaves it: one drain (Shipping's backlog not measured) and one publish row per output,
    whose ``queue`` is the output's name and must not be drawn as a queue."""
    rows = runs_rows(
        QUEUES + ['"public"."Shipping"'], 1, start=DEMO_DRAIN, failed=frozenset(), unmeasured=frozenset({(0, 4)})
    )
    rows.append({**rows[0], "command": "publish", "queue": "outbound_customer_totals", "dequeued": None})
    rows[-1].update(published=40, fanned_out=80, rate=20.0, backlog_left=None, landed=None)
    return pa.Table.from_pylist(rows, schema=RUNS_SCHEMA)


FIRST_INSTANT = dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc)  # .NET's DateTime.MinValue
LAST_INSTANT = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc)  # DateTime.MaxValue
EDGE_FAILURES = 66 + 2  # audit_and_error_traffic's, and the two below


def edge_times_journal() -> Journal:
    """Three hours of traffic, and headers that senders wrote at the ends of .NET's calendar: a time sent
    in year 1 and one at DateTime.MaxValue, a processing end at MaxValue, failures at both ends. Rows
    without those headers (expired, quarantined, business) hold nulls beside them."""
    journal = Journal(seed=13)
    business_traffic(journal)
    audit_and_error_traffic(journal)
    for when in (FIRST_INSTANT, LAST_INSTANT):
        journal.landed('"public"."Sales"', "Shop.Messages.PlaceOrder", T0, "WebShop", time_sent=when)
        journal.landed(
            '"public"."error"',
            "Shop.Messages.OrderPlaced",
            T0,
            "WebShop",
            processing_started=T0,
            processing_ended=T0 + dt.timedelta(seconds=1),
            processing_endpoint="Billing",
            failed_queue="Billing",
            exception_type="System.ArgumentOutOfRangeException",
            exception_message="the clock of the sender",
            time_of_failure=when,
        )
    journal.landed(
        '"public"."audit"',
        "Shop.Messages.PlaceOrder",
        T0,
        "WebShop",
        processing_started=T0,
        processing_ended=LAST_INSTANT,
        processing_endpoint="Sales",
    )
    return journal


@pytest.fixture(scope="module")
def lakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("notebook_lakes")
    full = Journal()
    business_traffic(full)
    audit_and_error_traffic(full)
    write_deltalake(str(base / "full" / "messages"), full.table())
    write_deltalake(str(base / "full" / "runs"), runs_table(QUEUES))

    demo = Journal(seed=5, drain_at=DEMO_DRAIN)  # seeded over two minutes, drained in one go
    business_traffic(demo, hours=2 / 60)
    audit_and_error_traffic(demo, hours=2 / 60)
    write_deltalake(str(base / "demo" / "messages"), demo.table())
    write_deltalake(str(base / "demo" / "runs"), demo_runs())
    # the demo, then the drain its "Next, try" prints: a second, idle run of every queue
    write_deltalake(str(base / "demo_twice" / "messages"), demo.table())
    everything_empty = frozenset((0, q) for q in range(len(QUEUES)))
    idle_drain = runs_rows(QUEUES, 1, start=DEMO_DRAIN + dt.timedelta(minutes=3), idle=everything_empty)
    twice = demo_runs().to_pylist() + [{**r, "run_id": str(uuid.UUID(int=99))} for r in idle_drain]
    write_deltalake(str(base / "demo_twice" / "runs"), pa.Table.from_pylist(twice, schema=RUNS_SCHEMA))

    day = Journal(seed=3)
    business_traffic(day, hours=24)
    audit_and_error_traffic(day, hours=24)
    write_deltalake(str(base / "day" / "messages"), day.table())
    day_runs = runs_table(
        QUEUES,
        96,
        every=dt.timedelta(minutes=15),
        start=DAY_START,
        failed=DAY_FAILED,
        unmeasured=DAY_UNMEASURED,
        idle=DAY_IDLE,
    )
    write_deltalake(str(base / "day" / "runs"), day_runs)

    write_deltalake(str(base / "edges" / "messages"), edge_times_journal().table())
    write_deltalake(str(base / "edges" / "runs"), runs_table(QUEUES))

    business = Journal(seed=11)
    for i in range(50):
        business.landed('"public"."Sales"', "Shop.Messages.PlaceOrder", T0 + dt.timedelta(minutes=i), "WebShop")
    write_deltalake(str(base / "business_only" / "messages"), business.table())
    write_deltalake(str(base / "business_only" / "runs"), RUNS_SCHEMA.empty_table())

    # as `queuelake health` leaves it: the three hours' lake, endpoint_health and endpoint_daily brought up to date
    shutil.copytree(base / "full", base / "health")
    counted = update_health(open_lake(LakeConfig(root=str(base / "health"), engine="delta-rs")))
    assert counted.hourly_rows > 0 and counted.daily_rows > 0, counted.summary()
    return {
        "full": base / "full",
        "demo": base / "demo",
        "demo_twice": base / "demo_twice",
        "day": base / "day",
        "business_only": base / "business_only",
        "edges": base / "edges",
        "health": base / "health",
        "missing": base / "no_such_lake",
    }


# ---------------------------------------------------------------- running the notebooks

RUNNER = r"""
import contextlib, io, json, math, os, runpy, sys, time, traceback
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.colors as mcolors
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

jobs = json.loads(sys.argv[1])
results = {}
spark = None
figures = {}  # png name -> what the figure showed when it was saved


def numbers(values):
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        array = np.asarray(mdates.date2num(values), dtype=float)
    return [None if not math.isfinite(v) else float(v) for v in np.atleast_1d(array)]


def box(extent):
    return [float(extent.x0), float(extent.y0), float(extent.x1), float(extent.y1)]


def visible_ticks(ticks, limits):
    low, high = sorted(limits)
    return [float(t) for t in ticks if low - 1e-9 <= t <= high + 1e-9]


def describe(fig):
    renderer = fig.canvas.get_renderer()
    panels = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        siblings = ax.get_shared_x_axes().get_siblings(ax)
        legend = ax.get_legend()
        lines = []
        points = []  # where the data was drawn, in display coordinates (pixels), for the legend's overlap
        for line in ax.get_lines():
            x, y = numbers(line.get_xdata()), numbers(line.get_ydata())
            lines.append({
                "label": line.get_label(),
                "x": x,
                "y": y,
                "marker": str(line.get_marker()),
                "linestyle": str(line.get_linestyle()),
                "color": mcolors.to_hex(line.get_color()),
            })
            finite = [(a, b) for a, b in zip(x, y) if a is not None and b is not None]
            if finite:
                points += [[float(u), float(v)] for u, v in line.get_transform().transform(finite)]
        bars = []
        for container in ax.containers:
            for r in container:
                if isinstance(r, Rectangle) and r.get_width() != 0 and r.get_height() != 0:
                    bars.append({
                        "label": container.get_label(),
                        "orientation": getattr(container, "orientation", "vertical"),
                        "x": float(r.get_x()),
                        "y": float(r.get_y()),
                        "width": float(r.get_width()),
                        "height": float(r.get_height()),
                        "box": box(r.get_window_extent(renderer)),
                    })
        panels.append({
            "title": ax.get_title(),
            "xlabel": ax.get_xlabel(),
            "ylabel": ax.get_ylabel(),
            "time_axis": isinstance(ax.xaxis.get_major_locator(), mdates.DateLocator),
            "utc_label": any("UTC" in a.get_xlabel() for a in siblings),
            "xlim": [float(v) for v in ax.get_xlim()],
            "ylim": [float(v) for v in ax.get_ylim()],
            "xscale": ax.get_xscale(),
            "yscale": ax.get_yscale(),
            "xticks": visible_ticks(ax.get_xticks(), ax.get_xlim()),
            "yticks": visible_ticks(ax.get_yticks(), ax.get_ylim()),
            "lines": lines,
            "bars": bars,
            "points": points,
            "texts": [t.get_text() for t in ax.texts],
            "collections": sum(1 for c in ax.collections if len(c.get_offsets()) or len(c.get_paths())),
            "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
            "legend_box": box(legend.get_window_extent(renderer)) if legend else None,
            "title_box": box(ax.title.get_window_extent(renderer)) if ax.get_title() else None,
            "figure_box": box(fig.bbox),
        })
    return panels


original_savefig = Figure.savefig


def savefig(fig, fname, *args, **kwargs):
    original_savefig(fig, fname, *args, **kwargs)
    figures[Path(fname).stem] = describe(fig)  # after drawing: the picture as saved


Figure.savefig = savefig


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


home = os.getcwd()
for job in jobs:
    os.environ["QUEUELAKE_LAKE_ROOT"] = job["lake_root"]
    os.environ.pop("QUEUELAKE_NOTEBOOK_OUTPUT", None)
    if job["output"] is not None:
        os.environ["QUEUELAKE_NOTEBOOK_OUTPUT"] = job["output"]
    os.chdir(job.get("cwd", home))
    figures = {}
    for name in ("AUDIT_QUEUE", "ERROR_QUEUE", "MESSAGE_TYPE", "GROUP_BY", "AMOUNT"):  # set per job only
        os.environ.pop("QUEUELAKE_" + name, None)
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
    result["figures"] = figures
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


def _jobs(lakes: dict[str, Path], out: Path) -> list[dict[str, Any]]:
    """Every (scenario, notebook) run on ``lakes``; results keyed ``scenario/notebook``."""
    jobs = []
    for scenario in ("full", "demo", "day", "business_only", "edges", "missing"):
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
    jobs.append(
        {
            "key": "demo_twice/journal_overview",
            "notebook": str(NOTEBOOKS / "journal_overview.py"),
            "lake_root": str(lakes["demo_twice"]),
            "output": str(out / "demo_twice" / "journal_overview"),
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
    # The endpoint health notebook: on a lake `queuelake health` brought up to date, on a journal it has not
    # counted yet, and where there is no lake.
    for scenario in ("health", "full", "missing"):
        jobs.append(
            {
                "key": f"{scenario}/{HEALTH}",
                "notebook": str(NOTEBOOKS / f"{HEALTH}.py"),
                "lake_root": str(lakes[scenario]),
                "output": str(out / scenario / HEALTH),
            }
        )
    # Run as docs/notebooks.md says: no output folder named, from a folder of one's own.
    (out / "as_readme").mkdir()
    jobs.append(
        {
            "key": "as_readme/journal_overview",
            "notebook": str(NOTEBOOKS / "journal_overview.py"),
            "lake_root": str(lakes["demo"]),
            "output": None,
            "cwd": str(out / "as_readme"),
            "expect_output": str(out / "as_readme" / "notebook-output"),
        }
    )
    return jobs


@pytest.fixture(scope="module")
def every_run(
    lakes: dict[str, Path], typed_lakes: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    """Every notebook job of this module in one subprocess: one local Spark started, not one per fixture
    (about 20 s each in CI). The typed body tables' jobs are keyed ``typed/<key>``."""
    out = tmp_path_factory.mktemp("notebook_output")
    typed = [{**job, "key": f"typed/{job['key']}"} for job in _typed_jobs(typed_lakes, out / "typed")]
    return _run_notebooks(_jobs(lakes, out) + typed, out)


@pytest.fixture(scope="module")
def runs(every_run: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The journal notebooks' runs, keyed ``scenario/notebook``."""
    return {k: r for k, r in every_run.items() if not k.startswith("typed/")}


@pytest.fixture(scope="module")
def typed_runs(every_run: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The typed body tables' notebook's runs, keyed as ``_typed_jobs`` names them."""
    return {k.removeprefix("typed/"): r for k, r in every_run.items() if k.startswith("typed/")}


# The notebooks' parameters as environment variables: unset for every job but the ones that set them.
PARAMETERS = ["QUEUELAKE_BUCKET", "QUEUELAKE_ERROR_QUEUE", "QUEUELAKE_AUDIT_QUEUE", "QUEUELAKE_MESSAGE_TYPE"]
PARAMETERS += ["QUEUELAKE_GROUP_BY", "QUEUELAKE_AMOUNT"]


def _run_notebooks(jobs: list[dict[str, Any]], out: Path) -> dict[str, dict[str, Any]]:
    """Every job run in one subprocess (one local Spark); results keyed as the jobs are."""
    results_file = out / "results.json"
    env = jvm_flags.long_lived_env({**os.environ, "PYTHONUNBUFFERED": "1"})  # one JVM for every notebook
    for var in (*PARAMETERS, "DATABRICKS_RUNTIME_VERSION"):
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
        results[job["key"]]["output"] = Path(job.get("expect_output") or job["output"])
    return results


# ---------------------------------------------------------------- the typed body tables' notebook

DEMO_ORDERS = "Sales.Messages.Events.OrderPlaced"
DEMO_TABLE = "body_sales_messages_events_orderplaced"
DEMO_MESSAGES = 300


@pytest.fixture(scope="module")
def typed_lakes(pg_uri: str, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Lakes made for real: ``demo`` as ``queuelake demo`` leaves its typed tables (one, OrderPlaced, and every
    body parsed), and ``typed``: the same lake after more traffic (the bodies corpus: several types and
    serializers, a contract's two versions, a field that changes type, bodies that do not parse), drained and
    typed again. Made here by the stages the demo runs (its topology, its traffic, drain and bodies on its
    config, delta-rs), on this module's database and the tests' Spark: the demo itself runs twice in the suite
    already (``test_fresh_clone``, ``test_demo_engines``), and a third run in a process of its own, with its own
    database server and Spark, cost this module more than its notebooks. Transform and publish, which the demo
    runs after bodies, write no table the notebook reads."""
    base = tmp_path_factory.mktemp("typed_lakes")
    settings = end_to_end.demo_settings(base / "demo", engine="delta-rs")
    settings["transport"].update(connection=pg_uri, embedded=None)  # this module's database, not a demo server
    cfg = from_dict(settings, env={})
    end_to_end.install_topology(cfg)
    end_to_end.seed_traffic(cfg, DEMO_MESSAGES)
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["status"] == "ok"
    typed = bodies(cfg, spark, lake)
    assert typed["status"] == "ok", typed
    # what the demo's summary reports as its typed tables
    assert {t["table"]: t.get("rows_out", 0) for t in typed["tables"]} == {DEMO_TABLE: DEMO_MESSAGES}, typed
    shutil.copytree(cfg.lake.root, base / "demo_lake")  # as the demo left it
    send(cfg, "Sales", corpus.corpus())  # more traffic for the next drain
    assert drain(cfg, lake)["landed"] > 0
    typed = bodies(cfg, spark, lake)
    assert typed["unparsed"] > 0 and len(typed["tables"]) == 5, typed
    return {"demo": base / "demo_lake", "typed": Path(cfg.lake.root), "missing": base / "no_such_lake"}


def _typed_jobs(typed_lakes: dict[str, Path], out: Path) -> list[dict[str, Any]]:
    """The typed body tables' notebook on the lakes the demo and the bodies stage made."""
    notebook = str(NOTEBOOKS / f"{TYPED}.py")

    def job(key: str, lake: str, **more: Any) -> dict[str, Any]:
        return {"key": key, "notebook": notebook, "lake_root": str(typed_lakes[lake]), "output": str(out / key), **more}

    jobs = [
        job("demo", "demo"),
        job("typed", "typed"),
        job("missing", "missing"),
        # a type without the example query's columns, named by its table
        job("stock", "typed", env={"QUEUELAKE_MESSAGE_TYPE": "body_stock_contracts_stockcounted"}),
        # as on Databricks: widgets name the lake and a type (the corpus' OrderPlaced: no Currency column)
        job(
            "databricks",
            "missing",
            widgets={"lake_root": str(typed_lakes["typed"]), "message_type": "Sales.Contracts.OrderPlaced"},
        ),
    ]
    return jobs


def _read(lake: Path, table: str) -> list[dict[str, Any]]:
    return DeltaTable(str(lake / table)).to_pyarrow_table().to_pylist()


def _section(stdout: str, title: str) -> list[str]:
    """The rows of the table printed under ``title``, as printed (the header left out), up to the next
    blank line, note or saved picture. Cells are right-aligned, apart by one space or more."""
    lines = stdout.split("\n" + title + "\n", 1)[1].split("\n")
    rows = []
    for line in lines[1:]:
        if not line.strip() or line.startswith(("note:", "saved ")):
            break
        rows.append(line.strip())
    return rows


def _sums(rows: list[dict[str, Any]], *keys: str) -> dict[Any, float]:
    """``Total`` summed per the values of ``keys`` (``day``: the UTC day of ``time_sent``)."""
    sums: dict[Any, float] = {}
    for r in rows:
        key = tuple(r["time_sent"].astimezone(dt.timezone.utc).date() if k == "day" else r[k] for k in keys)
        sums[key] = sums.get(key, 0.0) + r["Total"]
    return sums


@pytest.mark.slow
def test_typed_bodies_on_the_demos_lake(typed_lakes: dict[str, Path], typed_runs: dict[str, dict[str, Any]]) -> None:
    """As the demo leaves its lake: the one typed table with its row count, OrderPlaced's schema as the
    demo's bodies make it and its latest rows, the history (created), no unparsed bodies, and the example
    query: Total per day and CustomerId, per CustomerId (EUR) and over time, the sums the table's rows give."""
    result = typed_runs["demo"]
    stdout = result["stdout"]
    _check_tables(stdout)
    [listed] = _section(stdout, "typed tables (type name -> table), rows per table")
    assert listed.split()[:5] == [DEMO_ORDERS, DEMO_TABLE, "7", str(DEMO_MESSAGES), "1.0.0.0"], listed
    schema = {
        line.split()[0]: line.split()[1:] for line in _section(stdout, f"{DEMO_TABLE}: the schema of {DEMO_ORDERS}")
    }
    assert schema["Total"] == ["double", "body"] and schema["CustomerId"] == ["string", "body"]
    assert schema["Lines"] == ["array<struct<Product:string,Quantity:bigint,UnitPrice:double>>", "body"]
    assert schema["time_sent"] == ["timestamp", "identity"] and len(schema) == 10 + 7
    rows = _read(typed_lakes["demo"], DEMO_TABLE)
    latest = sorted(rows, key=lambda r: (-r["time_sent"].timestamp(), r["message_id"]))[:5]
    shown = [line.split() for line in _section(stdout, f"{DEMO_TABLE}: the latest 5 rows (by time_sent)")]
    # message_id, time_sent (3 words), type_version, OrderId, CustomerId, Total (as written, not rounded)
    assert [(t[0], t[5], t[6], t[7]) for t in shown] == [
        (r["message_id"], r["OrderId"], r["CustomerId"], str(r["Total"]).removesuffix(".0")) for r in latest
    ]
    [change] = _section(stdout, "schema changes (oldest first, 50 at most)")
    assert change.split()[4:6] == [DEMO_TABLE, "created"], change
    assert "note: no unparsed bodies: every body the stage read parsed" in stdout
    assert "no lake table" not in stdout  # a lake without unparsed bodies is not a lake missing a table

    per_day = [line.split() for line in _section(stdout, f"{DEMO_TABLE}: Total per day (UTC) and CustomerId, "
                                                 "latest day first, 20 rows at most")]  # fmt: skip
    days = sorted(_sums(rows, "day", "CustomerId").items(), key=lambda kv: (-kv[0][0].toordinal(), -kv[1], kv[0][1]))
    assert [(t[0], t[1], t[2]) for t in per_day] == [(str(d), c, "EUR") for (d, c), _v in days[:20]]
    assert [float(t[4]) for t in per_day] == pytest.approx([v for _k, v in days[:20]], abs=0.006)

    _check_pictures(result, TYPED, {"typed_query"})
    totals = sorted(_sums(rows, "CustomerId").items(), key=lambda kv: (-kv[1], kv[0]))
    customers = _panel(result, "typed_query", "per CustomerId")
    assert customers["title"] == f"Total (EUR) per CustomerId (the 15 largest of {len(totals)})"
    assert customers["xlabel"] == "Total (EUR)" and customers["xscale"] == "linear" and customers["xlim"][0] == 0
    assert [b["width"] for b in customers["bars"]] == pytest.approx([v for _k, v in totals[:15]])
    over_time = _panel(result, "typed_query", "of time_sent")
    assert over_time["ylabel"].startswith("Total (EUR) / ") and over_time["yscale"] == "linear"
    assert sum(b["height"] for b in over_time["bars"]) == pytest.approx(sum(v for _k, v in totals))
    # the demo's orders were sent 250 ms apart: a time axis of a minute or two, not matplotlib's years
    assert DEMO_MESSAGES * 0.25 < _seconds(over_time) < 10 * 60


@pytest.mark.slow
def test_typed_bodies_after_more_traffic(typed_lakes: dict[str, Path], typed_runs: dict[str, dict[str, Any]]) -> None:
    """The demo's lake after the corpus was drained and typed: every type's table with its rows, two
    increments, the history (a field version 2 added, a field whose type changed kept as text), and the
    unparsed bodies per reason, counted as body_unparsed holds them."""
    lake = typed_lakes["typed"]
    result = typed_runs["typed"]
    stdout = result["stdout"]
    _check_tables(stdout)
    created = {r["type_name"]: r["table"] for r in _read(lake, "body_schema_changes") if r["change"] == "created"}
    assert len(created) == 6 and created[DEMO_ORDERS] == DEMO_TABLE
    listed = _section(stdout, "typed tables (type name -> table), rows per table")
    counts = {name: len(_read(lake, table)) for name, table in created.items()}
    assert {t[0]: (t[1], int(t[3])) for t in map(str.split, listed)} == {n: (created[n], counts[n]) for n in created}
    assert listed[0].startswith(DEMO_ORDERS + " ")  # the most rows first
    assert " 1.0.0.0, 2.0.0.0 " in next(line for line in listed if line.startswith("Sales.Contracts.OrderPlaced "))
    assert len(_section(stdout, "journal increments the bodies stage consumed (latest 10)")) == 2
    history = [line.split() for line in _section(stdout, "schema changes (oldest first, 50 at most)")]
    assert ["body_sales_contracts_orderplaced", "added", "DiscountCode", "2.0.0.0"] in [t[4:8] for t in history]
    assert ["body_stock_contracts_stockcounted", "conflict", "Location"] in [t[4:7] for t in history]
    kinds = {t[0]: t[1:] for t in map(str.split, _section(stdout, "schema changes per table and kind"))}
    assert kinds["body_sales_contracts_orderplaced"] == ["1", "1", "0", "0"], kinds
    assert kinds[DEMO_TABLE] == ["1", "0", "0", "0"], kinds

    unparsed = _read(lake, "body_unparsed")
    reasons: dict[str, int] = {}
    for r in unparsed:
        reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    assert reasons["malformed JSON"] == reasons["the body's bytes are not UTF-8"] == 1 and len(unparsed) == 7
    per_reason = _section(stdout, "unparsed bodies per reason")
    assert len(per_reason) == len(reasons)
    for reason, n in reasons.items():
        pattern = rf"{re.escape(reason)} +{n} +Odd\.Contracts\.Everything +public\.Sales"
        assert any(re.fullmatch(pattern, line) for line in per_reason), (reason, per_reason)
    assert len(_section(stdout, "unparsed bodies (20 at most)")) == len(unparsed)
    _check_pictures(result, TYPED)
    [panel] = result["figures"]["unparsed_reasons"]
    expected = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    assert [b["width"] for b in panel["bars"]] == [float(n) for _r, n in expected]
    assert panel["xlabel"] == "rows" and panel["xscale"] == "linear" and panel["xlim"][0] == 0


@pytest.mark.slow
def test_typed_bodies_chosen_by_parameter(typed_lakes: dict[str, Path], typed_runs: dict[str, dict[str, Any]]) -> None:
    """A type named by its table, or by its type name in a widget: that table's schema and rows; without
    the example query's columns a note says which to set; without a Currency column the sums are
    not per currency."""
    stock = typed_runs["stock"]
    assert "body_stock_contracts_stockcounted: the schema of Stock.Contracts.StockCounted" in stock["stdout"]
    assert "has no column 'CustomerId' or no numeric column 'Total': set group_by and amount" in stock["stdout"]
    _check_pictures(stock, TYPED, {"unparsed_reasons"})
    _check_tables(stock["stdout"])

    orders = typed_runs["databricks"]
    assert orders["widgets"] == ["amount", "bucket", "group_by", "lake_root", "message_type"]
    assert orders["displayed"] >= 6  # tables went to display(), not print
    _check_pictures(orders, TYPED)
    rows = _read(typed_lakes["typed"], "body_sales_contracts_orderplaced")
    totals = _sums(rows, "CustomerId")
    customers = _panel(orders, "typed_query", "per CustomerId")
    assert customers["title"] == f"Total per CustomerId (all {len(totals)})"  # no Currency column: none claimed
    assert sorted(b["width"] for b in customers["bars"]) == pytest.approx(sorted(totals.values()))


@pytest.mark.slow
def test_typed_bodies_on_a_lake_without_tables(typed_runs: dict[str, dict[str, Any]]) -> None:
    result = typed_runs["missing"]
    assert not _plots(result["output"])
    assert "note: no typed tables yet: run `queuelake bodies`" in result["stdout"]


def _plots(folder: Path) -> dict[str, int]:
    return {p.stem: p.stat().st_size for p in folder.glob("*.png")} if folder.exists() else {}


def _draws(panel: dict[str, Any]) -> bool:
    """The panel shows data: a line through more than one point, a marker on at least one, a bar with a
    height, or a non-empty collection. One point on a line without markers draws nothing."""
    for line in panel["lines"]:
        points = sum(1 for y in line["y"] if y is not None)
        if points > 1 or (points == 1 and line["marker"] not in ("None", "", " ")):
            return True
    return bool(panel["bars"]) or panel["collections"] > 0


def _seconds(panel: dict[str, Any]) -> float:
    low, high = panel["xlim"]
    return (high - low) * 86400


# Value-axis labels of counts: their ticks must be whole numbers (3 messages, never 2.5).
COUNT_LABEL = re.compile(r"^(messages|rows|failures|failed messages|messages left)( / .+)?$")
# Value-axis labels of durations, ending in their unit; the largest value must fit it (hours for hours).
DURATION_LABEL = re.compile(r"^(lag|processing time), (ms|s|min|h|days)$")
UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0, "days": 86400.0}


def _overlaps(a: list[float], b: list[float]) -> bool:
    """Two display boxes [x0, y0, x1, y1] share more than their edges."""
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


def _value_axis(panel: dict[str, Any]) -> str:
    """``x`` for horizontal bars, else ``y``."""
    return "x" if panel["bars"] and panel["bars"][0]["orientation"] == "horizontal" else "y"


def _values(panel: dict[str, Any]) -> list[float]:
    """What a panel plots on its value axis: bar ends (stacked bars their tops) and line values."""
    horizontal = _value_axis(panel) == "x"
    ends = [b["x"] + b["width"] if horizontal else b["y"] + b["height"] for b in panel["bars"]]
    return ends + [y for line in panel["lines"] for y in line["y"] if y is not None]


def _check_pictures(result: dict[str, Any], name: str, plots: set[str] | None = None) -> None:
    """Every panel of every plot draws something and reads honestly: time axes say UTC and cover what was
    drawn; value axes are linear from 0; no lone points; whole-number ticks for counts; durations in the
    unit that fits; legends cover no bar and no point. ``plots``: the plots drawn, if not all the notebook's."""
    figures = result["figures"]
    assert set(figures) == (EXPECTED_PLOTS[name] if plots is None else plots), result["stdout"]
    for plot, panels in figures.items():
        assert panels, plot
        for panel in panels:
            where = (plot, panel["title"])
            assert _draws(panel), (*where, panel)
            assert panel["title"], plot
            # The value axis: linear and from 0 (bars, counts, rates and durations alike).
            axis = _value_axis(panel)
            assert panel[f"{axis}scale"] == "linear", (*where, panel[f"{axis}scale"])
            assert panel[f"{axis}lim"][0] == 0, (*where, panel[f"{axis}lim"])
            assert all(v >= 0 for v in _values(panel)), where
            # No lone point: a line of fewer than 3 points is drawn as markers; a panel has more than one.
            for line in panel["lines"]:
                finite = [(x, y) for x, y in zip(line["x"], line["y"]) if x is not None and y is not None]
                if len({x for x, _ in finite}) <= 1 and len(finite) == 2:
                    continue  # a vertical rule (a failed run's red dashed line), not a series
                if finite and len(finite) < 3:
                    assert line["marker"] not in ("None", "", " "), (*where, line["label"])
            assert len(panel["bars"]) + len(panel["points"]) > 1 or panel["texts"], (*where, "a lone point")
            label = panel[f"{axis}label"]
            if COUNT_LABEL.match(label):
                ticks = panel[f"{axis}ticks"]
                assert len(ticks) >= 2 and all(t == int(t) for t in ticks), (*where, ticks)
            unit = DURATION_LABEL.match(label)
            if unit:
                largest = max(_values(panel)) * UNIT_SECONDS[unit.group(2)]
                units = list(UNIT_SECONDS.values())
                size = UNIT_SECONDS[unit.group(2)]
                assert size == units[0] or largest >= 2 * size, (*where, largest)
                assert size == units[-1] or largest < 2 * units[units.index(size) + 1], (*where, largest)
            # The legend covers nothing drawn, and is inside the picture.
            legend = panel["legend_box"]
            if legend is not None:
                for bar in panel["bars"]:
                    assert not _overlaps(legend, bar["box"]), (*where, "legend over a bar", bar)
                for x, y in panel["points"]:
                    assert not (legend[0] <= x <= legend[2] and legend[1] <= y <= legend[3]), (*where, "legend")
                figure = panel["figure_box"]
                assert figure[0] <= legend[0] and legend[2] <= figure[2] + 1, (*where, legend, figure)
        # Titles stay inside the picture and do not run into each other (panels side by side).
        titles = [p["title_box"] for p in panels if p["title_box"] is not None]
        for i, title in enumerate(titles):
            figure = panels[0]["figure_box"]
            assert figure[0] <= title[0] and title[2] <= figure[2] + 1, (plot, "title outside", title, figure)
            for other in titles[i + 1 :]:
                assert not _overlaps(title, other), (plot, "titles overlap", [p["title"] for p in panels])
        time_panels = [p for p in panels if p["time_axis"]]
        expected = TIME_PANELS.get(plot, 0)
        if plot in TREND_PLOTS and TREND_PLOTS[plot] in result["stdout"]:
            expected -= 1  # too few buckets for a trend: the panel is left out, and the notebook says so
        if plot == "runs" and all(" the run at " in p["title"] or " run on " in p["title"] for p in panels):
            expected = 0  # fewer than 3 runs: bars per queue, not lone points on a time axis
        assert len(time_panels) == expected, (plot, [p["title"] for p in panels])
        for panel in time_panels:
            assert panel["utc_label"], (plot, panel["title"], panel["xlabel"])
            low, high = panel["xlim"]
            xs = [x for line in panel["lines"] for x, y in zip(line["x"], line["y"]) if x is not None and y is not None]
            xs += [b["x"] for b in panel["bars"]]
            assert xs and all(low <= x <= high for x in xs), (plot, panel["title"])


TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d[^ ]*( UTC)?")


def _check_tables(stdout: str) -> None:
    """What the notebooks print: no NaN, None or NaT for a missing value, no count as ``2045.0``, and every
    time in one format, in UTC."""
    for word in ("NaN", "nan", "None", "NaT", "+00:00"):
        assert not re.search(rf"\b{re.escape(word)}(\b|$)", stdout), (word, stdout)
    assert not re.search(r"(?<![\d.])\d+\.0(?![\d.])", stdout), stdout
    for found in TIMESTAMP.finditer(stdout):
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", found.group()), found.group()


def _panel(result: dict[str, Any], plot: str, title_part: str) -> dict[str, Any]:
    [panel] = [p for p in result["figures"][plot] if title_part in p["title"]]
    return panel


def _queue_line(panel: dict[str, Any], queue: str) -> dict[str, Any]:
    [line] = [line for line in panel["lines"] if line["label"] == queue]
    return line


def _day(ts: dt.datetime) -> float:
    return float(mdates.date2num(ts))


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("name", [*NAMES, TYPED, HEALTH])
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
    # The widgets are made by the notebooks' runner (Notebook.param), with the dbutils the notebook hands it.
    support = Path(notebook_runner.__file__).read_text(encoding="utf-8")
    assert 'dbutils=globals().get("dbutils")' in text and "from queuelake.notebook_support import" in text
    assert "dbutils.widgets.text(name, value)" in support and 'param("lake_root", "./lake")' in text
    assert "QUEUELAKE_NOTEBOOK_OUTPUT" in text and "open_lake(LakeConfig(root=LAKE_ROOT" in text
    assert "notebook-output" in text  # where the pictures go when run as a script


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_draws_its_plots(runs: dict[str, dict[str, Any]], name: str) -> None:
    result = runs[f"full/{name}"]
    plots = _plots(result["output"])
    assert set(plots) == EXPECTED_PLOTS[name], result["stdout"]
    assert all(size > 5000 for size in plots.values()), plots  # a real picture, not an empty canvas
    assert "note:" not in result["stdout"], result["stdout"]
    _check_pictures(result, name)
    _check_tables(result["stdout"])


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_plots_on_a_demo_like_lake(runs: dict[str, dict[str, Any]], name: str) -> None:
    """Everything drained at once, within seconds: bucketed by seconds, time axes minutes wide (not years),
    the counts drawn as bars (one bucket still shows); the one drain run as bars per queue, a backlog it did
    not measure saying so."""
    result = runs[f"demo/{name}"]
    assert set(_plots(result["output"])) == EXPECTED_PLOTS[name]
    _check_pictures(result, name)
    _check_tables(result["stdout"])
    for plot, panels in result["figures"].items():
        for panel in panels:
            if panel["time_axis"]:
                assert 1 < _seconds(panel) < 15 * 60, (plot, panel["title"], _seconds(panel))
    if name == "journal_overview":
        throughput = _panel(result, "throughput", "drained per")
        assert "per second" in throughput["title"] and throughput["bars"], throughput["title"]
        assert _seconds(throughput) < 60  # drained within 3 seconds
        outcomes = _panel(result, "outcomes", "per second")
        assert sum(b["height"] for b in outcomes["bars"]) == 14  # 12 expired, 2 quarantined
        for label in ("public.Sales", "public.Billing", "public.audit", "public.error"):
            assert label in throughput["legend"]
        runs_panels = result["figures"]["runs"]
        assert not any(p["time_axis"] for p in runs_panels)  # one run: bars per queue, not lone points in time
        for panel in runs_panels:  # the publish row names an output, not a queue: not drawn here
            assert "outbound_customer_totals" not in str(panel), panel["title"]
            assert "failed run" not in panel["texts"]
        backlog = _panel(result, "runs", "backlog")
        assert "at 2026-05-01 09:02:30 UTC" in backlog["title"]
        # one bar per queue, Shipping's backlog not measured: said so, not a bar of 0
        assert [round(b["width"]) for b in backlog["bars"]] == [110, 100, 120, 130]  # Billing, Sales, audit, error
        assert backlog["texts"] == ["110", "100", "not measured", "120", "130"], backlog["texts"]
    if name == "error_queue":
        over_time = _panel(result, "error_failures_over_time", "failures per")
        assert sum(b["height"] for b in over_time["bars"]) == 66


def test_runs_plot_after_the_demo_and_a_second_drain(runs: dict[str, dict[str, Any]]) -> None:
    """Two runs (the demo's, then the drain its "Next, try" prints, which finds every queue empty):
    still bars, each naming its run's start; the two titles side by side do not run into each other."""
    result = runs["demo_twice/journal_overview"]
    _check_pictures(result, "journal_overview")
    rate, backlog = _panel(result, "runs", "drain rate"), _panel(result, "runs", "backlog")
    assert rate["title"] == "drain rate per run on 2026-05-01 (UTC)", rate["title"]
    assert backlog["title"] == "backlog left after each run on 2026-05-01 (UTC)", backlog["title"]
    assert rate["texts"].count("idle: queue empty") == 4 and backlog["texts"].count("0: queue empty") == 4


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_plots_on_a_day_of_traffic(runs: dict[str, dict[str, Any]], name: str) -> None:
    """A day: hour buckets (24 of them, not 96 quarter hours of 0s and 1s) drawn as bars, time axes a day
    wide."""
    result = runs[f"day/{name}"]
    assert set(_plots(result["output"])) == EXPECTED_PLOTS[name]
    _check_pictures(result, name)
    _check_tables(result["stdout"])
    for plot, panels in result["figures"].items():
        for panel in panels:
            if panel["time_axis"]:
                assert 20 * 3600 < _seconds(panel) < 30 * 3600, (plot, panel["title"], _seconds(panel) / 3600)
    if name == "journal_overview":
        throughput = _panel(result, "throughput", "drained per")
        assert "per hour" in throughput["title"]
        sales = [b for b in throughput["bars"] if b["label"] == "public.Sales"]
        assert 20 <= len(sales) <= 26  # the hours with Sales rows
        assert sum(b["height"] for b in sales) == 240 + 12  # landed and expired rows
        outcomes = _panel(result, "outcomes", "per hour")
        assert sum(b["height"] for b in outcomes["bars"] if b["label"] == "expired") == 12
        assert outcomes["xlim"] == throughput["xlim"]  # over the whole day, like throughput
        lag = _panel(result, "lag", "percentiles")
        assert lag["ylabel"] == "lag, min"  # lags of up to 5 minutes, in minutes
    if name == "error_queue":
        over_time = _panel(result, "error_failures_over_time", "failures per")
        assert "per hour" in over_time["title"] and sum(b["height"] for b in over_time["bars"]) == 66


@pytest.mark.slow
def test_runs_plot_marks_failed_runs_and_leaves_missing_backlog_out(runs: dict[str, dict[str, Any]]) -> None:
    result = runs["day/journal_overview"]
    failed_at = _day(DAY_START + dt.timedelta(minutes=15 * 40))
    rate = _panel(result, "runs", "drain rate")
    backlog = _panel(result, "runs", "backlog")
    for panel in (rate, backlog):
        assert "failed run" in panel["legend"]
        marks = [line for line in panel["lines"] if line["label"] == "failed run"]
        assert len(marks) == 1 and marks[0]["color"] == "#d62728", marks  # tab:red
        assert marks[0]["x"] == pytest.approx([failed_at, failed_at])
        # the queues' own lines are not red, so the failure stands out
        assert all(line["color"] != "#d62728" for line in panel["lines"] if line["label"].startswith("public."))
    [cross] = [line for line in rate["lines"] if line["marker"] == "X"]
    assert cross["x"] == pytest.approx([failed_at]) and cross["y"] == [0.0] and cross["linestyle"] == "None"
    starts = [_day(DAY_START + dt.timedelta(minutes=15 * i)) for i in range(96)]
    for q, queue in enumerate(["public.Sales", "public.Billing", "public.audit", "public.error"]):
        line = _queue_line(backlog, queue)
        assert line["x"] == pytest.approx(starts)
        for i, y in enumerate(line["y"]):
            if (i, q) in DAY_UNMEASURED:
                assert y is None, (queue, i, y)  # a gap, not 0
            else:
                assert y == (0 if (i, q) in DAY_IDLE else backlog_of(i, q)), (queue, i, y)
        # a run that drained nothing (idle, or failed) has no rate: a gap in the line, not a collapse to 0
        rates = _queue_line(rate, queue)["y"]
        assert [i for i, y in enumerate(rates) if y is None] == sorted(
            i for i in range(96) if (i, q) in DAY_IDLE | DAY_FAILED
        ), queue
        assert all(y is None or y > 0 for y in rates), queue
    [idle] = [line for line in rate["lines"] if line["label"] == "idle run (queue empty)"]
    assert idle["x"] == pytest.approx([starts[i] for i, _q in sorted(DAY_IDLE)]) and idle["linestyle"] == "None"
    full = runs["full/journal_overview"]
    assert "failed run" in _panel(full, "runs", "drain rate")["legend"]


@pytest.mark.slow
def test_notebook_run_as_the_readme_says(runs: dict[str, dict[str, Any]]) -> None:
    """No output folder named, not on Databricks nor in Jupyter: the pictures go to ./notebook-output,
    and the notebook says where."""
    result = runs["as_readme/journal_overview"]
    folder = result["output"]
    assert folder.name == "notebook-output" and set(_plots(folder)) == EXPECTED_PLOTS["journal_overview"]
    assert f"plots: saved as PNG files under {folder}" in result["stdout"], result["stdout"]
    for name in EXPECTED_PLOTS["journal_overview"]:
        assert f"saved {folder / name}.png" in result["stdout"]


@pytest.mark.slow
def test_notebook_tables_show_the_data(runs: dict[str, dict[str, Any]]) -> None:
    for result in runs.values():  # every table of every scenario: no NaN, integer counts, UTC times
        _check_tables(result["stdout"])
    overview = runs["full/journal_overview"]["stdout"]
    for text in ("public.Sales", "public.error", "lag time_sent -> drained_at", "headers are not valid JSON"):
        assert text in overview
    assert "connection reset by peer" in overview  # the failed run is listed
    errors = runs["full/error_queue"]["stdout"]
    for text in ("System.TimeoutException", "Card declined: no funds", "Microsoft.Data.SqlClient.SqlException"):
        assert text in errors
    assert re.search(r"public\.error\s+66\s", errors), errors  # every failed message counted once
    # the retry command it prints is one shell word per argument (a header's quote broke it: a review)
    [shell] = [line.split("from a shell: ", 1)[1] for line in errors.splitlines() if "from a shell: " in line]
    argv = shlex.split(shell.split("   (then")[0])
    assert argv[argv.index("--where") + 1].startswith("exception_type = '") and argv[-1] == "--dry-run", argv
    audit = runs["full/audit_processing"]["stdout"]
    for text in ("Shop.Messages.OrderBilled", "critical_p90_", "Shipping"):
        assert text in audit
    assert "System.TimeoutException" not in audit  # error-queue rows are not audit rows


@pytest.mark.slow
def test_times_at_the_ends_of_the_calendar(runs: dict[str, dict[str, Any]]) -> None:
    """Times a sender wrote at the ends of .NET's calendar (year 1, DateTime.MaxValue) beside nulls: every
    notebook runs and saves its plots, tables print those times as they are (MaxValue came out as year
    10000 through a float and failed the table; year 1 printed as ``1-01-01``), and the pictures and
    statistics over time leave those rows out, saying how many: before, the failures of three hours were
    drawn over ten thousand years (matplotlib failed to save it), and a year-1 TimeSent put every lag in days."""
    for name in NAMES:
        result = runs[f"edges/{name}"]
        assert set(_plots(result["output"])) == EXPECTED_PLOTS[name], name
        _check_tables(result["stdout"])
        assert "10000-" not in result["stdout"] and " 1-01-01" not in result["stdout"], name
    errors = runs["edges/error_queue"]
    summary = _section(errors["stdout"], "failed messages per error queue")
    assert len(summary) == 1 and summary[0].split()[:2] == ["public.error", str(EDGE_FAILURES)], summary
    assert "0001-01-01 00:00:00 UTC" in summary[0] and "9999-12-31 23:59:59 UTC" in summary[0], summary
    notes = {
        "error_queue": "note: 2 failure(s) with a TimeOfFailure before 1970 or after their drain left out here",
        "journal_overview": "note: 2 row(s) with a TimeSent before 1970 or after their drain left out here",
        "audit_processing": "note: 1 audited row(s) with a ProcessingStarted, ProcessingEnded or TimeSent before",
    }
    for name, note in notes.items():
        assert note in runs[f"edges/{name}"]["stdout"], name
    three_hours = (mdates.date2num(T0), mdates.date2num(T0 + dt.timedelta(hours=3, minutes=10)))
    for name in NAMES:
        for plot in runs[f"edges/{name}"]["figures"].values():
            for panel in (p for p in plot if p["time_axis"]):
                low, high = panel["xlim"]
                assert three_hours[0] - 0.01 <= low < high <= three_hours[1] + 0.01, (name, panel["title"])
    [panel] = runs["edges/error_queue"]["figures"]["error_failures_over_time"]
    drawn = sum(sum(y for y in line["y"] if y) for line in panel["lines"]) + sum(b["height"] for b in panel["bars"])
    assert drawn == EDGE_FAILURES - 2, panel["title"]  # every failure with a plausible time, once
    overview = runs["edges/journal_overview"]["stdout"]
    assert "lag time_sent -> drained_at (days)" not in overview and "lag time_sent -> drained_at (" in overview


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
def test_endpoint_health_draws_what_health_wrote(lakes: dict[str, Path], runs: dict[str, dict[str, Any]]) -> None:
    """On the lake ``queuelake health`` brought up to date: one picture (throughput and p95 critical time per
    endpoint and hour, each queue's depth at every drain) that reads honestly like the others, every audit copy
    drawn once, critical time only where an hour measured it, the depth each drain's ``runs`` row gives (rows
    taken + rows left), and the daily table with the day's processed and failed copies per endpoint."""
    result = runs[f"health/{HEALTH}"]
    plots = _plots(result["output"])
    assert set(plots) == EXPECTED_PLOTS[HEALTH], result["stdout"]
    assert all(size > 5000 for size in plots.values()), plots  # a real picture, not an empty canvas
    assert "note:" not in result["stdout"], result["stdout"]
    _check_pictures(result, HEALTH)
    _check_tables(result["stdout"])
    hours = [r for r in _read(lakes["health"], HEALTH) if r["period"] == "hour"]
    endpoints = {"Sales", "Billing", "Shipping"}  # audit_and_error_traffic's processing endpoints
    throughput = _panel(result, HEALTH, "messages processed per hour")
    assert set(throughput["legend"]) == endpoints, throughput["legend"]
    drawn = {e: int(sum(y for y in _queue_line(throughput, e)["y"] if y)) for e in endpoints}
    assert sum(drawn.values()) == 300, drawn  # every audit copy, once
    assert drawn == {e: sum(r["processed"] for r in hours if r["endpoint"] == e) for e in endpoints}
    critical = _panel(result, HEALTH, "critical time")
    assert critical["ylabel"] in ("p95 critical time (ms)", "p95 critical time (s)"), critical["ylabel"]
    for endpoint in endpoints:  # a point per hour that measured one: a gap elsewhere, never 0
        measured = {r["period_start"] for r in hours if r["endpoint"] == endpoint and r["critical_p95_ms"] is not None}
        assert sum(1 for y in _queue_line(critical, endpoint)["y"] if y is not None) == len(measured), endpoint
    depth = _panel(result, HEALTH, "queue depth when each drain started")
    for q, queue in enumerate(QUEUES):  # runs_table(QUEUES): 6 drains, Sales' 4th failed (took nothing)
        taken = [0 if (i, q) == (3, 0) else 100 + 37 * q + 11 * i for i in range(6)]
        assert _queue_line(depth, queue)["y"] == [t + backlog_of(i, q) for i, t in enumerate(taken)], queue
    daily = {t[1]: t[2:4] for t in map(str.split, _section(result["stdout"], "daily throughput per endpoint"))}
    failed = {"Billing": 48, "Shipping": 12, "Sales": 6}  # audit_and_error_traffic's 66: 8, 2 and 1 of every 11
    assert daily == {e: [str(drawn[e]), str(failed[e])] for e in endpoints}, daily


@pytest.mark.slow
def test_endpoint_health_before_health_ran(runs: dict[str, dict[str, Any]]) -> None:
    """A journal ``queuelake health`` has not counted yet, or no lake at all: no picture, a note saying what to run."""
    for scenario in ("full", "missing"):
        result = runs[f"{scenario}/{HEALTH}"]
        assert not _plots(result["output"]), scenario
        assert "note: no endpoint_health under" in result["stdout"], result["stdout"]
        assert "run `queuelake health -c FILE` first" in result["stdout"], result["stdout"]


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
