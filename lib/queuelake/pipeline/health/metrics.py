"""The current gauges as OpenMetrics text (the Prometheus exposition format), for a textfile collector
or a push: the latest hour's figures per endpoint and message type, the latest day's throughput per
endpoint, and each queue's depth as its latest drain left it.

Why text written here and not by ``prometheus_client``: it is a test dependency only; the format is
small. The output parses with both of its parsers (Prometheus text 0.0.4 and OpenMetrics 1.0): gauges
only, no sample timestamps (their units differ between the two), ``# UNIT`` for the ones in seconds
(whose names end in ``_seconds``), and ``# EOF`` last. Label values are escaped as both require
(backslash, double quote, line feed), so any endpoint or queue name is safe; metric and label names are
fixed here and checked against the name grammar.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable

import pyarrow as pa

from queuelake.pipeline.health.compute import QUANTILES

PREFIX = "queuelake_"
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

Sample = tuple[dict[str, str], float]


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(float(value))


class Exposition:
    """Gauge families in the order added, rendered as one text."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._names: set[str] = set()

    def gauge(self, name: str, help_text: str, samples: Iterable[Sample], unit: str | None = None) -> None:
        full = PREFIX + name
        if not _NAME.fullmatch(full) or full in self._names:
            raise ValueError(f"metric name {full!r} is not valid or repeats")
        if unit is not None and not full.endswith("_" + unit):
            raise ValueError(f"metric {full} must end with its unit {unit}")
        self._names.add(full)
        self._lines.append(f"# HELP {full} {_escape_help(help_text)}")
        self._lines.append(f"# TYPE {full} gauge")
        if unit is not None:
            self._lines.append(f"# UNIT {full} {unit}")
        for labels, value in samples:
            self._lines.append(f"{full}{_labels(labels)} {_number(value)}")

    def text(self) -> str:
        return "\n".join([*self._lines, "# EOF"]) + "\n"


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    for key in labels:
        if not _LABEL.fullmatch(key) or key.startswith("__"):
            raise ValueError(f"label name {key!r} is not valid")
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items()) + "}"


def _seconds(when: dt.datetime) -> float:
    return when.timestamp()


def render(hours: pa.Table, daily: pa.Table, depth: pa.Table) -> str:
    """The exposition of ``run.read_latest``'s rows and ``depth.current_depth``."""
    out = Exposition()
    hour_rows = hours.to_pylist()
    day_rows = daily.to_pylist()
    start: list[Sample] = [({}, _seconds(hour_rows[0]["period_start"]))] if hour_rows else []
    out.gauge(
        "health_hour_start_timestamp_seconds",
        "Start (UTC) of the latest hour endpoint_health holds: the hour the queuelake_endpoint_* gauges describe",
        start,
        unit="seconds",
    )

    def by_type(row: dict) -> dict[str, str]:
        return {"endpoint": row["endpoint"], "message_type": row["message_type"]}

    for column, name, text in (
        ("processed", "endpoint_processed_messages", "Messages processed (audit copies) in the latest hour"),
        ("failed", "endpoint_failed_messages", "Failed messages (error-queue copies) in the latest hour"),
        ("retries", "endpoint_retried_messages", "Copies of retried or replayed messages in the latest hour"),
    ):
        out.gauge(name, text, [(by_type(r), float(r[column])) for r in hour_rows])
    for kind, text in (
        ("processing", "Processing time (ProcessingEnded - ProcessingStarted) in the latest hour, by quantile"),
        ("critical", "Critical time (ProcessingEnded - TimeSent) in the latest hour, by quantile"),
    ):
        samples = [
            ({**by_type(r), "quantile": str(q / 100)}, r[f"{kind}_p{q}_ms"] / 1000.0)
            for r in hour_rows
            for q in QUANTILES
            if r[f"{kind}_p{q}_ms"] is not None
        ]
        out.gauge(f"endpoint_{kind}_time_seconds", text, samples, unit="seconds")
    day: list[Sample] = (
        [({}, _seconds(dt.datetime.combine(day_rows[0]["day"], dt.time(), dt.timezone.utc)))] if day_rows else []
    )
    out.gauge(
        "health_day_start_timestamp_seconds",
        "Start (UTC) of the latest day endpoint_daily holds: the day the queuelake_endpoint_daily_* gauges describe",
        day,
        unit="seconds",
    )
    for column, name, text in (
        ("processed", "endpoint_daily_processed_messages", "Messages processed per endpoint in the latest day"),
        ("failed", "endpoint_daily_failed_messages", "Failed messages per endpoint in the latest day"),
    ):
        out.gauge(name, text, [({"endpoint": r["endpoint"]}, float(r[column])) for r in day_rows])
    depth_rows = depth.to_pylist()
    out.gauge(
        "queue_depth_messages",
        "Rows left in the queue table by its latest drain (the drain's own estimate; no count(*))",
        [({"queue": r["queue"]}, float(r["depth"])) for r in depth_rows],
    )
    out.gauge(
        "queue_depth_measured_timestamp_seconds",
        "When the latest drain of the queue ended (when queuelake_queue_depth_messages was measured)",
        [({"queue": r["queue"]}, _seconds(r["at"])) for r in depth_rows],
        unit="seconds",
    )
    return out.text()
