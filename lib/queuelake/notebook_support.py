"""What the notebooks in ``notebooks/`` share: parameters, the lake and its tables, time buckets, plots.

The notebooks are Databricks-source files that also run as plain Python (locally, and in
``tests/product/test_notebooks.py``). Databricks predefines ``dbutils``, ``spark`` and ``display`` in the
notebook's own namespace only, not in modules it imports, so each notebook hands them to ``Notebook``;
elsewhere they are None and the same calls fall back to environment variables, a local Spark session and
printed tables, and plots are saved as PNG files (``./notebook-output`` unless QUEUELAKE_NOTEBOOK_OUTPUT
says otherwise) instead of shown. Nothing Databricks-only is imported here, and matplotlib (the
``notebooks`` extra) only when a plot is drawn.

Plots are meant to read well on the demo's lake (a few thousand rows drained within seconds) and on a
day of traffic alike, because a picture that misleads is worse than none:

* buckets follow the data's span (at most ``BUCKET_TARGET`` of them), so that a count per bucket is not a
  zig-zag between 0 and 1; counts are bars on an integer axis;
* every axis on which values are compared is linear and starts at zero (a log axis that starts at 450 ms makes
  467 ms look like a sliver of 829 ms), and bars carry their values;
* durations are shown in the unit that fits them (hours for hours);
* legends sit outside the axes, where they cover nothing;
* a value that was not measured is a gap or says so, never 0; a run with nothing to drain is not a rate of 0;
* a trend needs at least three buckets, else the panel is left out rather than drawn as a lone point;
* tables show counts as integers, a missing value as ``-``, and every time as ``TIME_FORMAT`` in UTC.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd
from pyspark.sql import functions as F

from queuelake.lake.engines import open_lake as _open_lake

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from pyspark.sql import Column, DataFrame, SparkSession

    from queuelake.config import LakeConfig
    from queuelake.lake.port import LakeEngine

# Time buckets: Spark window duration (grouping), pandas frequency (filling empty buckets), seconds (``auto``).
# Seconds for the demo's lake (everything drained within a minute or two), hours and a day for production.
BUCKETS: dict[str, tuple[str, str, int]] = {
    "second": ("1 second", "1s", 1),
    "10 seconds": ("10 seconds", "10s", 10),
    "minute": ("1 minute", "1min", 60),
    "5 minutes": ("5 minutes", "5min", 300),
    "15 minutes": ("15 minutes", "15min", 900),
    "hour": ("1 hour", "1h", 3600),
    "day": ("1 day", "1D", 86400),
}

# ``auto`` buckets: the finest that cuts the span into at most this many. A day is 24 hours, a demo drained
# within seconds one second; more buckets than this spread sparse events into 0/1 noise.
BUCKET_TARGET = 60
# Up to this many buckets a count is drawn as (stacked) bars, which show even a single bucket; more become lines.
BAR_LIMIT = 60
# A trend over time needs this many buckets with data; fewer is a lone point, not a trend.
LEAST_TREND_BUCKETS = 3
TIME_LABEL = "time (UTC)"
# Every time a notebook prints, in tables and text alike: one format, always UTC, said so.
TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"
# What a table shows for a value that is missing (null): not NaN, None or NaT.
MISSING = "-"
# Where plots go when nothing says otherwise and no notebook front end shows them (relative to the current folder).
DEFAULT_OUTPUT = "notebook-output"
_DAY_SECONDS = 86400.0


def _in_jupyter() -> bool:
    """True inside a Jupyter (IPython kernel) session, where ``plt.show()`` draws inline."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and hasattr(shell, "kernel")


class Notebook:
    """The place a notebook runs in: Databricks (its ``dbutils``, ``spark`` and ``display`` passed in) or
    elsewhere (all None). The notebook's code is then the same in both."""

    def __init__(
        self, *, dbutils: Any = None, spark: SparkSession | None = None, display: Callable[[Any], Any] | None = None
    ) -> None:
        self.dbutils = dbutils
        self.spark = spark
        self.display = display
        self.output = self._plot_folder()
        if self.output:
            import matplotlib.pyplot as plt

            plt.switch_backend("Agg")  # no display needed to draw
            print(
                f"plots: saved as PNG files under {os.path.abspath(self.output)} "
                "(QUEUELAKE_NOTEBOOK_OUTPUT names another folder, or 'show' to show them)"
            )
        self.lake: LakeEngine | None = None
        self.lake_root = ""

    def _plot_folder(self) -> str | None:
        """The folder plots are saved in, or None to show them. Databricks and Jupyter show plots under the
        cell; run as a script (``python notebooks/journal_overview.py``) a plot window would block or, without
        a display, draw nothing at all, so the pictures go to ``./notebook-output``. QUEUELAKE_NOTEBOOK_OUTPUT
        overrides both: a folder (scheduled runs, tests), or ``show``."""
        configured = os.environ.get("QUEUELAKE_NOTEBOOK_OUTPUT", "").strip()
        if configured:
            return None if configured == "show" else configured
        if self.dbutils is not None or os.environ.get("DATABRICKS_RUNTIME_VERSION") or _in_jupyter():
            return None
        return DEFAULT_OUTPUT

    def param(self, name: str, default: str, choices: Sequence[str] | None = None) -> str:
        """A widget on Databricks, so that a job's parameters or a person can set it; elsewhere the environment
        variable QUEUELAKE_<NAME>, else the default. The environment also presets the widget."""
        value = os.environ.get(f"QUEUELAKE_{name.upper()}", default)
        if self.dbutils is None:
            return value
        if choices:
            self.dbutils.widgets.dropdown(name, value if value in choices else default, choices)
        else:
            self.dbutils.widgets.text(name, value)
        return self.dbutils.widgets.get(name)

    def open_lake(self, config: LakeConfig) -> LakeEngine:
        """Open the lake with Databricks' session when there is one (never a second one beside it), else a
        local one, and say which lake and engine the notebook reads."""
        if self.spark is None:
            from queuelake.spark import get_spark

            self.spark = get_spark()
        self.lake = _open_lake(config, self.spark)
        self.lake_root = config.root
        print(f"lake {config.root} ({self.lake.name})")
        return self.lake

    def read_table(self, name: str) -> DataFrame | None:
        """The lake table as a DataFrame, or None (with a note) when it is missing or empty: a new or partly
        filled lake shows notes instead of failing."""
        if self.lake is None:
            raise RuntimeError("open the lake first (Notebook.open_lake)")
        if not self.lake.exists(name):
            print(f"note: no lake table {name!r} under {self.lake_root}")
            return None
        df = self.lake.read(name)
        if df.isEmpty():
            print(f"note: lake table {name!r} is empty")
            return None
        return df

    def show_table(self, pdf: pd.DataFrame, title: str) -> None:
        """Databricks' interactive table when there is one (typed, so that it still sorts: counts as integers,
        times in UTC), else the table as text (``table_text``); the title printed either way, so the output
        reads in order."""
        print(f"\n{title}")
        if self.display is not None:
            self.display(typed_table(pdf))
        else:
            print(table_text(pdf))

    def save_or_show(self, fig: Figure, name: str) -> None:
        """Show the plot, or with an output folder save it there as ``<name>.png`` and free its memory."""
        import matplotlib.pyplot as plt

        fig.tight_layout()
        if self.output:
            os.makedirs(self.output, exist_ok=True)
            path = os.path.join(self.output, f"{name}.png")
            fig.savefig(path, dpi=100)
            plt.close(fig)
            print(f"saved {os.path.abspath(path)}")
        else:
            plt.show()


def choose_bucket(df: DataFrame, column: str, bucket: str, most: int = BUCKET_TARGET) -> str:
    """``bucket`` (the parameter), or with ``auto`` the finest bucket that cuts the data's time span in
    ``column`` into at most ``most`` buckets: fine enough to see bursts, few enough that a bucket holds
    more than the odd event (100 failures over 1h40m per minute are a zig-zag between 0 and 1; per 5 minutes
    they are a level). A demo drained within seconds gets seconds, a day of traffic hours."""
    if bucket != "auto":
        return bucket
    row = df.agg((F.unix_seconds(F.max(column)) - F.unix_seconds(F.min(column))).alias("s")).first()
    span = (row["s"] if row is not None else None) or 0  # an aggregate has one row; its value null when empty
    return next((name for name, (_, _, seconds) in BUCKETS.items() if span / seconds <= most), "day")


def to_pandas_utc(df: DataFrame, *columns: str) -> pd.DataFrame:
    """``df`` as pandas, the timestamp ``columns`` as timezone-aware UTC. Spark's own conversion renders
    timestamps in the session's time zone (a Databricks cluster's may not be UTC) and drops the zone; the
    instant in microseconds cannot be misread, whatever the session says."""
    pdf = cast(pd.DataFrame, df.withColumns({c: F.unix_micros(c) for c in columns}).toPandas())
    for c in columns:
        pdf[c] = pd.to_datetime(pdf[c], unit="us", utc=True)
    return pdf


def spark_table(df: DataFrame) -> pd.DataFrame:
    """``df`` as pandas for a table, every timestamp column as UTC (``to_pandas_utc``): Spark's own
    ``toPandas`` would render them in the session's time zone and drop it."""
    from pyspark.sql.types import TimestampType

    stamps = [f.name for f in df.schema.fields if isinstance(f.dataType, TimestampType)]
    return to_pandas_utc(df, *stamps)


def utc_text(value: Any) -> str:
    """A time as ``TIME_FORMAT`` (naive times are taken as UTC, as Spark's UTC session gives them)."""
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return stamp.strftime(TIME_FORMAT)


def _integral(series: pd.Series) -> bool:
    """A float column whose every value is a whole number: counts that a null or a sum made float."""
    values = series.dropna()
    return pd.api.types.is_float_dtype(series) and bool(np.all(np.isfinite(values))) and bool((values % 1 == 0).all())


def typed_table(pdf: pd.DataFrame) -> pd.DataFrame:
    """``pdf`` with whole-number float columns as nullable integers and times as UTC, for an interactive table
    that still sorts by value."""
    out = pdf.copy()
    for column in out.columns:
        series = out[column]
        if pd.api.types.is_datetime64_any_dtype(series):
            out[column] = series.dt.tz_localize("UTC") if series.dt.tz is None else series.dt.tz_convert("UTC")
        elif _integral(series):
            out[column] = series.astype("Int64")
    return out


def _number_text(value: float) -> str:
    """A measurement as text: at most 2 decimals, trailing zeros dropped (``467`` not ``467.0``)."""
    text = f"{value:.2f}" if abs(value) < 100 else f"{value:.1f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def table_text(pdf: pd.DataFrame) -> str:
    """``pdf`` as text: counts as integers (not ``2045.0``), measurements with at most 2 decimals, a missing
    value as ``MISSING`` (not ``NaN``/``None``/``NaT``), every time as ``TIME_FORMAT``."""
    if not len(pdf):
        return "(no rows)"
    out = typed_table(pdf)
    for column in out.columns:
        series = out[column]
        if pd.api.types.is_datetime64_any_dtype(series):
            text = [utc_text(v) if pd.notna(v) else MISSING for v in series]
        elif pd.api.types.is_integer_dtype(series):
            text = [str(int(v)) if pd.notna(v) else MISSING for v in series]
        elif pd.api.types.is_float_dtype(series):
            text = [_number_text(float(v)) if pd.notna(v) else MISSING for v in series]
        else:
            text = [MISSING if v is None or (isinstance(v, float) and np.isnan(v)) else str(v) for v in series]
        out[column] = pd.Series(text, index=out.index, dtype=object)
    return out.to_string(index=False)


def per_bucket(df: DataFrame, column: str, bucket: str, keys: Sequence[str | Column], *aggs: Column) -> pd.DataFrame:
    """Rows grouped by ``keys`` and the time bucket (aligned to UTC midnight) that ``column`` falls in, with
    ``aggs`` (default: a ``count``), as pandas; the bucket's start in the column ``bucket``, in UTC."""
    start = F.window(column, BUCKETS[bucket][0])["start"].alias("bucket")
    grouped = df.groupBy(*keys, start)
    return to_pandas_utc(grouped.agg(*aggs) if aggs else grouped.count(), "bucket")


def time_span(df: DataFrame, column: str) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The first and last time in ``column`` (UTC): panels of one notebook share it as their x range."""
    row = df.agg(F.unix_micros(F.min(column)).alias("a"), F.unix_micros(F.max(column)).alias("b")).first()
    if row is None:  # an aggregate always has its one row
        raise ValueError(f"time_span: no aggregate row for {column}")
    return pd.Timestamp(row["a"], unit="us", tz="UTC"), pd.Timestamp(row["b"], unit="us", tz="UTC")


def wide(
    pdf: pd.DataFrame,
    index: str,
    columns: str,
    values: str,
    bucket: str | None = None,
    span: tuple[pd.Timestamp, pd.Timestamp] | None = None,
) -> pd.DataFrame:
    """Long to wide for plotting: one column per series; with a bucket, every bucket of the range (``span``
    when given, so that panels line up), empty ones 0, so that quiet periods drop to zero instead of being
    bridged."""
    table = pdf.pivot_table(index=index, columns=columns, values=values, aggfunc="sum").fillna(0).sort_index()
    if bucket and len(table):
        every = _every_bucket(table.index, bucket, span)
        table = table.reindex(every, fill_value=0)
    return table


def _every_bucket(
    index: pd.Index, bucket: str, span: tuple[pd.Timestamp, pd.Timestamp] | None = None
) -> pd.DatetimeIndex:
    """Every bucket start from the first to the last of ``index`` (or of ``span``), UTC."""
    first, last = index.min(), index.max()
    if span is not None:
        freq = BUCKETS[bucket][1]
        first, last = min(first, span[0].floor(freq)), max(last, span[1].floor(freq))
    return pd.date_range(first, last, freq=BUCKETS[bucket][1])


def unquote_queues(df: DataFrame) -> DataFrame:
    """The ``queue`` column without quotes: `"public"."Sales"` reads better as public.Sales, and a queue
    parameter is compared with it as the user writes it."""
    return df.withColumn("queue", F.regexp_replace("queue", '"', ""))


def queue_rows(df: DataFrame, queue: str) -> DataFrame:
    """The rows of the queue called ``queue``, or all rows when the parameter is left empty. The transports
    spell one queue several ways, so `error`, `public.error`, `error@[dbo]@[nsb]` all match `error`
    (compare unquoted names: ``unquote_queues``)."""
    if not queue:
        return df
    column = F.col("queue")
    return df.where((column == queue) | column.endswith("." + queue) | column.startswith(queue + "@"))


def none_if_empty(df: DataFrame, what: str, queue: str) -> DataFrame | None:
    """``df``, or None with a note saying what was looked for where, so that the cells after it skip instead
    of drawing empty plots."""
    if not df.isEmpty():
        return df
    where = f"queue {queue!r}" if queue else "the journal"
    print(f"note: no {what} in {where}: nothing to show")
    return None


# ---------------------------------------------------------------- units, value axes, legends

# Units for durations, smallest first: a value is shown in the largest unit it fills at least twice.
DURATION_UNITS: list[tuple[str, float]] = [("ms", 0.001), ("s", 1.0), ("min", 60.0), ("h", 3600.0), ("days", 86400.0)]


def duration_unit(largest_seconds: float) -> tuple[str, float]:
    """The unit (name, seconds) that fits durations up to ``largest_seconds``: 7200 s read as 2 h, 0.9 s as
    900 ms. One unit per panel or table, chosen by its largest value, so that values stay comparable."""
    chosen = DURATION_UNITS[0]
    for unit in DURATION_UNITS:
        if largest_seconds >= 2 * unit[1]:
            chosen = unit
    return chosen


def in_unit(pdf: pd.DataFrame, columns: Sequence[str], seconds_per_value: float = 1.0) -> tuple[pd.DataFrame, str]:
    """``columns`` (durations, ``seconds_per_value`` seconds each) converted to the unit that fits their
    largest value and renamed ``<column>_<unit>``; returns the table and the unit."""
    largest = float(np.nanmax(pdf[list(columns)].to_numpy(dtype=float))) * seconds_per_value if len(pdf) else 0.0
    unit, size = duration_unit(largest if np.isfinite(largest) else 0.0)
    out = pdf.copy()
    for column in columns:
        out[column] = out[column].astype(float) * seconds_per_value / size
    return out.rename(columns={c: f"{c}_{unit}" for c in columns}), unit


def value_axis(ax: Axes, axis: str = "y", counts: bool = False) -> None:
    """The value axis of a bar chart or rate: linear, from 0 (never a log scale, never a window that starts
    near the smallest value, which turns 467 against 829 into a sliver against a bar); with ``counts`` the
    ticks are whole numbers (3 messages, never 2.5)."""
    from matplotlib.ticker import MaxNLocator

    scale = ax.set_yscale if axis == "y" else ax.set_xscale
    limits = ax.get_ylim if axis == "y" else ax.get_xlim
    set_limits = ax.set_ylim if axis == "y" else ax.set_xlim
    scale("linear")
    ax.relim()
    ax.autoscale_view()
    top = limits()[1]
    set_limits(0, max(top, 1) if counts else (top if top > 0 else 1))
    if counts:  # steps of 1, 2, 5 or 10 times a power of ten: never 0, 6, 12, ...
        locator = MaxNLocator(integer=True, steps=[1, 2, 5, 10], min_n_ticks=2)
        (ax.yaxis if axis == "y" else ax.xaxis).set_major_locator(locator)


def legend_outside(ax: Axes, title: str | None = None) -> None:
    """The legend to the right of the axes, outside them, so that it never covers a bar or a line (inside,
    "best" still lands on data when every corner has some). No legend for a single unlabelled series."""
    handles, labels = ax.get_legend_handles_labels()
    if labels:
        ax.legend(
            handles,
            labels,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0,
            fontsize="small",
            title=title,
            title_fontsize="small",
        )


def decimals_for(largest: float) -> Callable[[float], str]:
    """How values up to ``largest`` are written on bars: one number of decimals for the whole panel (2.00 h
    beside 1.93 h, not 2 beside 1.93), fewer for larger values."""
    places = 0 if largest >= 100 else 1 if largest >= 10 else 2
    return lambda v: f"{v:,.{places}f}"


def label_bars(
    ax: Axes, containers: Sequence[Any], text: Callable[[float], str], values: Sequence[float] | None = None
) -> None:
    """Each bar's value written at its end (or ``values``, e.g. the totals of a stack, at the top one's end):
    the number is readable even where a bar is short beside a long one on a linear axis."""
    for container in containers:
        shown = container.datavalues if values is None else values
        ax.bar_label(container, labels=[text(float(v)) for v in shown], fontsize="x-small", padding=2)
    # room for the labels past the longest bar
    horizontal = bool(containers) and getattr(containers[0], "orientation", "vertical") == "horizontal"
    low, high = ax.get_xlim() if horizontal else ax.get_ylim()
    (ax.set_xlim if horizontal else ax.set_ylim)(low, high * 1.12)


def grouped_bars(
    ax: Axes,
    table: pd.DataFrame,
    text: Callable[[float], str],
    horizontal: bool = False,
    stacked: bool = False,
    counts: bool = False,
) -> None:
    """One group of bars per row of ``table`` (its index the group's label), one bar per column (side by side,
    or ``stacked``), on a linear value axis from 0 with each bar's value written on it and the legend outside."""
    positions = np.arange(len(table))
    columns = list(table.columns)
    width = 0.8 if stacked else 0.8 / max(len(columns), 1)
    base = np.zeros(len(table))
    containers = []
    for i, column in enumerate(columns):
        values = table[column].to_numpy(dtype=float)
        offset = 0.0 if stacked else (i - (len(columns) - 1) / 2) * width
        draw = ax.barh if horizontal else ax.bar
        containers.append(draw(positions + offset, np.nan_to_num(values), width, base, label=str(column)))
        if stacked:
            base = base + np.nan_to_num(values)
    labels = [str(v)[-55:] for v in table.index]
    if horizontal:
        ax.set_yticks(positions, labels)
        ax.invert_yaxis()  # the first row (the largest) on top
    else:
        ax.set_xticks(
            positions, labels, rotation=30 if len(table) > 1 else 0, ha="right" if len(table) > 1 else "center"
        )
    value_axis(ax, "x" if horizontal else "y", counts=counts)
    if stacked:  # the total on top of each stack, not the top part's own height
        label_bars(ax, containers[-1:], text, list(base))
    else:
        label_bars(ax, containers, text)
    ax.grid(axis="x" if horizontal else "y", alpha=0.3)
    if len(columns) > 1:
        legend_outside(ax)


# ---------------------------------------------------------------- time axes


def _days(times: Any) -> Any:
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
    start, end = _days([first, last])
    end += bucket_seconds / _DAY_SECONDS
    margin = max((end - start) * 0.03, max(bucket_seconds, least_margin) / _DAY_SECONDS)
    ax.set_xlim(start - margin, end + margin)
    locator = mdates.AutoDateLocator(tz=dt.timezone.utc, minticks=3, maxticks=9)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=dt.timezone.utc))
    ax.set_xlabel(TIME_LABEL)


def counts_over_time(ax: Axes, table: pd.DataFrame, bucket: str, title: str, ylabel: str) -> None:
    """Counts per bucket (``wide``'s table: one column per series, every bucket, empty ones 0). Up to
    ``BAR_LIMIT`` buckets (always, with ``auto`` buckets) as stacked bars, one bucket wide: a single bucket
    (the demo drained in one go) is one bar, where a step line would have no length. More buckets (a bucket
    fixed by hand) as one line per series, point at each bucket's middle. Integer axis from 0, legend
    outside."""
    seconds = BUCKETS[bucket][2]
    x = _days(table.index)
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
    table = table.reindex(_every_bucket(table.index, bucket, span))
    seconds = BUCKETS[bucket][2]
    x = _days(table.index) + seconds / _DAY_SECONDS / 2
    for name in table.columns:
        ax.plot(x, table[name].to_numpy(dtype=float), marker=".", label=str(name))
    time_axis(ax, table.index.min(), table.index.max(), seconds)
    value_axis(ax)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    legend_outside(ax)


# ---------------------------------------------------------------- the runs table

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
            _days(rows["started_at"]),
            y,
            marker="o",
            markersize=4,
            clip_on=False,
            color=QUEUE_COLOURS[i % len(QUEUE_COLOURS)],
            label=queue,
        )
    if value == "rate" and idle.any():
        ax.plot(
            _days(pdf.loc[idle, "started_at"]),
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
        x = _days(rows["started_at"])
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
