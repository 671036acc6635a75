"""What the notebooks in ``notebooks/`` import: their one import line, ``from queuelake.notebook_support
import (...)``, names everything they share, so that a notebook reads as its cells and not as a list of
modules. The code lives in ``queuelake/notebooks/``, one job per module:

* ``runner``: ``Notebook``, the place a notebook runs in (Databricks' ``dbutils``, ``spark`` and ``display``,
  or environment variables, a local Spark session, printed tables and PNG files), its parameters and lake;
* ``frames``: Spark rows to pandas in UTC, and the time buckets they are counted in;
* ``tables``: tables as text and as Databricks' typed tables, times as ``TIME_FORMAT``;
* ``queues``: a queue's rows, however the transport spells its name;
* ``units``: durations in the unit that fits them;
* ``axes``: linear value axes from zero, bars that carry their values, legends outside the axes;
* ``time_charts``: UTC time axes, counts per bucket, trends of a per-bucket statistic;
* ``runs_figure``: the ``runs`` table's drain rate and backlog left per run;
* ``conversation``: one conversation drawn as ``queuelake conversation`` draws it (SVG), shown under the cell.
* ``find``: one message's or conversation's journal rows in time order, as pandas, without Spark
  (``queuelake find`` in a cell).

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

from queuelake.notebooks.axes import decimals_for, grouped_bars, label_bars, legend_outside, value_axis
from queuelake.notebooks.conversation import ConversationPicture
from queuelake.notebooks.conversation import draw as draw_conversation
from queuelake.notebooks.find import find_conversation, find_message
from queuelake.notebooks.frames import (
    BUCKET_TARGET,
    BUCKETS,
    choose_bucket,
    every_bucket,
    implausible_note,
    per_bucket,
    plausible_times,
    spark_table,
    time_span,
    times_from_micros,
    to_pandas_utc,
    wide,
)
from queuelake.notebooks.queues import none_if_empty, queue_rows, unquote_queues
from queuelake.notebooks.runner import DEFAULT_OUTPUT, Notebook
from queuelake.notebooks.runs_figure import (
    BACKLOG_LABEL,
    NOT_OK_STYLES,
    QUEUE_COLOURS,
    RATE_LABEL,
    idle_runs,
    per_run_bars,
    per_run_lines,
    runs_figure,
)
from queuelake.notebooks.tables import MISSING, TIME_FORMAT, table_text, typed_table, utc_text
from queuelake.notebooks.time_charts import (
    BAR_LIMIT,
    LEAST_TREND_BUCKETS,
    TIME_LABEL,
    counts_over_time,
    date_numbers,
    time_axis,
    trend_buckets,
    trend_lines,
)
from queuelake.notebooks.units import DURATION_UNITS, duration_unit, in_unit

__all__ = [
    "BACKLOG_LABEL",
    "BAR_LIMIT",
    "BUCKETS",
    "BUCKET_TARGET",
    "ConversationPicture",
    "DEFAULT_OUTPUT",
    "DURATION_UNITS",
    "LEAST_TREND_BUCKETS",
    "MISSING",
    "NOT_OK_STYLES",
    "QUEUE_COLOURS",
    "RATE_LABEL",
    "TIME_FORMAT",
    "TIME_LABEL",
    "Notebook",
    "choose_bucket",
    "counts_over_time",
    "date_numbers",
    "decimals_for",
    "draw_conversation",
    "duration_unit",
    "every_bucket",
    "find_conversation",
    "find_message",
    "grouped_bars",
    "idle_runs",
    "implausible_note",
    "in_unit",
    "label_bars",
    "legend_outside",
    "none_if_empty",
    "per_bucket",
    "per_run_bars",
    "per_run_lines",
    "plausible_times",
    "queue_rows",
    "runs_figure",
    "spark_table",
    "table_text",
    "time_axis",
    "time_span",
    "times_from_micros",
    "to_pandas_utc",
    "trend_buckets",
    "trend_lines",
    "typed_table",
    "unquote_queues",
    "utc_text",
    "value_axis",
    "wide",
]
