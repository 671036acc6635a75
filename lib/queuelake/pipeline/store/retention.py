"""Retention: journal rows past the age ``lake.retention`` gives them leave the journal (``maintain``).

Why a module of its own: the rules are the audit store's policy (issue 34), and ``maintain`` only
applies them before it compacts. Each rule becomes one ``RowFilter`` over the journal's ``queue``,
``outcome`` and ``drained_at``; the lake port counts (``--dry-run``) or deletes what it reaches.

Age is judged by ``drained_at``, the instant the lake took the row, not ``time_sent``: every row has
it (``time_sent`` is null for quarantined rows, expired rows whose headers are dropped, and senders
that omit the header), it comes from one clock (the drain's host, not each sender's), and the
journal's files are written in ``drained_at`` order, so a file's min/max statistics are tight and an
old file is dropped whole rather than rewritten (``lake/deletes.py``).

First match: a row is governed by the first rule whose ``queue`` and ``outcome`` both match it (an
absent one matches anything), and by ``default_days`` when none does; ``days: null`` keeps for ever.
The filters are disjoint (each excludes the rows earlier rules match), so no row is counted twice.
A row leaves only when its ``drained_at`` is strictly before ``now - days``: nothing younger is touched.

Typed body tables: a typed row goes when the LAST journal row of its message goes (``typed.py``). A
typed table holds one row per ``message_id`` while the journal holds each copy of the message (its
business queue's, its audit copy, error copies), and rules keep them for different times (audit 400
days, queues 30): a rule on the business queue must not take the body an audit copy still names
(``where --field OrderId`` would no longer find the order). So of the message ids of the rows a rule
removes, those still held by a journal row that none of the rules applied so far (this one included)
matches are kept, and the typed rows of the others are deleted.

Order: a rule's derived rows (typed, unparsed, the id index's) go before its journal rows, read at the
journal's version before the delete. Killed between the two, the journal rows are still there and the
next ``maintain`` finds them again (their derived deletes find nothing left). When the journal went
first, a kill after it left the typed rows for good: the rule matched nothing the next time. Matching
rows a concurrent drain lands between the two reads lose their derived rows after the delete.

``body_unparsed`` rows are keyed by a journal row's (queue, seq), not the message: they go with that
row. Their files are purged as the journal's are, by ``maintain``'s vacuum after its retention period.
(``erase`` differs: erasing any copy of a message removes its typed row, as erasure must.)

The id index (``message_keys``, ``pipeline/key_index``): it keeps a row per journal row and key kind,
so without this it would grow for ever while the journal is bounded. Before each rule's journal delete
the index is first brought up to the journal (so that removed rows drained since the last ``maintain``
have their index rows to remove, rather than gaining them from the next build, which reads the files
the commits added), then its rows of the removed (queue, seq) are deleted in one commit, named by
seq ranges (``index_ranges.py``: exact, and small however many rows left). ``replay_lineage`` and
``replay_skipped`` stay: they record what a replay did (an audit record, like ``runs``), hold no
body, and only ``erase`` removes them.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from queuelake import kill_points, stopping
from queuelake.config import Config
from queuelake.config_sections import RetentionRule
from queuelake.lake import record_tables, stage_tables, table_entry
from queuelake.lake.deletes import RowFilter
from queuelake.lake.engines import journal_engine, table_engine
from queuelake.lake.port import LakeEngine
from queuelake.pipeline import step_locks
from queuelake.pipeline.key_index import build
from queuelake.pipeline.store import deleting, index_ranges, typed
from queuelake.pipeline.store.erase import JOURNAL_KEY, count_all, delete_all, key_filters
from queuelake.pipeline.store.erase import KEYS as ROW_KEYS
from queuelake.report import log
from queuelake.timetext import iso_utc
from queuelake.transport.table_refs import queue_ref

JOURNAL = record_tables.MESSAGES.name
UNPARSED = stage_tables.BODY_UNPARSED
KEYS = record_tables.MESSAGE_KEYS.name
_UTC = table_entry.UTC_TS
_SQL_IDS = 100  # message ids a lookup's SQL text lists (``_ids_sql``)


@dataclass(frozen=True)
class RetentionFilter:
    """One rule (or the default) as the rows it removes now."""

    rule: str  # e.g. ``queue="public"."audit" outcome=landed days=400`` or ``default days=30``
    days: int
    cutoff: dt.datetime
    where: RowFilter


@dataclass
class RetentionResult:
    """What retention did (or, in a dry run, would do), per rule and in total."""

    dry_run: bool
    rules: list[dict[str, Any]] = field(default_factory=list)
    note: str | None = None

    def total(self, key: str) -> int:
        return sum(int(r.get(key) or 0) for r in self.rules)

    def index_rows(self) -> int:
        """The id index's rows removed (a dry run: that would be)."""
        return sum(int((r.get(KEYS) or {}).get("rows") or 0) for r in self.rules)

    def derived_rows(self) -> dict[str, int]:
        """The rows removed (a dry run: that would be) from each table derived from the journal: the
        typed body tables, ``body_unparsed``, the id index. Their ``runs`` rows say so, as erase's do."""
        out: dict[str, int] = {}
        for rule in self.rules:
            for table, counted in (rule.get("typed") or {}).items():
                out[table] = out.get(table, 0) + int(counted.get("rows") or 0)
        if self.index_rows():
            out[KEYS] = self.index_rows()
        return {table: rows for table, rows in out.items() if rows}

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "dry_run": self.dry_run,
            "rows_removed": self.total("rows"),
            "files_removed": self.total("files_removed"),
            "files_rewritten": self.total("files_rewritten"),
            "index_rows_removed": self.index_rows(),
            "rules": self.rules,
        }
        if self.note:
            out["note"] = self.note
        return out


def sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def sql_time(value: dt.datetime) -> str:
    return sql_text(iso_utc(value))


def _match(rule: RetentionRule, cfg: Config) -> tuple[list[str], list[ds.Expression]]:
    """The rule's queue/outcome conditions, as SQL and as pyarrow (empty: it matches every row)."""
    sql: list[str] = []
    arrow: list[ds.Expression] = []
    if rule.queue is not None:
        queue = queue_ref(rule.queue, cfg.transport).canonical  # as the drain records it
        sql.append(f'"queue" = {sql_text(queue)}')
        arrow.append(ds.field("queue") == queue)
    if rule.outcome is not None:
        sql.append(f'"outcome" = {sql_text(rule.outcome)}')
        arrow.append(ds.field("outcome") == rule.outcome)
    return sql, arrow


def _all(sql: list[str], arrow: list[ds.Expression]) -> tuple[str, ds.Expression]:
    if not sql:
        return "TRUE", ds.scalar(True)
    out = arrow[0]
    for more in arrow[1:]:
        out = out & more
    return "(" + " AND ".join(sql) + ")", out


def describe(rule: RetentionRule, cfg: Config) -> str:
    parts = []
    if rule.queue is not None:
        parts.append(f"queue={queue_ref(rule.queue, cfg.transport).canonical}")
    if rule.outcome is not None:
        parts.append(f"outcome={rule.outcome}")
    return " ".join(parts + [f"days={rule.days if rule.days is not None else 'forever'}"])


def filters(cfg: Config, now: dt.datetime) -> list[RetentionFilter]:
    """The rules with an age limit, as disjoint filters of the rows past it at ``now``."""
    out: list[RetentionFilter] = []
    earlier: list[tuple[str, ds.Expression]] = []
    retention = cfg.lake.retention
    for rule in retention.rules:
        matched = _all(*_match(rule, cfg))
        if rule.days is not None:
            out.append(_filter(describe(rule, cfg), rule.days, now, matched, earlier))
        earlier.append(matched)
    if retention.default_days is not None:
        days = retention.default_days
        out.append(_filter(f"default days={days}", days, now, ("TRUE", ds.scalar(True)), earlier))
    return out


def _cutoff(now: dt.datetime, days: int) -> dt.datetime:
    """``days`` before ``now``; the first instant of year 1 when that is earlier (``days: 800000`` made
    every ``maintain`` fail with an OverflowError): no row is older, so the rule removes nothing."""
    try:
        return now - dt.timedelta(days=days)
    except OverflowError:
        return dt.datetime.min.replace(tzinfo=dt.timezone.utc)


def _filter(
    label: str,
    days: int,
    now: dt.datetime,
    matched: tuple[str, ds.Expression],
    earlier: list[tuple[str, ds.Expression]],
) -> RetentionFilter:
    cutoff = _cutoff(now, days)
    sql = [matched[0], f'"drained_at" < {sql_time(cutoff)}']
    arrow = matched[1] & (ds.field("drained_at") < pa.scalar(cutoff, _UTC))
    for before_sql, before_arrow in earlier:  # what an earlier rule matches is that rule's
        sql.append(f"NOT {before_sql}")
        arrow = arrow & ~before_arrow
    where = RowFilter(" AND ".join(s for s in sql if s != "TRUE"), arrow, ("queue", "outcome", "drained_at"))
    return RetentionFilter(label, days, cutoff, where)


def apply(
    cfg: Config,
    lake: LakeEngine,
    dry_run: bool = False,
    now: dt.datetime | None = None,
    into: RetentionResult | None = None,
) -> RetentionResult:
    """Remove (``dry_run``: count) the journal rows past their age. Safe beside a running drain: each
    rule is one delete commit, retried on a conflict (``LakeEngine.delete_rows``). ``into``: the result
    to fill, rule by rule (a caller stopped between two rules records the ones applied)."""
    result = into if into is not None else RetentionResult(dry_run=dry_run)
    now = now or dt.datetime.now(dt.timezone.utc)
    rules = filters(cfg, now)
    journal = journal_engine(lake)
    if not rules:
        result.note = "no retention rule with an age limit (lake.retention): nothing to do"
    elif not journal.exists(JOURNAL):
        result.note = "no journal yet: nothing to do"
    if result.note:
        log.info("retention: %s", result.note)
        return result
    try:
        # a dry run reads without Spark (delta-rs): its tables are checked against the real run's explicit engine
        as_engine = cfg.lake.engine if dry_run and cfg.lake.engine != "auto" else None
        _apply_rules(lake, journal, rules, result, dry_run, as_engine)
    except BaseException as exc:  # a stop (or a failure): the rules applied before it, in its summary
        stopping.partial(exc, {"retention": result.summary()})
        raise
    return result


def _apply_rules(
    lake: LakeEngine,
    journal: LakeEngine,
    rules: list[RetentionFilter],
    result: RetentionResult,
    dry_run: bool,
    as_engine: str | None = None,
) -> None:
    """Each rule in turn, its figures added to ``result`` once it is done."""
    for done, rule in enumerate(rules, start=1):
        t0 = time.monotonic()
        figures: dict[str, Any] = {"rule": rule.rule, "days": rule.days, "cutoff": rule.cutoff.isoformat()}
        # the rows the rule removes, read first: their derived rows go before they do (a kill between
        # leaves them in the journal, so the next run finds them again), counted as gone meanwhile
        keys = journal.matching_rows(JOURNAL, rule.where, ROW_KEYS)
        if keys.num_rows:  # a line before the derived tables' deletes, which take minutes on millions
            log.info(
                "retention %s (drained before %s): %d journal row(s) %s; their typed, unparsed and index rows first",
                rule.rule,
                figures["cutoff"],
                keys.num_rows,
                "to count" if dry_run else "to remove",
            )
            _derived(lake, keys, figures, rule, rules[:done], dry_run, as_engine)
        if dry_run:
            reached = journal.count_rows(JOURNAL, rule.where)
            figures.update(rows=reached.rows, files_removed=reached.files, files_rewritten=reached.files_partial)
            verb = "would remove"
        else:
            kill_points.reached("retention_derived_removed")  # the rule's derived rows gone, its journal rows not
            read = journal.table_version(JOURNAL)
            for step in (step_locks.TRANSFORM, step_locks.BODIES):  # as erase does (``_erase_kept``)
                step_locks.confirm(step, "maintain")
            deleted = journal.delete_rows(JOURNAL, rule.where)
            figures.update(
                rows=deleted.rows,
                files_removed=deleted.files_removed,
                files_rewritten=deleted.files_rewritten,
                version=deleted.version,
                attempts=deleted.attempts,
            )
            verb = "removed"
            if deleted.version is not None and deleted.read_version != read:
                # a drain committed meanwhile: matching rows it landed went too, their derived rows now
                later = journal.matching_rows(JOURNAL, rule.where, ROW_KEYS, deleted.read_version)
                landed = later.join(keys.select(JOURNAL_KEY), keys=JOURNAL_KEY, join_type="left anti")
                if landed.num_rows:
                    _derived(lake, landed, figures, rule, None, False)
        figures["seconds"] = round(time.monotonic() - t0, 3)
        log.info(
            "retention %s (drained before %s): %s %d row(s), %d file(s) left the journal, %d rewritten, in %.1fs",
            rule.rule,
            figures["cutoff"],
            verb,
            figures["rows"],
            figures["files_removed"],
            figures["files_rewritten"],
            figures["seconds"],
        )
        result.rules.append(figures)


def _derived(
    lake: LakeEngine,
    keys: pa.Table,
    figures: dict[str, Any],
    rule: RetentionFilter,
    taken: list[RetentionFilter] | None,
    dry_run: bool,
    as_engine: str | None = None,
) -> None:
    """The typed, unparsed and index rows of the journal rows ``keys`` names, removed (``dry_run``:
    counted), their figures added to the rule's. ``taken``: the rules applied so far, this one included,
    whose rows count as gone (the journal rows still there: before the delete, or a dry run); None once
    the rows have left the journal."""
    typed_figures, kept = _typed(lake, keys, taken, dry_run, as_engine)
    for table, counted in typed_figures.items():
        into = figures.setdefault("typed", {}).setdefault(table, {})
        for key, value in counted.items():
            into[key] = into.get(key, 0) + value
    figures.setdefault("typed", {})
    figures["typed_messages_kept"] = figures.get("typed_messages_kept", 0) + kept
    index = _index(lake, keys, rule, dry_run, still_in_journal=taken is not None)
    if index is not None:
        for key in ("rows", "ranges", "seqs_kept_inside", "seqs_left"):  # a second call: rows a drain landed
            index[key] += (figures.get(KEYS) or {}).get(key, 0)
        figures[KEYS] = index


def _typed(
    lake: LakeEngine, keys: pa.Table, taken: list[RetentionFilter] | None, dry_run: bool, as_engine: str | None
) -> tuple[dict[str, Any], int]:
    """The typed rows of the removed rows' messages that have no journal row left (by message id), and
    the unparsed rows of the removed rows (by queue, seq); with the number of messages whose typed rows
    stay because a copy of them does. ``taken``: None once the rows left the journal, else the rules
    applied so far, this one included, whose rows count as gone."""
    ids = pc.unique(pc.drop_null(keys["message_id"]))
    kept = _copies_left(lake, ids, taken) if len(ids) and typed.body_tables(lake) else pa.array([], ids.type)
    gone = ids.filter(pc.invert(pc.is_in(ids, value_set=kept)))
    engine = table_engine(lake, UNPARSED.name)
    filters = key_filters(engine, UNPARSED, keys)
    # every table it deletes from checked before the first delete (a refusal at body_unparsed came after
    # the typed rows were gone, and bodies never typed those messages again: a review); a dry run is
    # refused as the real run would be (it said "ok")
    plan = typed.planned(lake, gone)
    unparsed = [(UNPARSED.name, engine)] if filters else []
    deleting.check_all_writable([(table, writer) for table, writer, _ in plan] + unparsed, as_engine)
    if dry_run:
        figures = typed.remove(lake, gone, True, "retention")
    else:
        figures = {}
        typed.delete_planned(plan, "retention", figures, {})
    if len(kept):
        log.info("retention: %d removed message(s) keep their typed rows: a journal copy of each stays", len(kept))
    if filters:
        if dry_run:
            figures[UNPARSED.name] = {"rows": count_all(engine, UNPARSED.name, filters)["rows"]}
        else:
            figures[UNPARSED.name] = {"rows": delete_all(engine, UNPARSED.name, filters, "retention")["rows"]}
        log.info(
            "retention %s: %d row(s) %s",
            UNPARSED.name,
            figures[UNPARSED.name]["rows"],
            "counted" if dry_run else "removed",
        )
    return figures, len(kept)


def _copies_left(lake: LakeEngine, ids: pa.Array, taken: list[RetentionFilter] | None) -> pa.Array:
    """Those of ``ids`` that still have a journal row: in a real run, at the journal's version now (after
    this rule's delete, and any rows drained since: a copy drained meanwhile keeps its typed row too);
    in a dry run, where nothing left, a row that none of ``taken`` matches. Read: the journal's
    ``message_id`` column (and the rules' columns), filtered to ``ids``; held: the matching rows' ids."""
    arrow = ds.field("message_id").isin(ids)
    sql = _ids_sql(ids)
    columns: tuple[str, ...] = ("message_id",)
    for rule in taken or []:
        arrow = arrow & ~rule.where.arrow
        sql += f" AND NOT ({rule.where.sql})"
        columns += tuple(c for c in rule.where.columns if c not in columns)
    rows = journal_engine(lake).matching_rows(JOURNAL, RowFilter(sql, arrow, columns), ["message_id"])
    return pc.unique(rows["message_id"].combine_chunks())


def _ids_sql(ids: pa.Array) -> str:
    """The SQL text of ``message_id IN ids``: the lookup is only read (``matching_rows`` evaluates the
    arrow expression, never the text), so past ``_SQL_IDS`` ids the text says how many rather than list
    them all (a retention run removes millions), and would fail to parse if it were ever run."""
    if len(ids) > _SQL_IDS:
        return f'"message_id" IN (<the {len(ids)} message ids of the removed rows>)'
    return '"message_id" IN (' + ", ".join(sql_text(str(v)) for v in ids.to_pylist()) + ")"


def _index(
    lake: LakeEngine, keys: pa.Table, rule: RetentionFilter, dry_run: bool, still_in_journal: bool
) -> dict[str, Any] | None:
    """The removed journal rows' rows of the id index, deleted (``dry_run``: counted) by seq ranges;
    None when there is no index. ``still_in_journal``: the rule's rows are still there (they count as
    gone: the rows between them that stay are those it does not match)."""
    engine = table_engine(lake, KEYS)
    if not engine.exists(KEYS):
        return None
    journal = journal_engine(lake)
    if not dry_run and build.watermark(lake) is not None:
        build.update(lake)  # removed rows drained since the last build get their index rows, to remove now
    version = journal.table_version(JOURNAL)
    assert version is not None
    removed = keys.select(["queue", "seq"])
    span = index_ranges.spans(removed)
    assert span is not None
    if still_in_journal:  # what stays is what the rule does not match
        span = RowFilter(
            f"({span.sql}) AND NOT ({rule.where.sql})",
            span.arrow & ~rule.where.arrow,
            tuple(dict.fromkeys(span.columns + rule.where.columns)),
        )
    kept = journal.matching_rows(JOURNAL, span, ["queue", "seq"], version)
    per_queue = index_ranges.queue_runs(removed, kept)
    where = index_ranges.index_filter(per_queue, version)
    figures: dict[str, Any] = {
        "rows": 0,
        "ranges": sum(len(q.ranges) for q in per_queue),
        "seqs_kept_inside": sum(len(q.excluded) for q in per_queue),
        # removed rows too scattered among kept ones to name (``index_ranges``): their index rows stay
        "seqs_left": sum(q.left for q in per_queue),
        "journal_version": version,
    }
    if where is not None:
        if dry_run:
            figures["rows"] = engine.count_rows(KEYS, where).rows
        else:
            deleted = engine.delete_rows(KEYS, where)
            figures.update(
                rows=deleted.rows, files_removed=deleted.files_removed, files_rewritten=deleted.files_rewritten
            )
    log.info(
        "retention %s: %d row(s) of the removed journal rows %s, named by %d seq range(s) in %d queue(s)",
        KEYS,
        figures["rows"],
        "counted" if dry_run else "removed",
        figures["ranges"],
        len(per_queue),
    )
    if figures["seqs_left"]:
        log.info(
            "retention %s: the index rows of %d removed row(s), scattered among rows that stay, are left as "
            "stale hints (a hint costs a lookup one more file read, never a wrong answer)",
            KEYS,
            figures["seqs_left"],
        )
    return figures
