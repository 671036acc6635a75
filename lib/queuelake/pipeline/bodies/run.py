"""The bodies stage: every selected message type's bodies as a typed Delta table, exactly once.

Checkpoint: the stage consumes the journal by increments, as a transform does. Its position is the
application transaction (``queuelake.bodies``, journal version) of the ``body_increments`` row it
commits last, after every table of the increment is written. Each typed table is appended with its
own transaction (``queuelake.bodies/<table>``, journal version), so a rerun after a crash skips the
tables already written; rows already in a table are also never added again (an anti-join on the
message id, against the table's rows sent at the increment's send times only: ``seen.py``),
which is what keeps a message that the journal holds twice (its business queue's copy and its
audit copy, in one increment or two) one row. Within an increment the business copy is
preferred, then the first drained.

A type that fails (its table cannot be written) is reported and the others go on; the increment's
checkpoint is then not committed, so the next run redoes it, and the tables already written skip it.

Cost: the selection is read and cached once; each type is then one Spark job that parses and
appends (its unparsed rows counted on the way, collected only when there are any), and
``bodies.parallel_tables`` types are written at once (``bench/bodies.py``). One more small job finds
the types with XML bodies: only those run ``xml_serializer``'s Arrow UDF (a Python worker per task),
so a JSON-only type costs what it did.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from queuelake import stopping
from queuelake.config import Config
from queuelake.errors import describe, error_kind, is_panic, jvm_gone
from queuelake.lake import catalogue, stage_tables
from queuelake.lake.increments import Span
from queuelake.lake.port import LakeEngine
from queuelake.lake.storage import job_secrets
from queuelake.pipeline import runs, step_locks
from queuelake.pipeline.bodies import batch_sizes, names, select
from queuelake.pipeline.bodies.totals import Totals
from queuelake.pipeline.journal import rearranged
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.redaction import redact
from queuelake.report import log
from queuelake.spark_progress import heartbeat
from queuelake.status import Status

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from queuelake.pipeline.bodies import evolve

APP_ID = "queuelake.bodies"
INCREMENTS = stage_tables.BODY_INCREMENTS.name
CHANGES = stage_tables.BODY_SCHEMA_CHANGES.name
UNPARSED = stage_tables.BODY_UNPARSED.name


def table_app_id(table: str) -> str:
    return f"{APP_ID}/{table}"


def checkpoint(lake: LakeEngine) -> int | None:
    return lake.last_version(INCREMENTS, APP_ID) if lake.exists(INCREMENTS) else None


def pending(config: Config, lake: LakeEngine) -> list[str]:
    """["bodies"] when the journal has versions the stage has not read with rows in them (the Delta
    log, no Spark); versions of no new rows (``maintain``'s, ``erase``'s) are none when the stage can
    move past them without a session (``rearranged``)."""
    if not lake.exists(MESSAGES):
        return []
    upto = lake.table_version(MESSAGES)
    after = checkpoint(lake)
    if upto is None or (after is not None and after >= upto):
        return []
    if after is None and rearranged.empty_without_spark(config, lake, upto, INCREMENTS):
        return []  # a journal of no rows yet (a first drain found the queues empty): no session for nothing
    return [] if rearranged.moves_without_spark(config, lake, after, upto, INCREMENTS) else ["bodies"]


def claimed(lake: LakeEngine) -> dict[str, str]:
    """Type name -> table, as earlier runs created them (``body_schema_changes``' created rows)."""
    if not lake.exists(CHANGES):
        return {}
    rows = lake.read_arrow(CHANGES, columns=["type_name", "table", "change"])
    rows = rows.filter(pc.equal(rows["change"], "created"))
    return dict(zip(rows["type_name"].to_pylist(), rows["table"].to_pylist()))


def _reserved(config: Config) -> set[str]:
    """The table names a typed table may not take: queuelake's own, the transforms' outputs and the
    tables named after them."""
    outputs = {t.output for t in config.transforms}
    per_output = {t.name_for(o) for t in catalogue.CATALOGUE if t.per_output for o in outputs}
    return {t.name for t in catalogue.CATALOGUE if "{" not in t.name} | outputs | per_output


def bodies(config: Config, spark: SparkSession, lake: LakeEngine) -> dict[str, Any]:
    """The journal's new versions into the typed tables, a slice of at most ``spark.slice_rows`` rows at a
    time (``LakeEngine.slices``): each slice is an increment of its own, committed before the next, so a
    first backlog of millions needs the memory of one slice and a killed run resumes at the next."""
    run = runs.Run("bodies")
    started = time.monotonic()
    names.check_overrides(config.bodies.tables, _reserved(config))  # before anything is read or written
    if not lake.exists(MESSAGES):
        log.info("bodies: no journal yet, nothing to do (run drain first)")
        return {"status": Status.OK, "tables": [], "note": "no journal yet: run drain first"}
    upto = lake.table_version(MESSAGES)
    assert upto is not None
    after = checkpoint(lake)
    if after is not None and after >= upto:
        log.info("bodies: nothing new in the journal since version %s, nothing to do", after)
        run.record(lake, [{"table": INCREMENTS, "rows_in": 0, "rows_out": 0, "status": Status.OK}])
        return {"status": Status.OK, "run_id": run.run_id, "journal_version": upto, "tables": [], "note": "nothing new"}
    spans = lake.slices(MESSAGES, after, upto, config.spark.slice_rows)
    if len(spans) > 1:
        log.info(
            "bodies: journal versions (%s, %s] in %d slices of at most %d row(s) (spark.slice_rows)",
            after,
            upto,
            len(spans),
            config.spark.slice_rows,
        )
    totals = Totals()
    error: str | None = None
    interrupted = stopped = False
    for number, span in enumerate(spans, 1):
        label = f"{number}/{len(spans)}" if len(spans) > 1 else ""
        if stopping.requested():  # also before the first: a stop asked while Spark started (a review)
            log.warning("bodies: asked to stop; slice %d of %d not started (the next run takes it)", number, len(spans))
            stopped = True
            break
        in_hand: list[dict[str, Any]] = []  # the slice's types as their tables commit (a stop keeps them)
        try:
            totals.add(_slice(config, spark, lake, run, span, label, in_hand))
        except BaseException as exc:  # noqa: BLE001 - the slice's own Spark job (an out-of-memory): said, and recorded
            stop = exc if isinstance(exc, (stopping.Interrupted, KeyboardInterrupt)) else stopping.stop_within(exc)
            if stop is not None:  # a second signal, or the error of the job it cancelled: the command's
                _stopped_in_slice(lake, run, totals, after, label, started, stop, _committed_part(span, in_hand))
                raise
            if not (isinstance(exc, Exception) or is_panic(exc)):
                raise
            error = redact(describe(exc), job_secrets(config.transport.connection, config.lake.storage_options))
            # the JVM gone after a stop was asked: spark-submit ended (Airflow's kill), the stop's doing
            interrupted = stopping.requested() and jvm_gone(exc) is not None
            if interrupted:
                log.warning("bodies%s: stopped, the Spark JVM gone: %s", f" slice {label}" if label else "", error)
            else:
                log.error("bodies%s failed: %s", f" slice {label}" if label else "", error)
            slice_status = Status.INTERRUPTED if interrupted else Status.FAILED
            totals.add(_failed_slice(span.upto, error, slice_status, error_kind(exc)))
        if totals.failed:
            break  # the failed slice's checkpoint is not committed: the next run redoes it, then the rest
    status = Status.INTERRUPTED if interrupted else Status.FAILED if totals.failed else Status.OK
    rows = _runs_rows(totals)
    if stopped and not totals.failed:  # slices left for the next run: the runs rows say so, not a lone "ok" (a review)
        status = Status.INTERRUPTED
        left = {"table": INCREMENTS, "rows_in": 0, "rows_out": 0, "status": Status.INTERRUPTED}
        rows = [r for r in rows if r["table"] != INCREMENTS or r.get("rows_in")] + [left]
    run.record(lake, rows)
    return _summary(run, totals, after, started, status, error)


def _runs_rows(totals: Totals) -> list[dict[str, Any]]:
    rows = [
        {k: r.get(k) for k in ("table", "rows_in", "rows_out", "seconds", "status", "error")} for r in totals.tables()
    ]
    return rows or [{"table": INCREMENTS, "rows_in": 0, "rows_out": 0, "status": Status.OK}]


def _committed_part(span: Span, in_hand: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What a slice stopped now had committed: the typed tables its types had appended (the next run
    redoes the slice and finds their rows written, so it does not count them again), its checkpoint
    not (``failed``: the run's last committed slice stays the one before)."""
    done = [r for r in list(in_hand) if r.get("status") == Status.OK and r.get("rows_out")]
    if not done:
        return None
    written = sum(r["rows_out"] for r in done)
    return {"upto": span.upto, "rows_read": 0, "rows_written": written, "unparsed": 0, "failed": True, "results": done}


def _stopped_in_slice(
    lake: LakeEngine,
    run: runs.Run,
    totals: Totals,
    after: int | None,
    label: str,
    started: float,
    stop: BaseException,
    committed: dict[str, Any] | None = None,
) -> None:
    """A stop that ends the command inside a slice (a second signal; its Spark jobs cancelled): the
    slices committed before it keep their ``runs`` rows and go with the stop to the summary, with the
    typed tables the stopped slice had appended (``committed``). Why: the summary said only
    "interrupted", with no counts, while slices had been committed; then it left out the 1,040 typed
    rows the stopped slice had committed, which the slice's redo rightly did not count again (reviews)."""
    log.warning(
        "bodies%s: stopped now; the slices before it are kept, this one is redone", f" slice {label}" if label else ""
    )
    if committed is not None:
        log.warning(
            "bodies%s: %d typed row(s) it had written to %d table(s) stay (its redo does not write them again)",
            f" slice {label}" if label else "",
            committed["rows_written"],
            len(committed["results"]),
        )
        totals.add(committed)
    stopped = {"table": INCREMENTS, "rows_in": 0, "rows_out": 0, "status": Status.INTERRUPTED}
    try:  # the slices done, and the stop (a lone "ok" row said nothing of it: a review)
        run.record(lake, (_runs_rows(totals) if totals.tables() else []) + [stopped])
    except Exception as exc:  # noqa: BLE001 - the stop is what the command reports
        log.warning("bodies: the runs rows of the slices done before the stop were not written: %s", exc)
    stopping.partial(stop, {"bodies": _summary(run, totals, after, started, Status.INTERRUPTED, None)})


def _summary(
    run: runs.Run, totals: Totals, after: int | None, started: float, status: Status, error: str | None
) -> dict[str, Any]:
    results = totals.tables()
    seconds = round(time.monotonic() - started, 3)
    log.info(
        "bodies: %d row(s) read, %d written to %d table(s), %d unparsed (%.1fs)",
        totals.rows_read,
        totals.written,
        # typed tables only: a failed or stopped slice's row is no table ("0 written to 1 table(s)" after a failure)
        sum(1 for r in results if r.get("table") != INCREMENTS),
        totals.unparsed,
        seconds,
    )
    return {
        "status": status,
        **({"error": error} if error else {}),
        "run_id": run.run_id,
        "after_version": after,
        "journal_version": totals.upto if totals.upto is not None else after,
        "rows_read": totals.rows_read,
        "rows_written": totals.written,
        "unparsed": totals.unparsed,
        "slices": totals.slices,
        "tables": results,
        "seconds": seconds,
    }


def _failed_slice(upto: int, error: str, status: Status = Status.FAILED, kind: str | None = None) -> dict[str, Any]:
    """A slice whose own work raised (not one type's table: ``typed_append.failed_type``): its
    checkpoint is not committed, the slices before it stay, and the run's summary and ``runs`` rows
    say so. Why: such a failure ended the command with no ``runs`` row, and its summary did not name
    the slices committed before it (a review's first backlog, out of memory in slice 3 of 7)."""
    failed = {"table": INCREMENTS, "rows_in": 0, "rows_out": 0, "status": status, "error": error[:2000]}
    if kind is not None:
        failed["error_kind"] = kind
    return {
        "upto": upto,
        "rows_read": 0,
        "rows_written": 0,
        "unparsed": 0,
        "failed": True,
        "results": [failed],
    }


def _slice(
    config: Config,
    spark: SparkSession,
    lake: LakeEngine,
    run: runs.Run,
    span: Span,
    label: str,
    results: list[dict[str, Any]],
) -> dict[str, Any]:
    """One increment, journal versions (after, upto]: typed tables appended, its checkpoint committed
    unless a type failed. ``results`` gets each type's figures as its table commits."""
    started = time.monotonic()
    after, upto = span.after, span.upto
    selected = select.plan(config, *lake.slice_input(MESSAGES, span), drained=span.drained)
    cfg = config.bodies
    tables = names.assign(selected.type_names, claimed(lake), cfg.table_prefix, cfg.tables, _reserved(config))
    log.info(
        "bodies%s: journal versions (%s, %s]: %d row(s) of %d message type(s)",
        f" slice {label}" if label else "",
        after,
        upto,
        selected.rows,
        len(tables),
    )
    unparsed_count = 0
    if selected.rows:
        from pyspark import StorageLevel

        with batch_sizes.sized_for(spark, selected.average_body_bytes) as sized:
            if sized:
                log.info(
                    "bodies: Spark batches of %s row(s) for bodies of %.0f KB on average",
                    sized,
                    selected.average_body_bytes / 1024,
                )
            # on disk, not in memory: a slice of multi-KB bodies is more than a default driver holds, and
            # caching it in memory ran it out (a review: 500,000 rows of 2.9 KB bodies)
            frame = select.frame(spark, selected).persist(StorageLevel.DISK_ONLY)
            try:
                with heartbeat(spark, f"bodies{f' slice {label}' if label else ''}", selected.rows):
                    unparsed_count, tables = _write_slice(lake, run, frame, selected, tables, cfg, after, upto, results)
            finally:
                frame.unpersist()
    failed = any(r["status"] != Status.OK for r in results)
    written = sum(r.get("rows_out", 0) for r in results)
    if not failed:
        row = {
            "run_id": run.run_id,
            "journal_after": after,
            "journal_version": upto,
            "rows_read": selected.rows,
            "rows_written": written,
            "unparsed": unparsed_count,
            "tables": sorted(tables.values()),
            "recorded_at": dt.datetime.now(dt.timezone.utc),
        }
        step_locks.confirm(step_locks.BODIES)
        lake.append(INCREMENTS, pa.Table.from_pylist([row], schema=stage_tables.BODY_INCREMENTS.schema), APP_ID, upto)
    if label:
        seconds = time.monotonic() - started
        log.info(
            "bodies slice %s: %d row(s) read, %d written, %d unparsed (%.1fs, %.0f rows/s)",
            label,
            selected.rows,
            written,
            unparsed_count,
            seconds,
            selected.rows / seconds if seconds else 0,
        )
    return {
        "upto": upto,
        "rows_read": selected.rows,
        "rows_written": written,
        "unparsed": unparsed_count,
        "failed": failed,
        "results": results,
    }


def _write_slice(
    lake: LakeEngine,
    run: runs.Run,
    frame: DataFrame,
    selected: select.Plan,
    tables: dict[str, str],
    cfg: Any,
    after: int | None,
    upto: int,
    results: list[dict[str, Any]],
) -> tuple[int, dict[str, str]]:
    """The cached slice into its types' tables (``results`` gets one entry per type) and
    ``body_unparsed``; returns the rows recorded as unparsed and the tables written (type -> table)."""
    # pyspark's types, imported here: a run whose bodies find nothing new needs no pyspark (a delta-rs install)
    from queuelake.pipeline.bodies import schema_plan, typed_append

    samples = schema_plan.samples(frame, selected, cfg.sample_rows)
    xml_types = typed_append.xml_types(frame)
    # a new type none of whose bodies parse gets no table (its rows go to body_unparsed)
    tables = {n: t for n, t in tables.items() if n in samples or lake.exists(t)}
    evolutions: dict[str, evolve.Evolution] = {}
    for name in sorted(tables):
        try:
            evolutions[name] = schema_plan.evolution(lake, tables[name], samples.get(name, {}), cfg)
        except BaseException as exc:  # noqa: BLE001 - one type's table unreadable (another writer, storage) fails it alone
            if not (isinstance(exc, Exception) or is_panic(exc)):  # a Rust panic reading its log fails it too
                raise
            results.append(typed_append.failed_type(name, tables[name], selected.rows_of(name), exc))
    tables = {name: table for name, table in tables.items() if name in evolutions}
    _record_changes(lake, run.run_id, upto, tables, evolutions)
    unparsed_parts = [typed_append.select_unparsed(frame, upto).toArrow()]
    # a type's unparsed rows: those its parse leaves out, and those no parser could take (no body,
    # empty, not JSON or XML), which its line and summary left out (a review: 9 in body_unparsed, 0 said)
    unreadable = Counter(unparsed_parts[0]["type_name"].to_pylist())
    written: dict[str, tuple[dict[str, Any], pa.Table | None]] = {}

    def write(name: str) -> None:
        # each type's figures kept as its table commits, not as the caller comes to it: a stop while the
        # caller waited for an earlier type lost those of the types already committed (a review)
        written[name] = typed_append.write_type(
            lake,
            frame,
            selected,
            name,
            evolutions[name],
            upto,
            name in xml_types,
            table_app_id(evolutions[name].table),
            unreadable.get(name, 0),
        )
        results.append(written[name][0])

    before = len(results)
    with ThreadPoolExecutor(cfg.parallel_tables, thread_name_prefix="bodies") as pool:
        for future in [pool.submit(write, name) for name in sorted(tables)]:
            future.result()
    results[before:] = [written[name][0] for name in sorted(written)]  # in the types' order, as they were
    unparsed_parts += [written[name][1] for name in sorted(written) if written[name][1] is not None]
    return _write_unparsed(lake, unparsed_parts, after, upto), tables


def _record_changes(
    lake: LakeEngine, run_id: str, upto: int, tables: dict[str, str], evolutions: dict[str, evolve.Evolution]
) -> None:
    from queuelake.pipeline.bodies import schema_plan

    now = dt.datetime.now(dt.timezone.utc)
    rows: list[dict[str, Any]] = []
    for name, evolution in sorted(evolutions.items()):
        if evolution.created:
            rows.append(
                {
                    "type_name": name,
                    "table": tables[name],
                    "type_version": None,
                    "change": "created",
                    "new_type": evolution.schema.simpleString(),
                }
            )
        for version, change in evolution.changes:
            rows.append(schema_plan.change_row(name, tables[name], version, change))
    rows = _not_recorded_yet(lake, rows, upto)
    if not rows:
        return
    for row in rows:
        row.update(journal_version=upto, run_id=run_id, changed_at=now)
        log.info(
            "bodies: %s %s %s%s", row["table"], row["change"], row.get("column") or "", schema_plan.change_text(row)
        )
    _append_for_increment(
        lake, CHANGES, pa.Table.from_pylist(rows, schema=stage_tables.BODY_SCHEMA_CHANGES.schema), upto
    )


_CHANGE_KEY = ("type_name", "table", "type_version", "change", "column")


def _not_recorded_yet(lake: LakeEngine, rows: list[dict[str, Any]], upto: int) -> list[dict[str, Any]]:
    """``rows`` but the changes an earlier attempt at this increment recorded (a redo plans the tables
    it wrote as they are now, and a table it failed to create or evolve again)."""
    if not rows or not lake.exists(CHANGES) or (lake.last_version(CHANGES, APP_ID) or -1) < upto:
        return rows
    recorded = lake.read_arrow(CHANGES, columns=[*_CHANGE_KEY, "journal_version"])
    recorded = recorded.filter(pc.equal(recorded["journal_version"], upto)).to_pylist()
    seen = {tuple(r[k] for k in _CHANGE_KEY) for r in recorded}
    return [r for r in rows if tuple(r.get(k) for k in _CHANGE_KEY) not in seen]


def _write_unparsed(lake: LakeEngine, parts: list[pa.Table], after: int | None, upto: int) -> int:
    """Append this increment's unparsed rows once: rows an earlier attempt at it recorded are left out."""
    schema = stage_tables.BODY_UNPARSED.schema
    assert schema is not None
    # one chunk: delta-spark's append (createDataFrame from Arrow) kept only the first chunk's rows
    data = pa.concat_tables([p.select(schema.names).cast(schema) for p in parts]).combine_chunks()
    if lake.exists(UNPARSED) and data.num_rows:
        seen = lake.read_arrow(UNPARSED, columns=["queue", "id", "journal_version"])
        if after is not None:
            seen = seen.filter(pc.greater(seen["journal_version"], after))
        keys = {(q, i) for q, i in zip(seen["queue"].to_pylist(), seen["id"].to_pylist())}
        if keys:
            mask = [(q, i) not in keys for q, i in zip(data["queue"].to_pylist(), data["id"].to_pylist())]
            data = data.filter(pa.array(mask))
    if not data.num_rows:
        return 0
    return data.num_rows if _append_for_increment(lake, UNPARSED, data, upto) else 0


def _append_for_increment(lake: LakeEngine, table: str, data: pa.Table, upto: int) -> bool:
    """Append the increment's rows to a record table once per attempt at it: with (``APP_ID``, ``upto``)
    the first time, and on a redo (a type failed, the next run takes the increment again) with an app
    id of the increment's redos. Why: a redo's append with the first attempt's (``APP_ID``, ``upto``)
    was skipped as done already, and the rows of the type that failed the first time were lost while
    the counts said them (a review: 4 unparsed said, none in ``body_unparsed``). The callers leave out
    what an earlier attempt recorded."""
    app_id, version = APP_ID, upto
    done = lake.last_version(table, APP_ID)
    if done is not None and done >= upto:
        app_id = f"{APP_ID}/redo/{upto}"
        version = (lake.last_version(table, app_id) or 0) + 1
    # ``body_unparsed`` holds the bodies as sent: a step whose lock went with its connection appended an
    # erased message's there after an ``erase`` ran beside it (a review), while its typed tables stayed
    step_locks.confirm(step_locks.BODIES)
    return lake.append(table, data, app_id, version)
