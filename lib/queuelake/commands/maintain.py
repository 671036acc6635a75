"""``queuelake maintain``: retention of journal rows, then compaction and vacuum of every lake table."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from queuelake.commands.command import Command

if TYPE_CHECKING:
    from queuelake.config import Config
    from queuelake.lake.port import LakeEngine
    from queuelake.pipeline.runs import Run
    from queuelake.pipeline.store.retention import RetentionResult

# how long maintain's retention waits for a running bodies or transform step (``step_locks``)
MAINTAIN_WAITS_SECONDS = 900.0


def maintain(args: argparse.Namespace) -> dict[str, Any]:
    """Apply ``lake.retention`` to the journal (rows past their age leave it), then compact and vacuum
    every lake table under lake.root, then bring the journal's id index (``message_keys``) up to the journal
    and rewrite it into disjoint key ranges (``pipeline/key_index``: after the compaction, which would
    merge its files). The lake port lists the tables, so an object-storage root
    (``s3://...``) is maintained like a local folder, never silently skipped. ``--dry-run`` says what
    retention would remove, per rule, and changes nothing (no compaction, vacuum or ``runs`` row)."""
    import datetime as dt

    from queuelake import config as config_mod
    from queuelake import stopping
    from queuelake.commands.sessions import require_lake_root, writing_lake
    from queuelake.lake.engines import journal_engine, without_spark
    from queuelake.pipeline import runs
    from queuelake.pipeline.step_locks import steps_stopped
    from queuelake.pipeline.store import retention

    cfg = config_mod.load(args.config)
    require_lake_root(cfg)
    if args.dry_run:  # reads only: the Delta log and the filter's columns, no Spark
        lake = without_spark(cfg.lake)
        kept = retention.apply(cfg, lake, dry_run=True)
        return {"dry_run": True, "retention": kept.summary()}
    lake = writing_lake(cfg, None)
    journal = journal_engine(lake)  # the tables delta-rs wrote under a delta-spark job: messages, ...
    run = runs.Run("maintain")
    t0 = time.monotonic()
    kept = retention.RetentionResult(dry_run=False)  # filled rule by rule: a stop between two records the first
    try:
        if retention.filters(cfg, dt.datetime.now(dt.timezone.utc)):
            # a bodies step beside it wrote typed rows of the messages it removed back, for good (no
            # journal row left for erase to find them by); a transform failed on the files it removed
            with steps_stopped(cfg, "maintain", MAINTAIN_WAITS_SECONDS):
                retention.apply(cfg, lake, into=kept)  # before compaction: what leaves is not compacted first
        else:
            retention.apply(cfg, lake, into=kept)  # says there is nothing to do
    except BaseException as exc:
        if kept.rules:  # rows already left the journal: recorded, as a stop after retention records them
            _record_ended_early(lake, run, kept, time.monotonic() - t0, [], exc)
            stopping.partial(exc, {"run_id": run.run_id})
        raise
    retention_seconds = time.monotonic() - t0
    figures: dict[str, Any] = {}  # each table's compaction and vacuum, as they are done
    rows: list[dict[str, Any]] = []  # their ``runs`` rows, as they are done
    try:
        return _compact_and_index(cfg, lake, journal, run, kept, retention_seconds, figures, rows)
    except BaseException as exc:  # the rows retention removed are gone, the tables done are: the summary says so
        _record_ended_early(lake, run, kept, retention_seconds, rows, exc)
        stopping.partial(exc, {"run_id": run.run_id, "retention": kept.summary(), "tables": figures})
        raise


def _record_ended_early(
    lake: LakeEngine, run: Run, kept: RetentionResult, seconds: float, rows: list[dict[str, Any]], exc: BaseException
) -> None:
    """The ``runs`` rows of a maintain stopped (or failed) before its end: the tables done, and the journal's
    with the rows retention removed, ``interrupted`` (or ``failed``). Why: a stopped maintain left no
    ``runs`` row, its retention's deletions recorded nowhere (a review)."""
    from queuelake import stopping
    from queuelake.errors import describe
    from queuelake.pipeline import runs
    from queuelake.pipeline.store import retention
    from queuelake.report import log
    from queuelake.status import Status

    stopped = isinstance(exc, (stopping.Interrupted, KeyboardInterrupt)) or stopping.stop_within(exc) is not None
    ended: dict[str, Any] = {"ended_at": runs.utc_now(), "status": Status.INTERRUPTED if stopped else Status.FAILED}
    if not stopped:
        ended["error"] = describe(exc)[:2000]
    journal = next((r for r in rows if r["table"] == retention.JOURNAL), None)
    if journal is None:  # the journal not compacted yet: its row says what retention removed, and how it ended
        journal = {"table": retention.JOURNAL, "seconds": round(seconds, 3), **ended}
        if kept.rules:
            journal.update(
                rows_removed=kept.total("rows"),
                files_removed=kept.total("files_removed"),
                files_rewritten=kept.total("files_rewritten"),
            )
        rows = [*rows, journal]
    else:
        rows = [*rows, {"table": "(maintain)", **ended}]
    recorded = {r["table"] for r in rows}
    rows += [
        {"table": table, "rows_removed": removed, **ended}
        for table, removed in kept.derived_rows().items()
        if table not in recorded
    ]
    try:
        run.record(lake, rows)
    except Exception as failed:  # noqa: BLE001 - the stop (or the failure) is what the command reports
        log.warning("maintain: the runs rows of the tables done were not written: %s", failed)


def _compact_and_index(
    cfg: Config,
    lake: LakeEngine,
    journal: LakeEngine,
    run: Run,
    kept: RetentionResult,
    retention_seconds: float,
    figures: dict[str, Any],
    rows: list[dict[str, Any]],
) -> dict[str, Any]:
    """Compact and vacuum every table (its figures into ``figures``, its ``runs`` row into ``rows``, as each
    is done), bring the id index up to the journal, record the ``runs`` rows."""
    from queuelake import stopping
    from queuelake.errors import describe, error_kind, is_panic
    from queuelake.lake.storage import job_secrets
    from queuelake.pipeline import runs
    from queuelake.pipeline.key_index import build, rewrite
    from queuelake.pipeline.store import retention
    from queuelake.redaction import redact
    from queuelake.report import log
    from queuelake.status import Status

    names = lake.tables()
    # the rows retention removed from the typed tables, body_unparsed and the id index: on their rows
    # (only the journal's said what retention removed; erase's rows say it of every table: a review)
    derived = kept.derived_rows()
    if not names:
        log.info("maintain: no lake tables under %s yet, nothing to do", cfg.lake.root)
    failed: list[str] = []
    for number, name in enumerate(names, 1):
        t0 = time.monotonic()
        try:
            figures[name] = (journal if lake.written_by(name) == journal.name else lake).maintain(name)
        except BaseException as exc:
            # one table's failure (deltalake's compaction panicked on a typed table of 2 MB bodies, a
            # review) ended the command before every table after it, the journal among them, run after run
            if not (isinstance(exc, Exception) or is_panic(exc)) or stopping.stop_within(exc) is not None:
                raise
            error = redact(
                f"lake table {name}: {describe(exc)}", job_secrets(cfg.transport.connection, cfg.lake.storage_options)
            )
            log.error(
                "maintain %s (table %d of %d) failed: %s; the other tables go on", name, number, len(names), error
            )
            failed.append(name)
            figures[name] = {"status": Status.FAILED, "error": error, "error_kind": error_kind(exc)}
            row_failed = {"table": name, "ended_at": runs.utc_now(), "seconds": round(time.monotonic() - t0, 3)}
            rows.append({**row_failed, "status": Status.FAILED, "error": error, **_removed(name, derived)})
            continue
        log.info(
            "maintain %s (table %d of %d): %s file(s) compacted, %s vacuumed in %.1fs",
            name,
            number,
            len(names),
            figures[name].get("files_compacted", "?"),
            figures[name].get("files_vacuumed", "?"),
            time.monotonic() - t0,
        )
        row = {
            "table": name,
            "ended_at": runs.utc_now(),
            "files_compacted": figures[name].get("files_compacted"),
            "files_vacuumed": figures[name].get("files_vacuumed"),
            "seconds": round(time.monotonic() - t0, 3),
            "status": Status.OK,
            **_removed(name, derived),
        }
        if name == retention.JOURNAL and kept.rules:
            row.update(
                rows_removed=kept.total("rows"),
                files_removed=kept.total("files_removed"),
                files_rewritten=kept.total("files_rewritten"),
                seconds=round(row["seconds"] + retention_seconds, 3),
            )
        rows.append(row)
    t0 = time.monotonic()
    index: dict[str, Any] = {"build": build.update(lake).summary(), "rewrite": rewrite.rewrite(lake).summary()}
    index["seconds"] = round(time.monotonic() - t0, 3)
    rewritten = index["rewrite"]["rewrite"] is not None
    log.info(
        "maintain message_keys (the journal's id index): %d journal file(s) indexed, %s in %.1fs",
        index["build"]["journal_files_read"],
        f"rewritten into {index['rewrite']['files_written']} file(s)" if rewritten else "not rewritten",
        index["seconds"],
    )
    run.record(lake, rows)
    summary = {"run_id": run.run_id, "retention": kept.summary(), "tables": figures, "message_keys": index}
    if failed:
        first = figures[failed[0]]
        return {
            "status": Status.FAILED,
            "failed_tables": failed,
            **summary,
            "error": first["error"],
            "error_kind": first["error_kind"],
        }
    return summary


def _removed(table: str, derived: dict[str, int]) -> dict[str, int]:
    """``rows_removed`` of a derived table's ``runs`` row, where retention removed rows of it."""
    return {"rows_removed": derived[table]} if table in derived else {}


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dry-run", action="store_true", help="say what retention would remove (rows, files per rule); change nothing"
    )


COMMAND = Command(
    name="maintain",
    help="retention of journal rows, then compaction and vacuum of the lake tables",
    run=maintain,
    arguments=_arguments,
    job=True,
)
