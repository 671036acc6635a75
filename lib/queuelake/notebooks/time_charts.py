"""Panels over time, in UTC: a time axis over what was drawn (never matplotlib's four-year default around
a single instant), counts per bucket as stacked bars (lines past ``BAR_LIMIT`` buckets), and trends of a
per-bucket statistic, which need at least ``LEAST_TREND_BUCKETS`` buckets (else the notebooks leave the
panel out rather than draw a lone point). A value that was not measured is a gap, never 0.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from queuelake.notebooks.axes import legend_outside, value_axis
from queuelake.notebooks.frames import BUCKETS, every_bucket

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# Up to this many buckets a count is drawn as (stacked) bars, which show even a single bucket; more become lines.
BAR_LIMIT = 60
# A trend over time needs this many buckets with data; fewer is a lone point, not a trend.
LEAST_TREND_BUCKETS = 3
TIME_LABEL = "time (UTC)"
_DAY_SECONDS = 86400.0
# matplotlib names dates of the years 1 to 9999 only: limits past them failed the picture's saving
_CALENDAR = (
    float(np.datetime64("0001-01-01", "s").astype(float)) / _DAY_SECONDS,  # days since 1970, as date numbers
    float(np.datetime64("9999-12-31T23:59:59", "s").astype(float)) / _DAY_SECONDS,
)


def date_numbers(times: Any) -> Any:
    """Times (UTC-aware or naive UTC) as matplotlib date numbers (days since the epoch), as a numpy array."""
    import matplotlib.dates as mdates

    index = pd.DatetimeIndex(pd.Series(times)) if not isinstance(times, pd.DatetimeIndex) else times
    if index.tz is not None:
        index = index.tz_convert("UTC").tz_localize(None)
    return mdates.date2num(index.to_numpy())


def time_axis(
    ax: Axes, first: pd.Timestamp, last: pd.Timestamp, bucket_seconds: float = 0, least_margin: float = 1.0
) -> None:
    """A UTC time x axis over what was drawn, from ``first`` to ``last`` plus one bucket, with a margin (at
    least a bucket, or ``least_margin`` seconds): never matplotlib's four-year default around a single
    instant. Ticks and offset in UTC, labelled so."""
    import matplotlib.dates as mdates

    ax.xaxis_date(tz=dt.timezone.utc)
    start, end = date_numbers([first, last])
    end += bucket_seconds / _DAY_SECONDS
    margin = max((end - start) * 0.03, max(bucket_seconds, least_margin) / _DAY_SECONDS)
    low, high = _CALENDAR  # a time of year 1 or 9999 is drawn, the axis stays where dates have names
    ax.set_xlim(max(start - margin, low), min(end + margin, high))
    locator = mdates.AutoDateLocator(tz=dt.timezone.utc, minticks=3, maxticks=9)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(_first_tick_offset(locator))
    ax.set_xlabel(TIME_LABEL)


def _first_tick_offset(locator: Any) -> Any:
    """matplotlib's concise date labels, with the offset (the date beside the axis) of the first tick, not
    the last: an axis of the evening to midnight was titled with the next day (a review), while the
    midnight tick itself is labelled with that day."""
    import matplotlib.dates as mdates

    class FirstTickOffset(mdates.ConciseDateFormatter):
        def format_ticks(self, values: Any) -> list[str]:
            labels: list[str] = super().format_ticks(values)
            if self.offset_string and len(values) > 1:
                last, first = (mdates.num2date(v, tz=dt.timezone.utc) for v in (values[-1], values[0]))
                for fmt in self.offset_formats:  # the offset's format: the one that rendered the last tick so
                    if fmt and last.strftime(fmt) == self.offset_string:
                        self.offset_string = first.strftime(fmt)
                        break
            return labels

    return FirstTickOffset(locator, tz=dt.timezone.utc)


def counts_over_time(ax: Axes, table: pd.DataFrame, bucket: str, title: str, ylabel: str) -> None:
    """Counts per bucket (``wide``'s table: one column per series, every bucket, empty ones 0). Up to
    ``BAR_LIMIT`` buckets (always, with ``auto`` buckets) as stacked bars, one bucket wide: a single bucket
    (the demo drained in one go) is one bar, where a step line would have no length. More buckets (a bucket
    fixed by hand) as one line per series, point at each bucket's middle. Integer axis from 0, legend
    outside."""
    seconds = BUCKETS[bucket][2]
    x = date_numbers(table.index)
    width = seconds / _DAY_SECONDS
    if len(table) <= BAR_LIMIT:
        bottom = np.zeros(len(table))
        for name in table.columns:
            heights = table[name].to_numpy(dtype=float)
            ax.bar(x, heights, width * 0.85, bottom=bottom, align="edge", label=str(name))
            bottom += heights
    else:
        for name in table.columns:
            ax.plot(x + width / 2, table[name].to_numpy(dtype=float), marker=".", markersize=3, label=str(name))
    time_axis(ax, table.index.min(), table.index.max(), seconds)
    value_axis(ax, counts=True)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    legend_outside(ax)


def trend_buckets(pdf: pd.DataFrame) -> int:
    """How many buckets of a per-bucket statistic have a value: fewer than ``LEAST_TREND_BUCKETS`` is no
    trend, and the notebooks leave the panel out (and say so) instead of drawing a lone point."""
    return int(pdf["bucket"].nunique()) if len(pdf) else 0


def trend_lines(
    ax: Axes,
    pdf: pd.DataFrame,
    series: str,
    values: str,
    title: str,
    ylabel: str,
    bucket: str,
    span: tuple[pd.Timestamp, pd.Timestamp] | None = None,
    scale: float = 1.0,
) -> None:
    """One line per ``series`` of a per-bucket statistic (a percentile, divided by ``scale`` for its unit),
    with a marker per bucket. Unlike ``wide``, buckets without rows stay gaps: a percentile of nothing is not
    0, and a line must not bridge a quiet hour as if it had been measured. The axis starts at 0, so that
    noise of a few percent is not blown up into a saw-tooth."""
    table = pdf.pivot_table(index="bucket", columns=series, values=values).sort_index() / scale
    table = table.reindex(every_bucket(table.index, bucket, span))
    seconds = BUCKETS[bucket][2]
    x = date_numbers(table.index) + seconds / _DAY_SECONDS / 2
    for name in table.columns:
        ax.plot(x, table[name].to_numpy(dtype=float), marker=".", label=str(name))
    time_axis(ax, table.index.min(), table.index.max(), seconds)
    value_axis(ax)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    legend_outside(ax)
