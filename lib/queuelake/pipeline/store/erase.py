"""Erasure: the journal rows a predicate selects, and the rows derived from them, removed from the
lake and their files purged from storage, Delta time travel included (``queuelake erase``).

Why a module of its own: a request to forget (a customer's messages, a leaked secret in a body)
must reach every copy queuelake keeps, not only the journal's current version.

1. The selection: ``--where`` over the journal's columns (``erase_predicate.py``). A dry run counts what it
   reaches (rows, files wholly or partly matching, and derived rows) and changes nothing.
2. Derived tables first: every catalogued table with ``erased_by_journal_key`` (``replay_skipped``,
   ``replay_lineage``, ``body_unparsed`` and the id index ``message_keys``, keyed by (queue, seq)) loses
   its rows whose key is a selected row's (the journal's rows matching at its current version); every
   typed body table (``body_<type>``, as ``body_schema_changes`` records them: ``typed.py``) loses its
   rows whose ``message_id`` is a selected row's.
3. The journal delete: the selected rows by their keys, (queue, seq), one commit per ``MAX_IN_LIST``
   (``LakeEngine.delete_rows``), retried from a fresh snapshot on a conflict with a concurrent drain;
   never by ``--where``, which the log would keep (``_delete_journal``); a re-created queue table's
   rows sharing a selected (queue, seq) are left out by their row id (``journal_filters``). Then the matching rows a
   concurrent drain landed meanwhile, their derived rows first, until a look finds none: rows landed
   after the last look (``journal_version`` in the summary) are not selected: run the erase again
   once the drain has landed them.
4. The purge: each touched table's removed files deleted from storage now (``purge_removed``: only
   the log's tombstones, never the drain's staged files, which a "full" vacuum would destroy).
   Older versions that named them can no longer be read. Delta's log keeps per-file statistics
   (min/max of each column) of the removed files until log cleanup (``delta.logRetentionDuration``,
   30 days): an erased value that was a file's min or max stays there until then.

Killed at any instant, the same erase run again finishes it. Why this order: the journal is deleted
last, so a run killed before it leaves the selected rows in the journal, and the next run selects them
again (the derived deletes find nothing left to delete). When the journal went first, a kill after it
left the derived and typed rows for good: a second erase selected nothing. Before its first delete an
erase records the tables it may touch (``lake/pending``), and its predicate until the journal's deletes
are done; the next erase, whatever it selects, runs a stopped one's predicate again whole and purges
its tables first, so a kill before the purge does not leave the removed files readable; the record goes
once the purge is done. Meanwhile the id index may have lost rows the journal still holds: ``find``
and ``where`` read the journal without it while such a record stands (``unfinished_erases``).

The ``runs`` rows carry counts and the predicate, never a row's content.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from queuelake import kill_points, stopping
from queuelake.config import Config
from queuelake.lake import catalogue, pending, record_tables, table_entry
from queuelake.lake.deletes import MAX_IN_LIST, RowFilter
from queuelake.lake.engines import table_engine
from queuelake.lake.port import LakeEngine
from queuelake.pipeline import step_locks
from queuelake.pipeline.store import deleting, typed
from queuelake.pipeline.store.erase_predicate import row_filter
from queuelake.report import log

JOURNAL = record_tables.MESSAGES.name
PENDING = "erase"  # the kind of ``lake/pending`` record an erase leaves until its purge is done
# a record's key holding the erase's predicate while the journal still holds rows it selected
UNFINISHED = "where"
# an erased row's keys: (queue, seq, id) for the journal and the record tables, message_id for typed rows,
# conversation_id too for the id index (whose rows name a journal row by any of its ids)
KEYS = ["queue", "seq", "id", "message_id", "conversation_id"]
JOURNAL_KEY = ["queue", "seq", "id"]  # one journal row: a re-created queue table starts its seqs again
# the journal columns a derived table's third key column may hold (``erased_by_journal_key``'s last)
HELD_IN = {"id": ("id",), "key": ("message_id", "conversation_id", "id")}


def derived_tables() -> list[table_entry.LakeTable]:
    """The catalogued tables whose rows come from journal rows and go with them."""
    return [t for t in catalogue.CATALOGUE if t.erased_by_journal_key]


def erase(cfg: Config, lake: LakeEngine, predicate: str, dry_run: bool = False) -> dict[str, Any]:
    """Erase (``dry_run``: count) the journal rows ``predicate`` selects and their derived rows.
    Returns the summary: per table rows, files, and what was purged."""
    journal = table_engine(lake, JOURNAL)
    if not journal.exists(JOURNAL):
        row_filter(predicate, record_tables.MESSAGES.schema)  # a bad --where still fails (no journal needed)
        log.info("erase: no journal yet under %s, nothing to do", cfg.lake.root)
        return {"dry_run": dry_run, "note": "no journal yet: nothing to do", "tables": {}}
    where = row_filter(predicate, journal.schema(JOURNAL))
    if dry_run:
        reached = journal.count_rows(JOURNAL, where)
        keys = journal.matching_rows(JOURNAL, where, KEYS)
        tables: dict[str, dict[str, Any]] = {
            JOURNAL: {
                "rows": reached.rows,
                "files_removed": reached.files,
                "files_rewritten": reached.files_partial,
                "journal_version": reached.version,
            }
        }
        # as the erase deletes them, and refused as it would be: a dry run said "ok" of an erase that a
        # table the other engine made would refuse (a review)
        explicit = cfg.lake.engine if cfg.lake.engine != "auto" else None  # the real erase's writer
        derived, _ = _derived_plan(lake, journal, keys, explicit)
        for name, engine, filters in derived:
            tables[name] = count_all(engine, name, filters)
        tables.update(typed.remove(lake, keys["message_id"], True, "erase"))
        for name, figures in tables.items():
            log.info(
                "erase --dry-run %s: would remove %d row(s) from %d file(s)",
                name,
                figures["rows"],
                figures["files_removed"],
            )
        return {"dry_run": True, "tables": tables}
    finished, rerun = finish_pending(cfg, lake)
    summary = _erase(cfg, lake, journal, where, predicate)
    if rerun:  # a stopped erase's rows, removed by running it again first (this erase's own counts are apart)
        summary["rows_removed_for_an_unfinished_erase"] = rerun
    return {**summary, "purged_for_an_unfinished_erase": finished} if finished else summary


def _erase(cfg: Config, lake: LakeEngine, journal: LakeEngine, where: RowFilter, predicate: str) -> dict[str, Any]:
    """The erase itself, in an order a kill at any instant leaves finishable (the module's docstring)."""
    t0 = time.monotonic()
    version = journal.table_version(JOURNAL)
    keys = journal.matching_rows(JOURNAL, where, KEYS, version)
    tables: dict[str, dict[str, Any]] = {}  # each table's figures, counted as its deletes commit
    plan = _derived_plan(lake, journal, keys)  # a refusal here has changed nothing: no "stopped" warning
    try:
        with pending.Kept(cfg.lake.root, PENDING, f"erase-{uuid.uuid4().hex}") as kept:
            return _erase_kept(lake, journal, where, predicate, version, keys, plan, kept, t0, tables)
    except BaseException as exc:  # a stop asked (Ctrl-C, SIGTERM) or a failure: what is left, and how it gets done
        log.warning(
            "erase: stopped before its end: the next erase (this one, or any other) finishes it first; while "
            "rows it selected are still in the journal, find and where read it without the id index"
        )
        # what was deleted before the stop, in the interrupted summary (it had no counts: a review)
        stopping.partial(exc, {"tables": tables, "seconds": round(time.monotonic() - t0, 3)})
        raise


def _erase_kept(
    lake: LakeEngine,
    journal: LakeEngine,
    where: RowFilter,
    predicate: str,
    version: int | None,
    keys: pa.Table,
    plan: tuple[list[deleting.Planned], list[deleting.Planned]],
    kept: pending.Kept,
    t0: float,
    tables: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """``_erase``'s steps (each table's figures counted into ``tables`` as its deletes commit), its
    pending record kept fresh while they run (``pending.Kept``). Until the journal's deletes are done
    the record also holds the predicate (``UNFINISHED``): the derived rows,
    the id index's among them, may be gone while the journal still holds the rows, and a later erase
    runs it again whole, not only its purge (a review: a different erase cleared the record, and the
    rows stayed in the journal for good, invisible to find and where)."""
    engines: dict[str, LakeEngine] = {}
    derived, typed_plan = plan  # every table checked writable before (``_derived_plan``)
    if keys.num_rows:
        reached = [t.name for t in derived_tables()] + typed.body_tables(lake) + [JOURNAL]
        kept.record({"purge": reached, "journal_version": version, UNFINISHED: predicate})
    _delete_derived(derived, typed_plan, tables, engines)
    kill_points.reached("erase_derived_removed")  # derived and typed rows gone, the journal's still there
    if keys.num_rows:  # still running (an erase started meanwhile leaves the record alone); and now the
        # tables it touched are known: a later erase finishing it purges those, not every typed table
        # (a VACUUM of 7 s for each delta-spark one)
        touched = [*engines, JOURNAL] if JOURNAL not in engines else list(engines)
        kept.record({"purge": touched, "journal_version": version, UNFINISHED: predicate})
    # the step locks it holds (``steps_stopped``) may have gone with their connections (a restart): a
    # bodies step beside it then typed the messages deleted above back, and for good once their journal
    # rows were gone (a review). Confirmed before the journal's delete: the erase fails with its
    # selection still in the journal, and the same erase again removes what was written meanwhile
    for step in (step_locks.TRANSFORM, step_locks.BODIES):
        step_locks.confirm(step, "erase")
    tables[JOURNAL] = _delete_journal(lake, journal, where, predicate, keys, version, tables, engines, kept)
    engines[JOURNAL] = journal
    kill_points.reached("erase_journal_removed")  # every delete committed, nothing purged yet
    if keys.num_rows or tables[JOURNAL]["rows"]:  # every delete done: the purge left is of the tables they touched
        kept.record({"purge": list(engines)})
    for table, engine in engines.items():
        tables[table]["files_vacuumed"] = engine.purge_removed(table)
        log.info(
            "erase %s: the log's %d removed file(s) purged from storage (those an earlier purge deleted among them)",
            table,
            tables[table]["files_vacuumed"],
        )
    kill_points.reached("erase_purged")  # every purge done, the record still there
    kept.clear()
    return {"dry_run": False, "tables": tables, "seconds": round(time.monotonic() - t0, 3)}


# how many times an erase looks again for matching rows a concurrent drain landed while it deleted
CATCH_UP_ROUNDS = 5


def _delete_journal(
    lake: LakeEngine,
    journal: LakeEngine,
    where: RowFilter,
    predicate: str,
    keys: pa.Table,
    version: int | None,
    tables: dict[str, dict[str, Any]],
    engines: dict[str, LakeEngine],
    kept: pending.Kept,
) -> dict[str, Any]:
    """The selected journal rows deleted by their keys, (queue, seq), at most ``MAX_IN_LIST`` a commit;
    then the matching rows a concurrent drain landed meanwhile, their derived rows first, until a look
    finds none (or ``CATCH_UP_ROUNDS``). Why by keys and not by ``--where``: a Delta commit keeps its
    delete's predicate in the log (``commitInfo``) until the log's cleanup, 30 days, and an erase's
    predicate names what is to be forgotten (a conversation id, an address searched in the bodies);
    the keys name queues and sequence numbers only (a review found the erased ids in the log)."""
    figures = {"rows": 0, "files_removed": 0, "files_rewritten": 0, "attempts": 0}
    tables[JOURNAL] = figures  # counted as the deletes commit: a stop's summary says how far they got
    made: int | None = None
    selected, read = keys, version
    for round_number in range(1, CATCH_UP_ROUNDS + 1):
        ours = 0  # commits this round made
        for deleted in deleting.deleted_each(journal, JOURNAL, journal_filters(journal, selected), "erase"):
            deleting.add(figures, deleted)
            figures["attempts"] += deleted.attempts
            if deleted.version is not None:
                made, ours = deleted.version, ours + 1
        if round_number == CATCH_UP_ROUNDS:
            break  # no look after the last deletes: a look's rows lost their derived rows and stayed (a review)
        now = journal.table_version(JOURNAL)
        if now is None or read is None or now - read <= ours:
            break  # no one else committed since the rows were selected: nothing can have landed
        later = journal.matching_rows(JOURNAL, where, KEYS, now)
        read = now
        if not later.num_rows:
            break
        # a drain committed between the keys' snapshot and now: the matching rows it landed go too
        log.info(
            "erase: %d matching row(s) landed during the erase; they and their derived rows go too", later.num_rows
        )
        kept.record({"purge": list(engines) + typed.body_tables(lake) + [JOURNAL], UNFINISHED: predicate})
        _delete_derived(*_derived_plan(lake, journal, later), tables, engines)
        selected = later
    log.info(
        "erase %s: %d row(s) removed (those matching at version %s), %d file(s) left the log, %d rewritten",
        JOURNAL,
        figures["rows"],
        read,
        figures["files_removed"],
        figures["files_rewritten"],
    )
    return {**figures, "journal_version": read, "version": made}


def journal_filters(journal: LakeEngine, keys: pa.Table) -> list[RowFilter]:
    """The journal rows ``keys`` names, by (queue, seq), as filters of at most ``MAX_IN_LIST`` keys.
    A queue table dropped and re-created starts its seqs again, and the journal then holds two rows
    of one (queue, seq): the rows each filter reaches are read first, and those it reaches that are not
    selected (the namesakes: found by their ids, whatever the counts say, since a selected row another
    erase took meanwhile offset a namesake in a count: a review) are left out by id (``_key_filter``)."""
    if keys.num_rows == 0:
        return []
    pairs = keys.select(["queue", "seq"]).group_by(["queue", "seq"]).aggregate([])
    selected = keys.select(JOURNAL_KEY).group_by(JOURNAL_KEY).aggregate([])
    filters = []
    chunks = _packed(pairs)
    while chunks:
        chunk = chunks.pop(0)
        where = _key_filter(chunk, ["queue", "seq"])
        reached = journal.matching_rows(JOURNAL, where, JOURNAL_KEY)
        namesakes = reached.join(selected.cast(reached.schema), keys=JOURNAL_KEY, join_type="left anti")
        if namesakes.num_rows > MAX_IN_LIST and chunk.num_rows > 1:  # the ids a filter names are bounded too
            half = chunk.num_rows // 2
            chunks[:0] = [chunk.slice(0, half), chunk.slice(half)]
            continue
        if namesakes.num_rows:
            log.info(
                "erase %s: %d row(s) of a re-created queue table share the erased seqs and stay",
                JOURNAL,
                namesakes.num_rows,
            )
            where = _key_filter(chunk, JOURNAL_KEY, namesakes)
        filters.append(where)
    return filters


def _derived_plan(
    lake: LakeEngine, journal: LakeEngine, keys: pa.Table, as_engine: str | None = None
) -> tuple[list[deleting.Planned], list[deleting.Planned]]:
    """The derived and typed tables holding rows of the journal rows ``keys`` names, with the filters
    reaching them; every one of them, and the journal, checked writable by its engine before the
    first delete (``deleting.check_all_writable``: a refusal half-way left a pending record behind)."""
    derived = _derived_filters(lake, keys)
    typed_plan = typed.planned(lake, keys["message_id"])
    planned = [(name, engine) for name, engine, _ in derived + typed_plan] + [(JOURNAL, journal)]
    deleting.check_all_writable(planned, as_engine)
    return derived, typed_plan


def _delete_derived(
    derived: list[deleting.Planned],
    typed_plan: list[deleting.Planned],
    tables: dict[str, dict[str, Any]],
    engines: dict[str, LakeEngine],
) -> None:
    """Delete the planned derived and typed rows (``_derived_plan``), adding each table's figures to
    ``tables`` and its engine to ``engines`` (the tables to purge)."""
    for name, engine, filters in derived:
        engines[name] = engine
        figures = tables.setdefault(name, {"rows": 0, "files_removed": 0, "files_rewritten": 0})
        before = figures["rows"]
        for deleted in deleting.deleted_each(engine, name, filters, "erase"):
            deleting.add(figures, deleted)
        log.info("erase %s: %d derived row(s) removed", name, figures["rows"] - before)
    typed.delete_planned(typed_plan, "erase", tables, engines)


def _derived_filters(lake: LakeEngine, keys: pa.Table) -> list[deleting.Planned]:
    """Each derived table holding rows of the journal rows ``keys`` names: its name, engine and the
    filters reaching those rows (``key_filters``), the id-index rows a kept namesake shares left out
    (``_kept_namesakes_keys``); what the erase deletes and ``--dry-run`` counts (it counted those too)."""
    out = []
    kept_keys: pa.Table | None = None
    for table in derived_tables():
        engine = table_engine(lake, table.name)
        if table.erased_by_journal_key[-1] == "key" and kept_keys is None and engine.exists(table.name):
            kept_keys = _kept_namesakes_keys(table_engine(lake, JOURNAL), keys)
        filters = key_filters(engine, table, keys, kept_keys)
        if filters:
            out.append((table.name, engine, filters))
    return out


def finish_pending(cfg: Config, lake: LakeEngine) -> tuple[dict[str, int], dict[str, int]]:
    """What erases killed before their end left: one stopped before its journal deletes were done
    (``UNFINISHED``) run again whole, with its predicate; then the tables each named purged (their
    removed files deleted from storage; a table already purged has nothing left), then their records
    cleared. A record written in the last ``pending.STALE_SECONDS`` may be an erase running beside this
    one: its tables are purged too, and the record stays for that erase to clear (or, killed, for a later
    one). Returns the files purged per table, and the rows a stopped erase run again removed per table."""
    purged: dict[str, int] = {}
    removed: dict[str, int] = {}
    for record in pending.recorded(cfg.lake.root, PENDING):
        running = "" if record.stale else ", perhaps still running: its record stays"
        log.info(
            "erase: an erase that did not finish (%s) is finished first: its tables purged%s", record.name, running
        )
        if record.stale and _written_before_predicates(record.payload):
            _reindex_for_an_older_erase(lake, record.name)
        predicate = record.payload.get(UNFINISHED)
        if record.stale and isinstance(predicate, str):
            log.info("erase: %s stopped before the journal's deletes were done: it is run again whole", record.name)
            journal = table_engine(lake, JOURNAL)
            again = _erase(cfg, lake, journal, row_filter(predicate, journal.schema(JOURNAL)), predicate)
            for table, figures in again["tables"].items():
                purged[table] = purged.get(table, 0) + figures.get("files_vacuumed", 0)
                removed[table] = removed.get(table, 0) + figures.get("rows", 0)
        for table in record.payload.get("purge", []):
            engine = table_engine(lake, table)
            if engine.exists(table):
                purged[table] = purged.get(table, 0) + engine.purge_removed(table)
        if record.stale:
            pending.clear(cfg.lake.root, PENDING, record.name)
    return purged, removed


def unfinished_erases(root: str) -> list[str]:
    """The erases (running, or stopped and not run again yet) whose journal deletes are not all done, or
    may not be (``_written_before_predicates``): the id index may no longer name rows the journal still
    holds, so ``find`` and ``where`` read the journal without it until they are done."""
    return [
        r.name
        for r in pending.recorded(root, PENDING)
        if isinstance(r.payload.get(UNFINISHED), str) or _written_before_predicates(r.payload)
    ]


def _written_before_predicates(payload: dict[str, Any]) -> bool:
    """A record an older version wrote before its journal deletes (it names the journal's version) without
    the predicate (``UNFINISHED``, kept since): whether those deletes were done is not known. Today's erase
    writes the version only beside the predicate, and once the deletes are done neither."""
    return "journal_version" in payload and UNFINISHED not in payload


def _reindex_for_an_older_erase(lake: LakeEngine, name: str) -> None:
    """An older version's erase stopped at an unknown step: its derived deletes (the id index's among them)
    may be done and its journal deletes not, and its selection was not recorded, so it cannot be run again.
    The index is read again from the journal, so that ``find`` and ``where`` find every row the journal
    holds, and the operator is told to run that erase again (a review: the record was cleared as finished,
    and its rows stayed in the journal for good, found nowhere)."""
    from queuelake.pipeline.key_index import build

    log.warning(
        "erase: %s was left by an older version of queuelake, which did not record its --where; if it was "
        "stopped before its journal deletes, the rows it selected are still in the journal: run that erase "
        "again with its --where. The journal's id index is read again from the journal meanwhile",
        name,
    )
    built = build.reindex_all(lake)
    log.info("erase: message_keys: %d journal row(s) of %d file(s) indexed again", built.journal_rows, built.files_read)


def _kept_namesakes_keys(journal: LakeEngine, keys: pa.Table) -> pa.Table:
    """(queue, seq, key) of the journal rows that stay at the erased rows' (queue, seq): a re-created
    queue table's rows, keyed as the id index keys them (message id, conversation id, row id). Why: an
    index row is one (key, queue, seq); when the kept row at that seq carries the erased one's message
    id or conversation (a retry failing again in a truncated error table), the index row is both rows'
    and stays, or ``find`` lost the kept row (a review)."""
    columns = ["queue", "seq", "key"]
    empty = pa.schema([("queue", pa.string()), ("seq", pa.int64()), ("key", pa.string())]).empty_table()
    if keys.num_rows == 0 or not journal.exists(JOURNAL):
        return empty
    selected = keys.select(JOURNAL_KEY).group_by(JOURNAL_KEY).aggregate([])
    pairs = keys.select(["queue", "seq"]).group_by(["queue", "seq"]).aggregate([])
    parts = [empty]
    for chunk in _packed(pairs):
        where = _key_filter(chunk, ["queue", "seq"])
        reached = journal.matching_rows(JOURNAL, where, [*JOURNAL_KEY, *HELD_IN["key"][:2]])
        stay = reached.join(selected, keys=JOURNAL_KEY, join_type="left anti")
        for column in HELD_IN["key"]:
            part = stay.select(["queue", "seq", column]).rename_columns(columns)
            parts.append(part.filter(pc.is_valid(part["key"])).cast(empty.schema))
    return pa.concat_tables(parts).group_by(columns).aggregate([])


def key_filters(
    engine: LakeEngine, table: table_entry.LakeTable, keys: pa.Table, kept_keys: pa.Table | None = None
) -> list[RowFilter]:
    """The rows of a derived table whose journal key is among ``keys``, as filters of at most
    ``MAX_IN_LIST`` keys each (one delete each: deltalake's DELETE crashes on longer IN lists); none
    when the table does not exist or holds none of them. The table's keys at the erased (queue, seq)
    pairs are read, batch by batch and joined with the pairs as they are read, so the deletes name only
    the keys it holds; rows of a re-created queue table's namesakes (same (queue, seq), another row id)
    are left out by name. Why not read the table's keys whole: the id index holds two rows per journal
    row, and an erase of 5 ids on a journal of 10M rows held its 20M keys (2.5 GB: a review)."""
    columns = list(table.erased_by_journal_key)
    if keys.num_rows == 0 or not engine.exists(table.name):
        return []
    pairs = keys.select(["queue", "seq"]).group_by(["queue", "seq"]).aggregate([])
    schema = engine.schema(table.name)
    pairs = pairs.cast(pa.schema([pa.field(c, schema.field(c).type) for c in ("queue", "seq")]))
    reached = engine.matching_reduced(
        table.name,
        _pairs_filter(pairs),
        columns,
        lambda batch: batch.join(pairs, keys=["queue", "seq"], join_type="inner").select(columns),
    )
    namesakes = _namesakes(reached, keys, columns)
    if kept_keys is not None and columns[2] == "key" and kept_keys.num_rows:  # shared with a kept namesake
        shared = reached.select(columns).join(kept_keys, keys=columns, join_type="inner")
        namesakes = pa.concat_tables([namesakes, shared.select(columns).cast(namesakes.schema)])
        namesakes = namesakes.group_by(columns).aggregate([])
    if namesakes.num_rows:  # a pair where the table holds a namesake's rows alone is not named
        reached = reached.join(namesakes, keys=columns, join_type="left anti")
    hit = reached.select(["queue", "seq"]).group_by(["queue", "seq"]).aggregate([])
    return [_key_filter(chunk, columns, namesakes) for chunk in _few_shared(_packed(hit), namesakes)]


def _pairs_filter(pairs: pa.Table) -> RowFilter:
    """A filter holding at least the rows at ``pairs`` (queue, seq), to read, never to delete by: their
    queues and seqs each as a set, and the seqs' range (so row groups outside it are skipped by their
    statistics); the exact pairs are the reader's join."""
    queues = pc.unique(pairs["queue"])
    seqs = pc.unique(pairs["seq"])
    arrow = ds.field("queue").isin(queues) & ds.field("seq").isin(seqs)
    if len(seqs):
        bounds = pc.min_max(seqs)
        arrow = arrow & (ds.field("seq") >= bounds["min"].as_py()) & (ds.field("seq") <= bounds["max"].as_py())
    sql = f'"queue" IN (<{len(queues)} queues>) AND "seq" IN (<{len(seqs)} seqs>)'
    return RowFilter(sql, arrow, ("queue", "seq"))


# the most seqs shared with a namesake one filter of a derived table names, each a term of its own
SHARED_TERMS = 100


def _few_shared(chunks: list[pa.Table], namesakes: pa.Table) -> list[pa.Table]:
    """``chunks`` cut so that each holds at most ``SHARED_TERMS`` seqs a namesake shares. Why: each such
    seq is a term of the filter, and deltalake's DELETE crashed (SIGSEGV) on an OR of 5,000 of them and
    took 190 s on 2,000 (a review: a re-created table whose old rows all shared seqs with new ones)."""
    if namesakes.num_rows == 0:
        return chunks
    seats = namesakes.select(["queue", "seq"]).group_by(["queue", "seq"]).aggregate([])
    out: list[pa.Table] = []
    for chunk in chunks:
        flags = pc.is_in(
            pc.binary_join_element_wise(chunk["queue"], pc.cast(chunk["seq"], pa.string()), "\n"),
            value_set=pc.binary_join_element_wise(seats["queue"], pc.cast(seats["seq"], pa.string()), "\n"),
        )
        shared = np.cumsum(flags.to_numpy(zero_copy_only=False).astype(np.int64))
        if not len(shared) or shared[-1] <= SHARED_TERMS:
            out.append(chunk)
            continue
        cuts = np.searchsorted(shared, np.arange(SHARED_TERMS, int(shared[-1]), SHARED_TERMS), side="right")
        bounds = [0, *cuts.tolist(), chunk.num_rows]
        out += [chunk.slice(a, b - a) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    return out


def _packed(pairs: pa.Table) -> list[pa.Table]:
    """Distinct (queue, seq) pairs, sorted, cut into parts a filter names with at most ``MAX_IN_LIST``
    values: a run of three or more consecutive seqs is one ``BETWEEN`` (two values). Why: a delete of
    5,000 listed keys a commit made an erase of 1,000,000 drained rows 202 commits, each rewriting the
    file the next one removed: 279 s where one delete took 2.6 s (a review)."""
    if pairs.num_rows == 0:
        return []
    pairs = pairs.sort_by([("queue", "ascending"), ("seq", "ascending")])
    queues = pc.dictionary_encode(pairs.column("queue")).combine_chunks().indices.to_numpy(zero_copy_only=False)
    seqs = pairs.column("seq").to_numpy()
    starts = np.ones(len(seqs), dtype=bool)
    starts[1:] = (np.diff(seqs) != 1) | (np.diff(queues) != 0)
    run_start = np.maximum.accumulate(np.where(starts, np.arange(len(seqs)), 0))
    weight = (np.arange(len(seqs)) - run_start < 2).astype(np.int64)  # a run's first two values are named
    total = np.cumsum(weight)
    cuts = np.searchsorted(total, np.arange(MAX_IN_LIST, int(total[-1]), MAX_IN_LIST), side="right")
    bounds = [0, *cuts.tolist(), len(seqs)]
    return [pairs.slice(a, b - a) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def _seq_terms(seq: str, seqs: list[int]) -> list[tuple[str, ds.Expression]]:
    """``seqs`` (sorted, distinct) as conditions on column ``seq``: one IN list of the ones standing
    alone or in pairs, one BETWEEN per run of three or more consecutive ones."""
    values = np.asarray(seqs, dtype=np.int64)
    breaks = np.flatnonzero(np.diff(values) != 1) + 1
    listed: list[int] = []
    terms: list[tuple[str, ds.Expression]] = []
    for run in np.split(values, breaks):
        if len(run) < 3:
            listed.extend(int(s) for s in run)
            continue
        first, last = int(run[0]), int(run[-1])
        terms.append((f'"{seq}" BETWEEN {first} AND {last}', (ds.field(seq) >= first) & (ds.field(seq) <= last)))
    if listed:
        terms.insert(0, (f'"{seq}" IN ({", ".join(map(str, listed))})', ds.field(seq).isin(listed)))
    return terms


def _namesakes(reached: pa.Table, keys: pa.Table, columns: list[str]) -> pa.Table:
    """Of the rows ``reached`` at the erased rows' (queue, seq), those of another journal row (a
    re-created queue table's): a third key column naming none of the erased rows' ids. A row whose
    third column is null (recorded before it was filled) cannot be told apart and goes with the pair."""
    if len(columns) == 2:
        return reached.schema.empty_table()
    queue, seq, own = columns
    named = pa.concat_tables(
        [keys.select([queue, seq, column]).rename_columns(columns).cast(reached.schema) for column in HELD_IN[own]]
    )
    named = named.filter(pc.is_valid(named[own])).group_by(columns).aggregate([])
    others = reached.filter(pc.is_valid(reached[own])).join(named, keys=columns, join_type="left anti")
    return others.group_by(columns).aggregate([])


def _quoted(text: object) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _key_filter(hit: pa.Table, columns: list[str], namesakes: pa.Table | None = None) -> RowFilter:
    """One filter: per queue, its seqs; at a seq a namesake shares (``namesakes``: queue, seq and the
    third key column), the rows whose third column names none of the namesakes'. Only kept rows' ids
    are named: the erased ones never reach the predicate the Delta log keeps."""
    sql: list[str] = []
    arrow: ds.Expression | None = None
    queue, seq = columns[:2]
    for name in pc.unique(hit.column(queue)).to_pylist():
        seqs = sorted(int(s) for s in hit.filter(pc.equal(hit.column(queue), name)).column(seq).to_pylist())
        shared = _shared_seqs(namesakes, columns, name) if namesakes is not None else {}
        plain = [s for s in seqs if s not in shared]
        terms = _seq_terms(seq, plain) if plain else []
        beside = [s for s in seqs if s in shared]
        if beside and columns[2] == "id":  # row ids: one list for every seq (they are unique)
            terms.append(_beside_namesakes(columns, beside, [v for s in beside for v in shared[s]]))
        else:  # a kept row's keys may be an erased row's at another seq: per seq (few: ``_few_shared``)
            terms += [_beside_namesakes(columns, [s], shared[s]) for s in beside]
        text = " OR ".join(t for t, _ in terms)
        sql.append(f'("{queue}" = {_quoted(name)} AND {text if len(terms) == 1 else f"({text})"})')
        part = ds.field(queue) == name
        condition = terms[0][1]
        for _, more in terms[1:]:
            condition = condition | more
        arrow = part & condition if arrow is None else arrow | (part & condition)
    assert arrow is not None
    return RowFilter(" OR ".join(sql), arrow, tuple(columns))


def _shared_seqs(namesakes: pa.Table, columns: list[str], queue: object) -> dict[int, list[Any]]:
    """A queue's seqs a namesake shares, each with the namesakes' values of the third key column."""
    shared: dict[int, list[Any]] = {}
    if namesakes.num_rows:
        at = namesakes.filter(pc.equal(namesakes.column(columns[0]), queue))
        for s, value in zip(at.column(columns[1]).to_pylist(), at.column(columns[2]).to_pylist(), strict=True):
            shared.setdefault(int(s), []).append(value)
    return shared


def _beside_namesakes(columns: list[str], seqs: list[int], others: list[Any]) -> tuple[str, ds.Expression]:
    """The rows at ``seqs`` whose third key column is none of ``others`` (null: cannot be told apart):
    one condition on the seqs and one list of the namesakes' values. Why not a term per seq: thousands
    of shared seqs made one OR of thousands of terms, and deltalake's DELETE crashed on it (SIGSEGV,
    a review). A kept value named at another seq of the list keeps nothing it should not: the values
    are row ids (GUIDs) or a kept row's keys."""
    name, own = columns[1], columns[2]
    terms = _seq_terms(name, seqs)
    at_text = terms[0][0] if len(terms) == 1 else "(" + " OR ".join(t for t, _ in terms) + ")"
    at = terms[0][1]
    for _, more in terms[1:]:
        at = at | more
    values = sorted({v for v in others if v is not None}, key=str)
    listed = ", ".join(_quoted(v) for v in values)
    text = f'({at_text} AND ("{own}" IS NULL OR "{own}" NOT IN ({listed})))'
    return text, at & (ds.field(own).is_null() | ~ds.field(own).isin(values))


def count_all(engine: LakeEngine, table: str, filters: list[RowFilter]) -> dict[str, int]:
    """What ``filters`` reach together (they name disjoint rows): rows and whole files."""
    counted = [engine.count_rows(table, f) for f in filters]
    return {"rows": sum(c.rows for c in counted), "files_removed": sum(c.files for c in counted)}


def delete_all(engine: LakeEngine, table: str, filters: list[RowFilter], step: str) -> dict[str, int]:
    """``filters``' rows deleted, one commit each (a progress line while they go on); the rows and files
    together."""
    figures = {"rows": 0, "files_removed": 0, "files_rewritten": 0}
    for deleted in deleting.deleted_each(engine, table, filters, step):
        deleting.add(figures, deleted)
    return figures
