"""Journal rows kept by their batch ids, in Spark: a join on each writer's range of versions.

Why not ``F.col("batch_id").isin(ids)``: every id is a literal built over py4j and a node of the
plan, 0.2-0.4 ms each to build and plan (7.7 s for 20,000 ids, measured), and an increment after an
erase may name up to ``increments.MAX_BATCHES`` (100,000). The ids an increment names are each
writer's (Delta app id's) consecutive versions (``increments.added_batches``), so a handful of ranges
says the same, joined as a small broadcast table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# a batch id is ``<app id>:<version>`` (the drain's ``batch_id``); the app id may hold colons itself
_APP = r"(?s)^(.*):[0-9]+$"  # (?s): an app id holds a queue's name, which may hold a line break
_VERSION = r":([0-9]+)$"


def version_ranges(batches: list[str]) -> list[tuple[str, int, int]]:
    """(app id, first version, last version) covering exactly ``batches``: each app's consecutive
    versions as one range."""
    by_app: dict[str, set[int]] = {}
    for batch in batches:
        app, _, number = batch.rpartition(":")
        by_app.setdefault(app, set()).add(int(number))
    ranges: list[tuple[str, int, int]] = []
    for app, versions in sorted(by_app.items()):
        ordered = sorted(versions)
        start = previous = ordered[0]
        for version in ordered[1:]:
            if version != previous + 1:
                ranges.append((app, start, previous))
                start = version
            previous = version
        ranges.append((app, start, previous))
    return ranges


def of_batches(frame: DataFrame, batches: list[str]) -> DataFrame:
    """The rows of ``frame`` whose ``batch_id`` is one of ``batches`` (no row when it is empty)."""
    from pyspark.sql import functions as F

    ranges = frame.sparkSession.createDataFrame(
        version_ranges(batches), "batch_app string, first_version long, last_version long"
    )
    version = F.regexp_extract("batch_id", _VERSION, 1)
    keyed = frame.withColumn("_batch_app", F.regexp_extract("batch_id", _APP, 1)).withColumn(
        "_batch_version",
        F.when(version != "", version.cast("long")),  # no cast of "" (ANSI mode fails it)
    )
    matches = (keyed["_batch_app"] == ranges["batch_app"]) & keyed["_batch_version"].between(
        ranges["first_version"], ranges["last_version"]
    )
    return keyed.join(F.broadcast(ranges), matches, "left_semi").drop("_batch_app", "_batch_version")
