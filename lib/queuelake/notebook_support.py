"""What the notebooks in ``notebooks/`` share: parameters, the lake and its tables, time buckets, plots.

The notebooks are Databricks-source files that also run as plain Python (locally, and in
``tests/product/test_notebooks.py``). Databricks predefines ``dbutils``, ``spark`` and ``display`` in the
notebook's own namespace only, not in modules it imports, so each notebook hands them to ``Notebook``;
elsewhere they are None and the same calls fall back to environment variables, a local Spark session and
printed tables, and plots are saved as PNG files (``./notebook-output`` unless QUEUELAKE_NOTEBOOK_OUTPUT
says otherwise) instead of shown. Nothing Databricks-only is imported here, and matplotlib (the
``notebooks`` extra) only when a plot is drawn.

Plots are meant to read well on the demo's lake (a few thousand rows drained within seconds) and on a
day of traffic alike: buckets follow the data's span, time axes are UTC, labelled, and never wider than
the data; counts in few buckets are bars (one bucket still shows); a value that was not measured is a gap.
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

# Up to this many buckets a count is drawn as (stacked) bars, which show even a single bucket; more become lines.
BAR_LIMIT = 40
TIME_LABEL = "time (UTC)"
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
        """Databricks' interactive table when there is one, else the table as text (the title printed either
        way, so the output reads in order)."""
        print(f"\n{title}")
        if self.display is not None:
            self.display(pdf)
        else:
            print(pdf.to_string(index=False) if len(pdf) else "(no rows)")

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


def choose_bucket(df: DataFrame, column: str, bucket: str, most: int = 120) -> str:
    """``bucket`` (the parameter), or with ``auto`` the finest bucket that cuts the data's time span in
    ``column`` into at most ``most`` buckets: fine enough to see bursts, few enough points to read. A demo
    drained within seconds gets seconds, a day of traffic 15 minutes."""
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


def _from_zero(ax: Axes) -> None:
    """A y axis from 0 for counts and rates (never negative): a flat series is not blown up into noise, and a
    single 0 sits on the axis instead of mid-panel."""
    top = ax.get_ylim()[1]
    ax.set_ylim(0, top if top > 0 else 1)


def counts_over_time(ax: Axes, table: pd.DataFrame, bucket: str, title: str, ylabel: str) -> None:
    """Counts per bucket (``wide``'s table: one column per series, every bucket, empty ones 0). Up to
    ``BAR_LIMIT`` buckets as stacked bars, one bucket wide: a single bucket (the demo drained in one go) is
    one bar, where a step line would have no length. More buckets as one line per series, point at each
    bucket's middle."""
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
    _from_zero(ax)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")


def trend_lines(
    ax: Axes,
    pdf: pd.DataFrame,
    series: str,
    values: str,
    title: str,
    ylabel: str,
    bucket: str,
    span: tuple[pd.Timestamp, pd.Timestamp] | None = None,
) -> None:
    """One line per ``series`` of a per-bucket statistic (a percentile), with a marker per bucket so that a
    single bucket still shows. Unlike ``wide``, buckets without rows stay gaps: a percentile of nothing is
    not 0, and a line must not bridge a quiet hour as if it had been measured."""
    table = pdf.pivot_table(index="bucket", columns=series, values=values).sort_index()
    table = table.reindex(_every_bucket(table.index, bucket, span))
    seconds = BUCKETS[bucket][2]
    x = _days(table.index) + seconds / _DAY_SECONDS / 2
    for name in table.columns:
        ax.plot(x, table[name].to_numpy(dtype=float), marker=".", label=str(name))
    time_axis(ax, table.index.min(), table.index.max(), seconds)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


# A run that did not end ``ok`` is drawn on top of its queue's line; failed ones also get a red dashed line
# across the panel, so that they show where the value itself is missing.
# The queues' lines take colours none of these markers use, red least of all.
QUEUE_COLOURS = ["tab:blue", "tab:green", "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]
NOT_OK_STYLES: dict[str, dict[str, Any]] = {
    "failed": {"marker": "X", "color": "tab:red", "markersize": 11},
    "incomplete": {"marker": "^", "color": "tab:orange", "markersize": 9},
    "interrupted": {"marker": "v", "color": "tab:purple", "markersize": 9},
}


def per_run_lines(ax: Axes, pdf: pd.DataFrame, value: str, title: str, ylabel: str) -> None:
    """One line per queue of a per-run ``value`` at each run's ``started_at`` (UTC). A missing value (a
    backlog the run could not measure) is a gap, never 0. Runs whose ``status`` is not ``ok`` are marked with
    their own marker and legend entry; a failed run also by a red dashed vertical line."""
    for i, (queue, rows) in enumerate(pdf.sort_values("started_at").groupby("queue")):
        x, y = _days(rows["started_at"]), rows[value].to_numpy(dtype=float)
        ax.plot(x, y, marker="o", markersize=4, color=QUEUE_COLOURS[i % len(QUEUE_COLOURS)], label=queue)
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
        ax.plot(x, rows[value].to_numpy(dtype=float), linestyle="none", zorder=5, label=label, **style)
    time_axis(ax, pdf["started_at"].min(), pdf["started_at"].max(), least_margin=60)  # a lone run: +-1 minute
    _from_zero(ax)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
