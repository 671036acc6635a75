"""The ``runs`` table: one row per command run and queue or table, written by every command.

Why a module: the table outlives queuelake versions. A column added to the catalogue's ``runs``
schema must be added to a ``runs`` table an older version created before appending to it (the lake
refuses columns the table lacks), and every command must do that the same way. The catalogue also
says which columns each command fills (``RUNS_COLUMNS_BY_COMMAND``); a row setting any other is a
bug caught here, so no column stays null for ever without anyone noticing.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from queuelake.errors import LakeError
from queuelake.lake import record_tables
from queuelake.lake.engines import journal_engine
from queuelake.lake.port import LakeEngine
from queuelake.lake.transient import repeated
from queuelake.status import Status

RUNS = record_tables.RUNS.name
RUNS_SCHEMA: pa.Schema = record_tables.RUNS.schema
_EVERY_COMMAND = {"run_id", "command", "started_at", "ended_at", "seconds", "status", "error"}


def new_run_id() -> str:
    return str(uuid.uuid4())


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclass
class Run:
    """One command run: its id, when it started, and the ``runs`` rows it leaves.

    Every command records the same way: its parts' rows (a queue drained, an output published, a
    replay's destinations, a table maintained) with the run's id, command and start, and the time
    they were recorded as their end."""

    command: str
    run_id: str = field(default_factory=lambda: new_run_id())
    started: dt.datetime = field(default_factory=lambda: utc_now())

    def record(self, lake: LakeEngine, rows: Iterable[Mapping[str, Any]]) -> None:
        ended = utc_now()
        timed = [{"started_at": self.started, "ended_at": ended, **r} for r in rows]
        append_runs(lake, self.run_id, self.command, timed)

    def record_after_work(self, lake: LakeEngine, rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """``record`` for a command whose work is committed: ``{}``, or when the rows could not be
        written (a full disk) the summary's failure, ``error`` and ``error_kind``, said in the log too.
        Why: the error replaced the whole summary, and a drain that had landed 5,400 messages said
        only that ``runs`` could not be created (a review)."""
        from queuelake.errors import describe, error_kind, is_panic
        from queuelake.report import log

        try:
            self.record(lake, rows)
        except BaseException as exc:  # noqa: BLE001 - any store's error, deltalake's panic too: the work stands
            if not (isinstance(exc, Exception) or is_panic(exc)):
                raise  # a stop request, the interpreter's exit
            said = describe(exc)
            log.error("%s: its runs rows were not written: %s", self.command, said)
            kind = error_kind(exc)
            return {
                "status": Status.FAILED,
                "error": f"the work is done but its runs rows were not written: {said}",
                "error_kind": "lake" if kind == "unexpected" else kind,
                "runs_error": said,
            }
        return {}


def unless_stopped(unrecorded: dict[str, Any], status: Status) -> dict[str, Any]:
    """``record_after_work``'s failure for a summary of ``status``: an interrupted command stays
    interrupted (its exit code is the stop's), with the error said beside it (a review); a failed one
    keeps its own error (its parts'), the runs rows' beside it: a drain whose queues failed on a full
    disk said "the work is done" with 20,100 messages still queued (a review)."""
    if not unrecorded:
        return unrecorded
    if status == Status.FAILED:
        return {"runs_error": unrecorded["runs_error"]}
    if status == Status.INTERRUPTED:
        return {k: v for k, v in unrecorded.items() if k != "status"}
    return unrecorded


@dataclass(kw_only=True)
class PartResult:
    """What each part of a run ends with (a queue drained, an output published, a replay): its status
    and, unless ok, why. The subclasses add their counts and say which ``runs`` rows they make."""

    status: Status = Status.OK
    error: str | None = None
    error_kind: str | None = None  # its error's kind (``errors.error_kind``), lifted into a failed summary

    def runs_rows(self) -> list[dict[str, Any]]:
        """This part's ``runs`` rows: the counts its command declares (``RUNS_COLUMNS_BY_COMMAND``),
        seconds, status and error."""
        raise NotImplementedError


def read_runs(engine: LakeEngine, columns: list[str]) -> pa.Table:
    """``columns`` of the ``runs`` rows read through ``engine`` (none when there is no table), a column an
    older version's table lacks as nulls. Why: a reader naming a column added since (``predicate``, for
    erase) failed with a KeyError on the first command after an upgrade, until some command of the new
    version wrote a row (a review: ``where`` on a lake made before erase existed)."""
    schema = pa.schema([RUNS_SCHEMA.field(c) for c in columns])
    if not engine.exists(RUNS):
        return schema.empty_table()
    present = set(engine.schema(RUNS).names)
    rows = engine.read_arrow(RUNS, columns=[c for c in columns if c in present])
    return pa.table(
        [rows.column(c) if c in present else pa.nulls(rows.num_rows, schema.field(c).type) for c in columns],
        schema=pa.schema([rows.schema.field(c) if c in present else schema.field(c) for c in columns]),
    )


def runs_engine(lake: LakeEngine) -> LakeEngine:
    """The engine that writes ``runs``: delta-rs, as for the journal, unless an older version made the
    table with delta-spark, whose table it stays (one table, one writing engine).

    Why: every command writes ``runs``, and the drain and purge-expired never start Spark. Under
    ``lake.engine: auto`` a drain outside spark-submit writes with delta-rs while a transform with
    the Delta JVM classes writes with delta-spark: a ``runs`` table of the configured engine failed
    whichever of them came second. delta-rs is the engine every command has."""
    return record_engine(lake, RUNS)


def record_engine(lake: LakeEngine, table: str) -> LakeEngine:
    """The engine that writes a record table of commands that may run without Spark (``runs``, and
    replay's ``replays`` and ``replay_skipped``): delta-rs, unless an older version made the table
    with delta-spark."""
    journal = journal_engine(lake)
    if not journal.exists(table):
        return journal
    recorded = journal.written_by(table)
    if recorded in (None, journal.name):
        return journal
    if recorded == lake.name:
        return lake
    raise LakeError(
        f"lake table {table!r} was created by the {recorded} engine (an older queuelake) and this command "
        f"writes with {lake.name}: run it with lake.engine: {recorded} (delta-spark needs a Spark session "
        f"with the Delta JVM classes), or move the old {table} table aside and a new one is made"
    )


def append_runs(lake: LakeEngine, run_id: str, command: str, rows: list[dict[str, Any]]) -> None:
    """Append this run's rows once (idempotent per run id and command); missing fields are null."""
    if not rows:
        return
    lake = runs_engine(lake)
    allowed = _EVERY_COMMAND | set(record_tables.RUNS_COLUMNS_BY_COMMAND[command])
    for row in rows:
        extra = {k for k, v in row.items() if v is not None} - allowed
        if extra:
            raise ValueError(f"runs: {command} does not record {sorted(extra)} (see RUNS_COLUMNS_BY_COMMAND)")
    data = pa.Table.from_pylist([{**r, "run_id": run_id, "command": command} for r in rows], schema=RUNS_SCHEMA)

    def write() -> None:  # idempotent: the columns added once, the rows once per run id and command
        if lake.exists(RUNS):
            lake.add_columns(RUNS, [f.with_nullable(True) for f in RUNS_SCHEMA])
        lake.append(RUNS, data, f"queuelake.runs/{run_id}/{command}", 1)

    # the last write of every command: a dropped connection there failed a command whose work was done
    repeated(write, RUNS)
