"""The typed body tables (``pipeline/bodies``) as erase and retention reach them.

Why a module of its own: the typed tables (``body_<type>``) are not catalogued one by one (their names
come from the message types the journal holds), so ``erased_by_journal_key`` cannot name them. The
bodies stage records which table each type owns in ``body_schema_changes`` (its ``created`` rows);
that registry, not a guess from the ``bodies.table_prefix``, is the list of tables reached here.

The rule: a typed row is keyed by the message's ``message_id`` (one row per message, even when the
journal holds its business copy and its audit copy), and each caller says which ids lose theirs.
``erase``: every message a journal row of which is erased (erasing either copy removes the body: that
is erasure). Retention (``retention.py``): only the messages whose last journal row it removed (a
rule on the business queue leaves the typed row its audit copy still names). Rows are deleted by the
table's own engine (delta-rs or delta-spark: the lake's), one commit per table.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from queuelake.lake import stage_tables
from queuelake.lake.deletes import MAX_IN_LIST, Reached, RowFilter
from queuelake.lake.engines import table_engine
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.store import deleting
from queuelake.report import log

CHANGES = stage_tables.BODY_SCHEMA_CHANGES.name
KEY = "message_id"


def body_tables(lake: LakeEngine) -> list[str]:
    """The typed tables the bodies stage created (``body_schema_changes``), those that exist."""
    if not lake.exists(CHANGES):
        return []
    rows = lake.read_arrow(CHANGES, columns=["table", "change"])
    created = rows.filter(pc.equal(rows["change"], "created"))["table"].to_pylist()
    return sorted({t for t in created if t and lake.exists(t)})


def message_filters(engine: LakeEngine, table: str, message_ids: pa.ChunkedArray | pa.Array) -> list[RowFilter]:
    """The rows of ``table`` whose ``message_id`` is among ``message_ids``, as filters (one delete each);
    none when it holds none. The table's ids are read first so the deletes name only ids it holds. An
    engine that deletes by keys (delta-rs) gets them all in one filter: one commit rewriting each file
    once, where lists of ``MAX_IN_LIST`` ids (deltalake's DELETE crashes on longer IN lists) were 300
    deletes for a retention of 1.5M messages, each rewriting the files its ids were in (a review). The
    others get such lists, in the order the table's files hold the ids, so that each delete rewrites
    the one or two files its ids are in rather than every file of the old rows."""
    hit = _held_ids(engine, table, message_ids)
    if hit and engine.deletes_by_keys:  # one delete of them all (each file rewritten once)
        held = pa.array(hit, engine.schema(table).field(KEY).type)
        sql = f'"{KEY}" IN (<{len(hit)} message ids>)'  # never run: the keys are
        return [RowFilter(sql, ds.field(KEY).isin(held), (KEY,), keys=pa.table({KEY: held}))]
    out = []
    for at in range(0, len(hit), MAX_IN_LIST):
        ids = hit[at : at + MAX_IN_LIST]
        quoted = ", ".join("'" + str(v).replace("'", "''") + "'" for v in ids)
        out.append(RowFilter(f'"{KEY}" IN ({quoted})', ds.field(KEY).isin(ids), (KEY,)))
    return out


def _held_ids(engine: LakeEngine, table: str, message_ids: pa.ChunkedArray | pa.Array) -> list[str]:
    """Those of ``message_ids`` that ``table`` holds typed rows of, each once, in the order of the
    table's files and rows. Read batch by batch through the ids' filter, each batch reduced to its
    distinct ids: memory holds a batch and the ids found, not the table's whole id column (millions of
    rows: an erase of 5 ids peaked at 2.5 GB, a review)."""
    wanted = pc.unique(pc.drop_null(message_ids))
    if len(wanted) == 0:
        return []
    kind = engine.schema(table).field(KEY).type
    if isinstance(wanted, pa.ChunkedArray):
        wanted = wanted.combine_chunks()
    if wanted.type != kind:
        wanted = wanted.cast(kind)
    where = RowFilter(f'"{KEY}" IN (<{len(wanted)} message ids>)', ds.field(KEY).isin(wanted), (KEY,))
    held = engine.matching_reduced(table, where, [KEY], _distinct_ids)
    return pc.unique(pc.drop_null(held[KEY])).to_pylist() if KEY in held.column_names else []


def _distinct_ids(batch: pa.Table) -> pa.Table:
    """A batch's distinct message ids (a batch of no column: none)."""
    if KEY not in batch.column_names:
        return batch
    return pa.table({KEY: pc.unique(batch[KEY].combine_chunks())})


def _counted(engine: LakeEngine, table: str, message_ids: pa.ChunkedArray | pa.Array) -> Reached | None:
    """What a removal of ``message_ids``' typed rows reaches in ``table``, counted in one pass over its
    files (None: it holds none). One filter for all the ids: counted per ``MAX_IN_LIST`` filter, the
    files were read once a filter and counted once a filter too (600 files for a table of 2, a
    retention's dry run of 1.5M rows: a review). Its SQL text is never run (a count is Arrow's)."""
    ids = _held_ids(engine, table, message_ids)
    if not ids:
        return None
    where = RowFilter(f'"{KEY}" IN (<{len(ids)} message ids>)', ds.field(KEY).isin(ids), (KEY,))
    return engine.count_rows(table, where)


def planned(lake: LakeEngine, message_ids: pa.ChunkedArray | pa.Array) -> list[deleting.Planned]:
    """The typed tables holding rows of ``message_ids``: each with its engine and the filters naming
    those rows (``message_filters``); what ``delete_planned`` deletes."""
    if len(message_ids) == 0:
        return []
    out: list[deleting.Planned] = []
    for table in body_tables(lake):
        engine = table_engine(lake, table)
        filters = message_filters(engine, table, message_ids)
        if filters:
            out.append((table, engine, filters))
    return out


def delete_planned(
    plan: list[deleting.Planned],
    step: str,
    figures: dict[str, dict[str, Any]],
    engines: dict[str, LakeEngine],
) -> None:
    """``plan``'s typed rows deleted, table by table, each table's rows added to ``figures`` as its
    deletes commit (a command stopped meanwhile says how far it got) and its engine to ``engines``
    (the caller's purge)."""
    for table, engine, filters in plan:
        engines[table] = engine
        running = figures.setdefault(table, {"rows": 0, "files_removed": 0, "files_rewritten": 0})
        before = running["rows"]
        for deleted in deleting.deleted_each(engine, table, filters, step):  # one commit per filter
            deleting.add(running, deleted)
        log.info("%s %s: %d typed row(s) removed", step, table, running["rows"] - before)


def remove(
    lake: LakeEngine,
    message_ids: pa.ChunkedArray | pa.Array,
    dry_run: bool,
    step: str,
) -> dict[str, dict[str, Any]]:
    """Delete (``dry_run``: count) the typed rows of ``message_ids`` in every typed table, every table
    to delete from checked writable before the first delete. Returns the figures per table touched."""
    figures: dict[str, dict[str, Any]] = {}
    if len(message_ids) == 0:
        return figures
    if dry_run:
        for table in body_tables(lake):
            counted = _counted(table_engine(lake, table), table, message_ids)
            if counted is not None:
                figures[table] = {"rows": counted.rows, "files_removed": counted.files}
                log.info("%s --dry-run %s: would remove %d typed row(s)", step, table, counted.rows)
        return figures
    plan = planned(lake, message_ids)
    deleting.check_all_writable((table, engine) for table, engine, _ in plan)
    delete_planned(plan, step, figures, {})
    return figures
