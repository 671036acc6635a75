"""One message type's rows of a slice appended to its typed table: a business copy and its audit copy
kept once, rows the table already holds left out, parsed and written in one Spark job, and what did not
parse returned for ``body_unparsed``.

Why apart from ``run.py``: this is the work each of ``bodies.parallel_tables`` threads does for one
type; ``run.py`` plans the slice, runs the types side by side and commits the increment.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.errors import error_kind, is_panic, jvm_line
from queuelake.lake.port import LakeEngine
from queuelake.lake.round_files import rows_in_files
from queuelake.pipeline import step_locks
from queuelake.pipeline.bodies import evolve, parse, seen, select
from queuelake.report import log
from queuelake.status import Status

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def xml_types(frame: DataFrame) -> set[str]:
    """The types with XML bodies in the increment, sampled or not (one small job on the cached
    selection): only their rows pass through ``xml_serializer``'s Python UDF."""
    from pyspark.sql import functions as F

    rows = frame.where(F.col("reason").isNull() & (F.col("format") == "xml")).select("type_name").distinct()
    return {row[0] for row in rows.collect()}


def select_unparsed(frame: DataFrame, upto: int) -> DataFrame:
    """Rows that cannot be parsed at all (no body, empty, null, not JSON or XML)."""
    from pyspark.sql import functions as F

    df = frame.where(F.col("reason").isNotNull()).withColumn("verdict", F.col("reason"))
    return parse.unparsed(df, upto)


def write_type(
    lake: LakeEngine,
    frame: DataFrame,
    selected: select.Plan,
    name: str,
    evolution: evolve.Evolution,
    upto: int,
    xml: bool,
    app_id: str,
    unreadable: int = 0,
) -> tuple[dict[str, Any], pa.Table | None]:
    """One type's increment into its table (appended under ``app_id``, the journal version ``upto``), and
    its unparsed rows. ``unreadable``: its rows no parser could take (no body, empty, not JSON or XML),
    recorded by the caller, counted here with the rows its parse left out (its line said fewer than its
    summary: a review)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    table = evolution.table
    started = time.monotonic()
    result: dict[str, Any] = {"type_name": name, "table": table, "rows_in": selected.rows_of(name), "rows_out": 0}
    try:
        committed = lake.last_version(table, app_id) if lake.exists(table) else None
        if committed is not None and committed >= upto:
            log.info("bodies: %s already holds journal version %d, skipped", table, upto)
            return {**result, "unparsed": unreadable, "status": Status.OK, "note": "already written"}, None
        had_rows = lake.exists(table) and bool(lake.added_files(table, None, lake.table_version(table) or 0))
        step_locks.confirm(step_locks.BODIES)  # an evolution may rewrite the table's rows (a type change)
        evolve.apply(lake, evolution)
        rows = frame.where((F.col("type_name") == name) & F.col("reason").isNull())
        later = selected.later_copies.get(name)
        if later is not None and later.num_rows:  # a business copy and its audit copy: one row
            copies = rows.sparkSession.createDataFrame(later.combine_chunks())
            rows = rows.join(F.broadcast(copies), ["queue", "seq", "id"], "left_anti")
        if had_rows:  # only the table's rows sent when this increment's were (``seen.py``)
            held = seen.seen_ids(lake, table, selected.times.get(name, seen.Times([], False)))
            if held.num_rows and name in selected.ids:
                # only the ids this slice holds: a backlog's send times span the whole table, and
                # broadcasting all of its ids, four types at once, ran the default driver out of
                # memory a few slices in (a review's first backlog)
                held = held.filter(pc.is_in(held["message_id"], value_set=selected.ids[name].combine_chunks()))
            if held.num_rows:
                ids = rows.sparkSession.createDataFrame(held.select(["message_id"]).combine_chunks())
                rows = rows.join(F.broadcast(ids.distinct()), "message_id", "left_anti")
        # one Spark job parses and writes; the rows it leaves out (unparsed) are counted on the way
        # (an Observation: no second job), and parsed again only when there are any, which is rare
        parsed = parse.parsed(rows, evolution.schema, xml, evolution.spellings)
        left_out = Observation(f"bodies/{table}")
        observed = parsed.observe(left_out, F.count(F.col("verdict")).alias("unparsed"))
        before = lake.table_version(table)
        step_locks.confirm(step_locks.BODIES)
        if lake.append_dataframe(table, parse.typed(observed, evolution.schema), app_id, upto):
            result["rows_out"] = rows_in_files(lake.added_files(table, before, lake.table_version(table) or 0))
            any_unparsed = bool(left_out.get.get("unparsed"))
        else:  # another run wrote it meanwhile: no job ran, so nothing was counted
            any_unparsed = True
        bad_rows = parse.unparsed(parsed, upto).toArrow() if any_unparsed else None
        unparsed = unreadable + (0 if bad_rows is None else bad_rows.num_rows)
        seconds = round(time.monotonic() - started, 3)
        log.info(
            "bodies: %s: %d row(s) in, %d written to %s, %d unparsed (%.1fs)",
            name,
            result["rows_in"],
            result["rows_out"],
            table,
            unparsed,
            seconds,
        )
        return {**result, "unparsed": unparsed, "status": Status.OK, "seconds": seconds}, bad_rows
    except BaseException as exc:  # one type's failure, a Rust panic included, never blocks another
        if not isinstance(exc, Exception) and not is_panic(exc):
            raise  # a stop request, or the interpreter's exit
        return {**failed_type(name, table, result["rows_in"], exc), "unparsed": unreadable}, None


def failed_type(name: str, table: str, rows_in: int, exc: BaseException) -> dict[str, Any]:
    """The result of a type whose table could not be written (its rows are read again by the next run:
    the slice's checkpoint is not committed), said in the log."""
    error = jvm_line(exc) or f"{type(exc).__name__}: {exc}"
    log.error("bodies: %s -> %s failed: %s", name, table, error, exc_info=log.isEnabledFor(logging.DEBUG))
    return {
        "type_name": name,
        "table": table,
        "rows_in": rows_in,
        "rows_out": 0,
        "status": Status.FAILED,
        "error": error[:2000],
        "error_kind": error_kind(exc),
    }
