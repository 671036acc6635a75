"""The ``runs`` table's figure: drain rate and backlog left per run and queue.

Its own module because a run is not a bucket: a run with nothing to drain has no rate (drawn as 0 it reads
as a collapse of the drain), a backlog a run did not measure is a gap or says so, runs that did not end
``ok`` are marked, and fewer than ``LEAST_TREND_BUCKETS`` runs (the demo drains once) are bars per queue
instead of a time axis around one instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from queuelake.notebooks.axes import legend_outside, value_axis
from queuelake.notebooks.tables import utc_text
from queuelake.notebooks.time_charts import LEAST_TREND_BUCKETS, date_numbers, time_axis

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# A run that did not end ``ok`` is drawn on top of its queue's line; failed ones also get a red dashed line
# across the panel, so that they show where the value itself is missing.
# The queues' lines take colours none of these markers use, red least of all.
QUEUE_COLOURS = ["tab:blue", "tab:green", "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]
NOT_OK_STYLES: dict[str, dict[str, Any]] = {
    "failed": {"marker": "X", "color": "tab:red", "markersize": 11},
    "incomplete": {"marker": "^", "color": "tab:orange", "markersize": 9},
    "interrupted": {"marker": "v", "color": "tab:purple", "markersize": 9},
}
RATE_LABEL = "messages/s"
BACKLOG_LABEL = "messages left"


def idle_runs(pdf: pd.DataFrame) -> pd.Series:
    """Runs that ended ``ok`` having dequeued nothing: the queue was empty. Their rate (0) is not a rate:
    drawn as one it reads as a collapse of the drain."""
    if "dequeued" not in pdf.columns:
        return pd.Series(False, index=pdf.index)
    return (pdf["status"] == "ok") & (pdf["dequeued"].fillna(-1) == 0)


def runs_figure(pdf: pd.DataFrame) -> Figure:
    """Drain rate and backlog left per run and queue (``started_at`` UTC, ``queue``, ``status``, ``dequeued``,
    ``rate``, ``backlog_left``). Fewer than ``LEAST_TREND_BUCKETS`` run starts (the demo drains once) are bars
    per queue, side by side: a time axis around one instant is a column of lone points. More are lines over
    time (``per_run_lines``)."""
    import matplotlib.pyplot as plt

    starts = sorted(pdf["started_at"].unique())
    if len(starts) >= LEAST_TREND_BUCKETS:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 7), sharex=True)
        per_run_lines(top, pdf, "rate", "drain rate per run", RATE_LABEL)
        per_run_lines(bottom, pdf, "backlog_left", "backlog left after each run", BACKLOG_LABEL, counts=True)
        top.set_xlabel("")  # the axis is shared: labelled once, below
        return fig
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.5 * pdf["queue"].nunique() * len(starts) + 2.4))
    if len(starts) == 1:
        rate_title = f"drain rate of the run at {utc_text(starts[0])}"
        backlog_title = f"backlog left after the run at {utc_text(starts[0])}"
    else:  # each bar names its run's start time: the titles say the day once (two titles side by side)
        days = " and ".join(sorted({f"{pd.Timestamp(s):%Y-%m-%d}" for s in starts}))
        rate_title = f"drain rate per run on {days} (UTC)"
        backlog_title = f"backlog left after each run on {days} (UTC)"
    per_run_bars(left, pdf, "rate", rate_title, RATE_LABEL)
    per_run_bars(right, pdf, "backlog_left", backlog_title, BACKLOG_LABEL, counts=True)
    return fig


def per_run_bars(ax: Axes, pdf: pd.DataFrame, value: str, title: str, xlabel: str, counts: bool = False) -> None:
    """One horizontal bar per queue (and run) of a per-run ``value``, its number written beside it; where
    there is no value the bar's place says why (``not measured``, ``idle: queue empty``, ``failed``) rather
    than showing a bar of 0."""
    rows = pdf.sort_values(["queue", "started_at"]).reset_index(drop=True)
    idle = idle_runs(rows)
    several = rows["started_at"].nunique() > 1
    names = [f"{q} ({s:%H:%M:%S})" if several else str(q) for q, s in zip(rows["queue"], rows["started_at"])]
    values = rows[value].to_numpy(dtype=float)
    if value == "rate":
        values = np.where(idle.to_numpy() | (rows["status"] == "failed").to_numpy(), np.nan, values)
    positions = np.arange(len(rows))
    colours = ["tab:red" if s == "failed" else "tab:blue" for s in rows["status"]]
    bars = ax.barh(positions, np.nan_to_num(values), 0.6, color=colours)
    ax.set_yticks(positions, names)
    ax.invert_yaxis()
    value_axis(ax, "x", counts=counts)
    notes = []
    for v, status, is_idle in zip(values, rows["status"], idle):
        if status == "failed":
            notes.append("failed run")
        elif np.isnan(v):
            notes.append("idle: queue empty" if is_idle else "not measured")
        elif value == "backlog_left" and v == 0:  # a bar of 0 does not show: say what it means
            notes.append("0: queue empty")
        else:
            notes.append(f"{v:,.0f}")
    ax.bar_label(bars, labels=notes, fontsize="small", padding=3)
    low, high = ax.get_xlim()
    ax.set_xlim(low, high * 1.25)  # room for the notes past the longest bar
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)


def per_run_lines(ax: Axes, pdf: pd.DataFrame, value: str, title: str, ylabel: str, counts: bool = False) -> None:
    """One line per queue of a per-run ``value`` at each run's ``started_at`` (UTC). A missing value (a
    backlog the run could not measure) is a gap, never 0; an idle run (nothing dequeued) has no rate, so it
    is a gap in the rate line and a grey tick along the bottom edge (in axes coordinates: it is not a value).
    Runs whose ``status`` is not ``ok`` are marked with their own marker and legend entry; a failed run also
    by a red dashed vertical line. Measured zeros sit on the axis, drawn over it (not clipped away)."""
    idle = idle_runs(pdf)
    for i, (queue, rows) in enumerate(pdf.sort_values("started_at").groupby("queue")):
        y = rows[value].to_numpy(dtype=float)
        if value == "rate":  # an idle or failed run drained nothing: no rate, not a rate of 0
            y = np.where(idle[rows.index].to_numpy() | (rows["status"] == "failed").to_numpy(), np.nan, y)
        ax.plot(
            date_numbers(rows["started_at"]),
            y,
            marker="o",
            markersize=4,
            clip_on=False,
            color=QUEUE_COLOURS[i % len(QUEUE_COLOURS)],
            label=queue,
        )
    if value == "rate" and idle.any():
        ax.plot(
            date_numbers(pdf.loc[idle, "started_at"]),
            np.full(int(idle.sum()), 0.02),
            linestyle="none",
            marker="|",
            markersize=10,
            color="tab:gray",
            transform=ax.get_xaxis_transform(),
            label="idle run (queue empty)",
        )
    for status, style in NOT_OK_STYLES.items():
        rows = pdf[pdf["status"] == status]
        if rows.empty:
            continue
        x = date_numbers(rows["started_at"])
        label = f"{status} run"
        if status == "failed":  # the legend entry goes to the line, which shows even where the value is missing
            for i, at in enumerate(x):
                ax.axvline(at, color="tab:red", linestyle="--", alpha=0.6, label="_nolegend_" if i else label)
            label = "_nolegend_"
        ax.plot(x, rows[value].to_numpy(dtype=float), linestyle="none", zorder=5, label=label, clip_on=False, **style)
    time_axis(ax, pdf["started_at"].min(), pdf["started_at"].max(), least_margin=60)
    value_axis(ax, counts=counts)
    if value == "backlog_left" and not pdf[value].notna().any():
        ax.text(0.5, 0.5, "no run measured its backlog", transform=ax.transAxes, ha="center", color="tab:gray")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    legend_outside(ax)
