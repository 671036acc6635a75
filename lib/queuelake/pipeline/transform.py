"""Run the configured transforms over what is new in the journal, exactly once.

A transform reads the ``landed`` rows that ``messages`` gained since its last run and appends its
result to its output table in one Delta commit carrying the application transaction
(``queuelake.transform/<name>``, journal version consumed). That transaction is the checkpoint: it
commits with the output, so a crash before the commit redoes the increment and a crash after it
finds the increment done; input is never skipped or repeated.

A transform may declare great-expectations on the journal rows it reads (``expectations``): they run
on each increment first, and a failing suite blocks it (nothing written, the checkpoint stays, GX's
details in the summary, ``runs`` and ``expectation_results``) until the suite passes on it.
"""

from __future__ import annotations

import datetime as dt
import importlib
import inspect
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from queuelake import stopping
from queuelake.config import Config
from queuelake.config_sections import SparkConfig, TransformConfig
from queuelake.errors import ConfigError, QueuelakeError, describe, error_kind, is_panic, jvm_gone
from queuelake.lake import catalogue
from queuelake.lake.arrow_types import as_string, to_spark_schema
from queuelake.lake.increments import Span
from queuelake.lake.port import LakeEngine
from queuelake.lake.round_files import open_file, rows_in_files, spark_frame
from queuelake.lake.storage import job_secrets
from queuelake.pipeline import runs, step_locks
from queuelake.pipeline.journal import rearranged
from queuelake.pipeline.journal.batch_filter import of_batches
from queuelake.pipeline.journal.schema import MESSAGES, MESSAGES_SCHEMA
from queuelake.quality import expectations
from queuelake.redaction import redact
from queuelake.report import log
from queuelake.spark_progress import heartbeat
from queuelake.status import Status

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def checkpoint_app_id(name: str) -> str:
    return f"queuelake.transform/{name}"


# this package's own example modules that moved: a config an older ``demo`` wrote names the old path, and
# its scheduled run failed after an upgrade (a review). Read from the new one, with a warning.
MOVED_MODULES = {"queuelake.examples.orders": "queuelake.commands.demo.orders"}


def _current_module(module: str) -> str:
    moved = MOVED_MODULES.get(module)
    if moved is None:
        return module
    log.warning("transform function module %s has moved to %s: read from there; update the config", module, moved)
    return moved


def load_function(spec: str) -> Callable[..., DataFrame]:
    module, _, attr = spec.partition(":")
    if not attr:
        raise ConfigError(f"transform function {spec!r}: use module.path:function")
    module = _current_module(module)
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"transform function {spec!r} cannot be loaded: {exc}") from None


# the lake tables queuelake itself writes, which no transform may append its rows to
OWN_TABLES = frozenset(t.name for t in catalogue.CATALOGUE if "{" not in t.name)


def unloadable(config: Config) -> list[str]:
    """Why each transform that cannot load could not: a module that is not there, a SQL file that is not.
    ``run`` says so before its drain, which took minutes before the transform step said it (a review).
    Nothing of the transform's own runs, but finding a module imports its parent packages: one whose
    import raises is said so here too, and the transform step itself then fails that transform alone
    (``run`` ended before its drain on such a package: a review)."""
    import importlib.util

    problems = []
    for transform in config.transforms:
        output = getattr(transform, "output", None)
        if output in OWN_TABLES:
            problems.append(f"transform {transform.name!r}: its output {output} is one of queuelake's own tables")
        function, sql = getattr(transform, "function", None), getattr(transform, "sql", None)
        if function:
            module = MOVED_MODULES.get(function.partition(":")[0], function.partition(":")[0])
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):  # a parent package missing, an empty name
                found = False
            except Exception as exc:  # noqa: BLE001 - a parent package whose import raised: said, not raised
                problems.append(f"transform {transform.name!r}: importing {module!r} raised {describe(exc)}")
                continue
            if not found:
                problems.append(f"transform {transform.name!r}: module {module!r} of {function!r} not found")
        elif sql and not Path(sql).is_file():
            problems.append(f"transform {transform.name!r}: SQL file {sql} does not exist")
    return problems


def sql_text(path: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"transform SQL file {path} does not exist")
    return file.read_text(encoding="utf-8")


def new_landed(spark: SparkSession, lake: LakeEngine, after: int | None, upto: int) -> DataFrame:
    """Landed journal rows committed in versions (after, upto], as a Spark DataFrame."""
    return _landed(spark, *_increment(lake, Span(after, upto)))


def _increment(lake: LakeEngine, span: Span) -> tuple[list[str], list[str] | None]:
    """The journal files of versions (after, upto], and the batches to keep of them (None: all rows):
    after an erase that rewrote rows read before together with new ones into one file, that file is
    read whole, and the earlier rows in it were counted again by every transform."""
    return lake.slice_input(MESSAGES, span)


def _landed(
    spark: SparkSession,
    files: list[str],
    batches: list[str] | None = None,
    drained: tuple[dt.datetime, dt.datetime] | None = None,
) -> DataFrame:
    from pyspark.sql import functions as F

    schema = to_spark_schema(MESSAGES_SCHEMA)  # given, never inferred: no job to sample the files
    if not files:
        return spark.createDataFrame([], schema)
    landed = spark_frame(spark, files, schema).where(F.col("outcome") == "landed")
    if drained is not None:  # a rewritten first run's slice: row groups beyond its rows are not read
        landed = landed.where(F.col("drained_at").between(*drained))
    return landed if batches is None else of_batches(landed, batches)


def count_landed(files: list[str], batches: list[str] | None = None) -> int:
    """Landed rows in journal files (of ``batches`` only, when given), from their ``outcome`` and
    ``batch_id`` columns alone (pyarrow, no Spark job), batch by batch: a compacted file of millions of
    rows is never held whole."""
    total = 0
    wanted = pa.array(batches, pa.string()) if batches is not None else None
    for uri in files:
        for columns in open_file(uri).iter_batches(columns=["outcome", "batch_id"], batch_size=COUNT_BATCH_ROWS):
            keep = pc.equal(columns["outcome"], "landed")
            if wanted is not None:
                keep = pc.and_(keep, pc.is_in(as_string(columns["batch_id"]), value_set=wanted))
            total += pc.sum(keep).as_py() or 0
    return total


COUNT_BATCH_ROWS = 65_536  # rows ``count_landed`` holds at a time


def pending(config: Config, lake: LakeEngine) -> list[str]:
    """The transforms with journal versions to read (cheap: two Delta log lookups each, no Spark).
    An idle scheduled run asks this before starting a Spark session for nothing."""
    if not config.transforms or not lake.exists(MESSAGES):
        return []
    upto = lake.table_version(MESSAGES)
    names = []
    for t in config.transforms:
        after = lake.last_version(t.output, checkpoint_app_id(t.name)) if lake.exists(t.output) else None
        if upto is not None and (after is None or after < upto):
            if not rearranged.moves_without_spark(config, lake, after, upto, t.output):
                names.append(t.name)  # versions of no new rows only: moved past without a session
    return names


def run_transform(
    spark: SparkSession,
    lake: LakeEngine,
    transform: TransformConfig,
    suite: expectations.Suite | None = None,
    run_id: str = "",
    config: Config | None = None,
) -> dict[str, Any]:
    """The transform over the journal's new versions, a slice of at most ``spark.slice_rows`` rows at a
    time (``LakeEngine.slices``), each slice one Spark job and one commit of the output under the
    slice's last journal version: a first backlog needs the memory of a slice, and a killed run resumes
    at the next one. The rows in are counted from the journal files' ``outcome`` column and the rows out
    from the footers of the files the write added (no job to count them)."""
    started = time.monotonic()
    if transform.output in OWN_TABLES:  # the transform appended its rows to queuelake's own table (a review)
        raise ConfigError(
            f"transforms ({transform.name}).output: {transform.output} is one of queuelake's own tables; "
            "name a table of its own"
        )
    upto = lake.table_version(MESSAGES)
    app_id = checkpoint_app_id(transform.name)
    exists = lake.exists(transform.output)
    after = lake.last_version(transform.output, app_id) if exists else None
    result: dict[str, Any] = {"transform": transform.name, "output": transform.output, "journal_version": upto}
    if upto is None or (after is not None and after >= upto):
        log.info("transform %s: nothing new in the journal since version %s, nothing to do", transform.name, after)
        return {**result, "status": Status.OK, "rows_in": 0, "rows_out": 0, "note": "nothing new"}
    if exists and rearranged.no_new_rows(lake, after, upto):
        # a compaction, a retention delete, an erase: nothing to read, and the transform is not run on
        # nothing; its checkpoint moves past them in a commit of no rows (no Spark: ``rearranged``)
        step_locks.confirm(step_locks.TRANSFORM)
        lake.append(transform.output, lake.schema(transform.output).empty_table(), app_id, upto)
        log.info(
            "transform %s: journal versions (%s, %s] added no rows (a compaction or a delete); checkpoint moved",
            transform.name,
            after,
            upto,
        )
        return {**result, "status": Status.OK, "after_version": after, "rows_in": 0, "rows_out": 0, "slices": 0}
    slice_rows = config.spark.slice_rows if config is not None else SparkConfig().slice_rows
    spans = lake.slices(MESSAGES, after, upto, slice_rows)
    if len(spans) > 1:
        log.info("transform %s: journal versions (%s, %s] in %d slices", transform.name, after, upto, len(spans))
    rows_in = rows_out = 0
    done, status = 0, Status.OK
    for number, span in enumerate(spans, 1):
        label = f" slice {number}/{len(spans)}" if len(spans) > 1 else ""
        if stopping.requested():  # also before the first: a stop asked while Spark started (a review)
            log.warning(
                "transform %s: asked to stop; slice %d of %d not started (the next run takes it)",
                transform.name,
                number,
                len(spans),
            )
            # its own entry says so, with the slices it did (it said "ok" and every slice: a review)
            status = Status.INTERRUPTED
            break
        part = _transform_slice(spark, lake, transform, suite, run_id, config, span, label)
        if "status" in part:  # blocked by the journal's expectations: this slice and the rest wait
            return {**result, **part, "after_version": after, "rows_in": rows_in, "rows_out": rows_out}
        result["expectations"] = part.get("expectations", result.get("expectations"))
        rows_in += part["rows_in"]
        rows_out += part["rows_out"]
        done += 1
    if result.get("expectations") is None:
        result.pop("expectations", None)
    seconds = round(time.monotonic() - started, 3)
    log.info(
        "transform %s: %d new journal row(s) in, %d out to %s (%.1fs)",
        transform.name,
        rows_in,
        rows_out,
        transform.output,
        seconds,
    )
    return {
        **result,
        "status": status,
        "after_version": after,
        "rows_in": rows_in,
        "rows_out": rows_out,
        "slices": done,
        **({"slices_left": len(spans) - done} if done < len(spans) else {}),
        "seconds": seconds,
    }


def _transform_slice(
    spark: SparkSession,
    lake: LakeEngine,
    transform: TransformConfig,
    suite: expectations.Suite | None,
    run_id: str,
    config: Config | None,
    span: Span,
    label: str,
) -> dict[str, Any]:
    """Journal versions (after, upto] through the transform into its output, committed under ``upto``.
    Returns rows in and out; with ``status`` when the journal's expectations blocked it."""
    started = time.monotonic()
    after, upto = span.after, span.upto
    app_id = checkpoint_app_id(transform.name)
    files, batches = _increment(lake, span)
    source = _landed(spark, files, batches, span.drained)
    out_part: dict[str, Any] = {}
    if suite is not None:
        blocked = _check_journal(lake, run_id, transform, suite, source, f"{'' if after is None else after}-{upto}")
        out_part["expectations"] = blocked.pop("expectations")
        if blocked:
            return {**out_part, **blocked}
    if transform.function:
        function = load_function(transform.function)
        if config is not None and "bodies" in inspect.signature(function).parameters:
            # it reads the typed body tables: current with the journal versions it consumes
            from queuelake.pipeline.bodies.reader import BodyTables

            out = function(source, bodies=BodyTables(config, spark, lake))
        else:
            out = function(source)
    else:
        assert transform.sql is not None
        source.createOrReplaceTempView("new_messages")
        out = spark.sql(sql_text(transform.sql))
    rows_in = count_landed(files, batches)
    before = lake.table_version(transform.output) if lake.exists(transform.output) else None
    with heartbeat(spark, f"transform {transform.name}{label}", rows_in):
        step_locks.confirm(step_locks.TRANSFORM)
        committed = lake.append_dataframe(transform.output, out, app_id, upto)
    rows_out = 0
    version = lake.table_version(transform.output) if committed else None
    if version is not None:  # committed: the table exists
        rows_out = rows_in_files(lake.added_files(transform.output, before, version))
    if label:
        seconds = time.monotonic() - started
        log.info(
            "transform %s%s: %d row(s) in, %d out (%.1fs, %.0f rows/s)",
            transform.name,
            label,
            rows_in,
            rows_out,
            seconds,
            rows_in / seconds if seconds else 0,
        )
    log.debug("transform %s: journal versions (%s, %s]", transform.name, after, upto)
    return {**out_part, "rows_in": rows_in, "rows_out": rows_out}


def _check_journal(
    lake: LakeEngine, run_id: str, transform: TransformConfig, suite: expectations.Suite, source: Any, span: str
) -> dict[str, Any]:
    """Run the transform's journal suite on its increment; the result is kept in
    ``expectation_results``. Returns {"expectations": n} when it passes, else also the blocked
    status, the error and GX's details of each failed expectation."""
    started = time.monotonic()
    outcome = expectations.validate(source, suite)
    expectations.record(lake, run_id, suite.output, span, suite, outcome)
    log.info(
        "transform %s: %d journal expectation(s) %s in %.1fs",
        transform.name,
        outcome.evaluated,
        "passed" if outcome.success else f"FAILED ({len(outcome.failed)})",
        time.monotonic() - started,
    )
    verdict: dict[str, Any] = {"expectations": outcome.evaluated}
    if not outcome.success:
        # blocked: nothing written and the checkpoint stays, so the next run checks this increment again
        verdict["status"] = Status.BLOCKED
        verdict["error"] = f"journal expectations failed: {expectations.summary(outcome.failed)}"
        verdict["failed_expectations"] = outcome.failed
        log.error("transform %s: blocked, nothing written: %s", transform.name, verdict["error"])
    return verdict


def transform(config: Config, spark: SparkSession, lake: LakeEngine) -> dict[str, Any]:
    if not config.transforms:
        log.info("transform: no transforms configured, nothing to do")
    if not lake.exists(MESSAGES):
        if config.transforms:
            log.info("transform: no journal yet, nothing to do (run drain first)")
        return {"status": Status.OK, "transforms": [], "note": "no journal yet: run drain first"}
    suites = expectations.load_journal(config)  # a mistake in a suite fails before any transform runs
    run = runs.Run("transform")
    results: list[dict[str, Any]] = []
    status = Status.OK
    for t in config.transforms:
        if stopping.requested():
            log.info(
                "transform: asked to stop; %s not run", ", ".join(x.name for x in config.transforms[len(results) :])
            )
            break
        t0 = time.monotonic()
        try:
            results.append(run_transform(spark, lake, t, suites.get(t.name), run.run_id, config))
            if results[-1]["status"] == Status.BLOCKED:
                status = Status.FAILED  # the data needs a person's attention
        except BaseException as exc:  # noqa: BLE001 - the user's function or its Spark job: this transform fails alone
            stop = exc if isinstance(exc, (stopping.Interrupted, KeyboardInterrupt)) else stopping.stop_within(exc)
            if stop is not None:  # the stop itself, or the error of the Spark job a second signal cancelled
                _stopped_during(lake, run, config, results, t.name, stop)
                raise
            if not (isinstance(exc, Exception) or is_panic(exc)):
                raise
            if stopping.requested() and jvm_gone(exc) is not None:  # spark-submit ended after the stop
                log.warning("transform %s: stopped, the Spark JVM gone: %s", t.name, jvm_gone(exc))
                results.append(
                    {"transform": t.name, "output": t.output, "status": Status.INTERRUPTED, "error": jvm_gone(exc)}
                )
                break
            error = str(exc) if isinstance(exc, QueuelakeError) else describe(exc)
            error = redact(error, job_secrets(config.transport.connection, config.lake.storage_options))
            log.error("transform %s failed: %s", t.name, error)
            outcome = {"status": Status.FAILED, "error": error, "error_kind": error_kind(exc)}
            results.append({"transform": t.name, "output": t.output, **outcome})
            status = Status.FAILED
        results[-1].setdefault("seconds", round(time.monotonic() - t0, 3))
    rows = [_runs_row(r) for r in results]
    if stopping.requested():  # the transforms not started have their row too (a stop while Spark started left none)
        stopped = {"status": Status.INTERRUPTED, "error": "asked to stop before it ran"}
        rows += [_runs_row({"output": x.output, **stopped}) for x in config.transforms[len(results) :]]
    run.record(lake, rows)
    if stopping.requested():  # what the scheduler asked for, and its exit code says so, a failure or not
        failed = [r["transform"] for r in results if r["status"] not in (Status.OK, Status.INTERRUPTED)]
        skipped = [x.name for x in config.transforms[len(results) :]]
        return {
            "status": Status.INTERRUPTED,
            "run_id": run.run_id,
            "transforms": results,
            "skipped": skipped,
            **({"failed_transforms": failed} if failed else {}),
        }
    return {"status": status, "run_id": run.run_id, "transforms": results}


def _stopped_during(
    lake: LakeEngine, run: runs.Run, config: Config, results: list[dict[str, Any]], name: str, stop: BaseException
) -> None:
    """A stop that ends the command inside transform ``name`` (a second signal; a first one while its
    typed tables' catch-up waited for a bodies step): the transforms done before it keep their ``runs``
    rows and go with the stop to the summary. Why: their outputs were committed, and neither said so (a
    review)."""
    try:
        run.record(lake, [_runs_row(r) for r in results])
    except Exception as exc:  # noqa: BLE001 - the stop is what the command reports
        log.warning("transform: the runs rows of the transforms done before the stop were not written: %s", exc)
    names = [t.name for t in config.transforms]
    done = {r["transform"] for r in results}
    skipped = [n for n in names if n not in done and n != name]
    stopping.partial(
        stop,
        {
            "transform": {
                "status": Status.INTERRUPTED,
                "run_id": run.run_id,
                "transforms": results,
                "interrupted_transform": name,
                "skipped": skipped,
            }
        },
    )


def _runs_row(result: dict[str, Any]) -> dict[str, Any]:
    """A transform's ``runs`` row: its output (``table``), journal rows in, rows out, and GX's
    details of the failed expectations that blocked it."""
    failed = result.get("failed_expectations")
    return {
        "table": result["output"],
        "rows_in": result.get("rows_in"),
        "rows_out": result.get("rows_out"),
        "seconds": result.get("seconds"),
        "status": result["status"],
        "error": result.get("error"),
        "failed_expectations": orjson.dumps(failed).decode() if failed else None,
    }
