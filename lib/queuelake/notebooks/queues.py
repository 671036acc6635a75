"""A queue's rows, picked as the user names the queue: the transports spell one queue several ways
(`error`, `public.error`, `error@[dbo]@[nsb]`), and a notebook parameter names it once. An empty
selection is a note, not an empty plot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


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
