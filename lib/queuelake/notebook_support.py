"""What the notebooks in ``notebooks/`` share: parameters, the lake and its tables, time buckets, plots.

The notebooks are Databricks-source files that also run as plain Python (locally, and in
``tests/product/test_notebooks.py``). Databricks predefines ``dbutils``, ``spark`` and ``display`` in the
notebook's own namespace only, not in modules it imports, so each notebook hands them to ``Notebook``;
elsewhere they are None and the same calls fall back to environment variables, a local Spark session and
printed tables. Nothing Databricks-only is imported here, and matplotlib (the ``notebooks`` extra) only
when a plot is saved or shown.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd
from pyspark.sql import functions as F

from queuelake.lake import open_lake as _open_lake

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from pyspark.sql import Column, DataFrame, SparkSession

    from queuelake.config import LakeConfig
    from queuelake.lake import LakeEngine

# Time buckets: Spark window duration (grouping), pandas frequency (filling empty buckets), seconds (``auto``).
BUCKETS: dict[str, tuple[str, str, int]] = {
    "minute": ("1 minute", "1min", 60),
    "5 minutes": ("5 minutes", "5min", 300),
    "15 minutes": ("15 minutes", "15min", 900),
    "hour": ("1 hour", "1h", 3600),
    "day": ("1 day", "1D", 86400),
}


class Notebook:
    """The place a notebook runs in: Databricks (its ``dbutils``, ``spark`` and ``display`` passed in) or
    elsewhere (all None). The notebook's code is then the same in both."""

    def __init__(
        self, *, dbutils: Any = None, spark: SparkSession | None = None, display: Callable[[Any], Any] | None = None
    ) -> None:
        self.dbutils = dbutils
        self.spark = spark
        self.display = display
        # A folder makes the notebook batch-friendly (tests, scheduled runs): plots become PNG files there.
        self.output = os.environ.get("QUEUELAKE_NOTEBOOK_OUTPUT")
        if self.output:
            import matplotlib.pyplot as plt

            plt.switch_backend("Agg")  # no display needed to draw
        self.lake: LakeEngine | None = None
        self.lake_root = ""

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
            print(f"saved {path}")
        else:
            plt.show()


def choose_bucket(df: DataFrame, column: str, bucket: str, most: int = 120) -> str:
    """``bucket`` (the parameter), or with ``auto`` the finest bucket that cuts the data's time span in
    ``column`` into at most ``most`` buckets: fine enough to see bursts, few enough points to read."""
    if bucket != "auto":
        return bucket
    span = df.agg((F.unix_seconds(F.max(column)) - F.unix_seconds(F.min(column))).alias("s")).first()["s"] or 0
    return next((name for name, (_, _, seconds) in BUCKETS.items() if span / seconds <= most), "day")


def bucket_start(column: str, bucket: str) -> Column:
    """The start of the time bucket a timestamp falls in (buckets aligned to UTC midnight), as ``bucket``."""
    return F.window(column, BUCKETS[bucket][0])["start"].alias("bucket")


def wide(pdf: pd.DataFrame, index: str, columns: str, values: str, bucket: str | None = None) -> pd.DataFrame:
    """Long to wide for plotting: one column per series; with a bucket, every bucket of the range, empty ones 0,
    so that lines drop to zero instead of bridging quiet periods."""
    table = pdf.pivot_table(index=index, columns=columns, values=values, aggfunc="sum").fillna(0).sort_index()
    if bucket and len(table):
        every = pd.date_range(table.index.min(), table.index.max(), freq=BUCKETS[bucket][1])
        table = table.reindex(every, fill_value=0)
    return table


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


def trend_lines(ax: Axes, pdf: pd.DataFrame, series: str, values: str, title: str, ylabel: str) -> None:
    """One line per ``series`` of a per-bucket statistic (a percentile). Unlike ``wide``, buckets without rows
    stay gaps: a percentile of nothing is not 0."""
    table = pdf.pivot_table(index="bucket", columns=series, values=values).sort_index()
    for name in table.columns:
        ax.plot(table.index, table[name], marker=".", label=name)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
