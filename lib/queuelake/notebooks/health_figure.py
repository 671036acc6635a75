"""Endpoint health drawn: per endpoint, messages processed per hour and the hour's p95 critical time,
and each queue's depth at every drain, from ``endpoint_health`` and the drain's ``runs`` rows
(``queuelake health``'s tables, ``pipeline/health``).

Why these three: throughput says how busy each endpoint is, critical time (sent to processed) says
whether it keeps up, and the queue depth before each drain says what is waiting; together they answer
"is the system healthy, and since when not". Hourly rows of all message types are summed per endpoint
(throughput); the critical time drawn is the hour's largest p95 over its message types (the slowest
type, the one an operator looks for). An hour without audit copies is a gap, never 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.notebooks.axes import legend_outside, value_axis
from queuelake.notebooks.time_charts import date_numbers, time_axis
from queuelake.notebooks.units import duration_unit

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TOP_ENDPOINTS = 8  # more lines than this do not read; the busiest are drawn, the rest named in the title


def per_endpoint_hour(health: pa.Table) -> pa.Table:
    """``endpoint_health``'s hourly rows per endpoint and hour: processed (summed over message types)
    and the largest p95 critical time (ms; null when no type measured one)."""
    hours = health.filter(pc.equal(health["period"], "hour"))
    grouped = hours.group_by(["endpoint", "period_start"]).aggregate(
        [("processed", "sum"), ("failed", "sum"), ("critical_p95_ms", "max")]
    )
    return grouped.sort_by([("endpoint", "ascending"), ("period_start", "ascending")])


def draw(health: pa.Table, depth: pa.Table | None = None) -> Figure:
    """The figure: throughput and p95 critical time per endpoint over time (hours, UTC), and with
    ``depth`` (``pipeline.health.depth.depth_over_time``) each queue's depth at its drains."""
    import matplotlib.pyplot as plt
    import pandas as pd

    data = per_endpoint_hour(health).to_pandas()
    panels = 3 if depth is not None and depth.num_rows else 2
    fig, axes = plt.subplots(panels, 1, figsize=(11, 3.2 * panels), sharex=False)
    throughput, critical = axes[0], axes[1]
    if data.empty:
        throughput.set_title("no hourly rows in endpoint_health (run queuelake health)")
        return fig
    totals = data.groupby("endpoint")["processed_sum"].sum().sort_values(ascending=False)
    shown = list(totals.index[:TOP_ENDPOINTS])
    left_out = len(totals) - len(shown)
    first, last = data["period_start"].min(), data["period_start"].max()
    unit, seconds = duration_unit(float(data["critical_p95_ms_max"].max(skipna=True) or 0) / 1000)
    every_hour = pd.date_range(first, last, freq="h")
    for endpoint in shown:
        rows = data[data["endpoint"] == endpoint].set_index("period_start").reindex(every_hour)
        x = date_numbers(rows.index)
        line = throughput.plot(x, rows["processed_sum"].fillna(0), marker="o", markersize=3, label=endpoint)[0]
        # a gap where the hour had no audit copy: critical time was not measured, it was not 0
        critical.plot(
            x,
            rows["critical_p95_ms_max"] / 1000 / seconds,
            marker="o",
            markersize=3,
            color=line.get_color(),
            label=endpoint,
        )
    more = f" (the {len(shown)} busiest of {len(totals)} endpoints)" if left_out else ""
    throughput.set_title(f"messages processed per hour{more}")
    throughput.set_ylabel("messages / hour")
    value_axis(throughput, counts=True)
    critical.set_title("critical time (sent to processed), p95 of the hour's slowest message type")
    critical.set_ylabel(f"p95 critical time ({unit})")
    value_axis(critical)
    for ax in (throughput, critical):
        time_axis(ax, first, last, bucket_seconds=3600)
        ax.grid(axis="y", alpha=0.3)
        legend_outside(ax, "endpoint")
    if panels == 3 and depth is not None:
        ax = axes[2]
        before = depth.filter(pc.equal(depth["when"], "before")).to_pandas()
        for queue, rows in before.groupby("queue"):
            ax.plot(
                date_numbers(rows["at"]), rows["depth"], marker="o", markersize=3, drawstyle="steps-post", label=queue
            )
        ax.set_title("queue depth when each drain started (rows taken + rows left; from runs, no count(*))")
        ax.set_ylabel("rows waiting")
        value_axis(ax, counts=True)
        time_axis(ax, before["at"].min(), before["at"].max())
        ax.grid(axis="y", alpha=0.3)
        legend_outside(ax, "queue")
    return fig
