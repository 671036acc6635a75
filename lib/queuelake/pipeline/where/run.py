"""``queuelake where``: every place a message (or a conversation, or the messages of a business key)
is or was, from the lake and the queue tables, in one answer.

Why: "why has order 4711 not been processed yet?" is asked of a live system, and the answer is in
several places at once: the queue tables (still waiting, delayed), and the journal (drained, processed
by an endpoint, failed, expired, retried or replayed by queuelake), and the records of replays. This
module asks each, in this order:

1. the lake, without Spark: a business key through the typed body tables (``keys.py``) to message
   ids; the journal rows of the ids (``key_index.search.journal_rows``: the id index's candidate rows,
   then only the journal files their ``(queue, seq)`` statistics admit and those drained since the
   index was built; without an index, one column of every file; as ``queuelake find``, whose
   ``search`` this reuses); for a message, its replays
   (copies with a new id that name it: found through its conversation's rows); the replays' records
   (``replays``, ``replay_skipped``); erase runs whose predicate names it (erase keeps no per-message
   record, ``pipeline/store/erase.py``);
2. the queue database: every queue table the config names (``drain.queues``, the transforms'
   destinations), those ``--queue`` adds, and those the journal rows name (an error copy's
   ``FailedQ``, an audit copy's processing endpoint, a replay's ``--to``), and the delayed-delivery
   tables of ``transport.delayed_endpoints``; each read without taking or locking a row, within a
   time limit (``transport/peek_rows.py``); every candidate row checked by its decoded headers (or
   its parsed body, for a business key).
What could not be searched (a table missing, a read out of time, no typed table with the field) is
said in the answer, never left out silently.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.config import Config
from queuelake.errors import ArgumentError, HeaderError, LakeError, TransportError
from queuelake.lake import record_tables
from queuelake.lake.port import LakeEngine
from queuelake.nsb import headers as hdr
from queuelake.nsb.retry import REPLAY_ORIGINAL_MESSAGE_ID
from queuelake.pipeline.find import search
from queuelake.pipeline.find.ids import check_id, spellings
from queuelake.pipeline.key_index.search import journal_rows
from queuelake.pipeline.runs import read_runs
from queuelake.pipeline.where import keys
from queuelake.pipeline.where.places import Place, from_journal, from_queue_row
from queuelake.report import log
from queuelake.transport import claims, schema, subscriptions
from queuelake.transport.db import Connection
from queuelake.transport.peek_rows import DEFAULT_LIMIT, Peeked, peek_matching
from queuelake.transport.table_refs import TableRef, bridge_ref, queue_ref

MESSAGES = record_tables.MESSAGES.name
_JOURNAL_SCHEMA: pa.Schema = record_tables.MESSAGES.schema
_REPLAYS_SCHEMA: pa.Schema = record_tables.REPLAYS.schema


@dataclass(frozen=True)
class Query:
    """What is asked: ``by`` message, conversation or key; ``text`` the id, or the key's value."""

    by: str
    text: str
    field: str | None = None
    queues: tuple[str, ...] = ()  # more queue tables to read
    peek: bool = True  # read the queue tables at all
    time_limit_s: float = 5.0  # per table read
    limit: int = DEFAULT_LIMIT  # rows per table read
    max_messages: int = 100  # of a business key


@dataclass
class Answer:
    places: list[Place] = field(default_factory=list)
    searched: tuple[str, ...] = ()
    journal: dict[str, Any] = field(default_factory=dict)
    typed: dict[str, Any] = field(default_factory=dict)
    queues: dict[str, Any] = field(default_factory=dict)
    replays: dict[str, dict[str, Any]] = field(default_factory=dict)
    erase_runs: int = 0
    lineage_queues: list[str] = field(default_factory=list)  # where replays sent the messages (``replay_lineage``)
    not_searched: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def messages(self) -> dict[str, list[Place]]:
        out: dict[str, list[Place]] = {}
        for place in self.places:
            out.setdefault(place.message_id or "?", []).append(place)
        return out


def where(cfg: Config, lake: LakeEngine, connect: Callable[[], Connection] | None, query: Query) -> Answer:
    """Ask the lake, then (with ``connect``) the queue tables; the places in a message's time order."""
    if query.by not in ("message", "conversation", "key"):
        raise ArgumentError(f"where by {query.by!r}: by message, conversation or key")
    answer = Answer()
    started = time.monotonic()
    ids: list[str] = []
    if query.by == "key":
        assert query.field is not None
        found = keys.find_key(lake, query.field, query.text, query.max_messages)
        ids = found.message_ids
        answer.searched = (query.text,)
        answer.typed = {
            "tables_searched": found.tables_searched,
            "tables_without_field": found.tables_without_field,
            "journal_version_typed": found.journal_version_typed,
            "journal_files_untyped": _untyped_files(lake, found.journal_version_typed),
            "message_ids": len(ids),
            "truncated": found.truncated,
        }
        answer.not_searched += found.not_searchable
        if found.truncated:
            answer.notes.append(f"more than {query.max_messages} messages carry the key: the first ones are shown")
        answer.seconds["typed"] = round(time.monotonic() - started, 3)
    else:
        answer.searched = spellings(check_id(query.text))
    rows = _journal(lake, query, ids, answer)
    answer.places += [from_journal(row) for row in rows.to_pylist()]
    if query.by == "message" and rows.num_rows:
        answer.places += _replays_of(lake, rows, answer)
    _records(lake, answer, query.by)
    _lineage(lake, answer)
    _replay_records(lake, answer)  # before the queues: a replay's --to queue is read too
    answer.seconds["lake"] = round(time.monotonic() - started, 3)
    if query.peek and connect is not None:
        t0 = time.monotonic()
        _peek(cfg, connect, query, answer)
        answer.seconds["queues"] = round(time.monotonic() - t0, 3)
        _replay_records(lake, answer)  # replays named only by rows still waiting
    elif not query.peek:
        answer.not_searched.append("the queue tables (--no-peek)")
    answer.places.sort(key=Place.sort_key)
    _notes(cfg, query, answer)
    return answer


# ---------------------------------------------------------------------------------------- the lake


def _journal(lake: LakeEngine, query: Query, ids: list[str], answer: Answer) -> pa.Table:
    """The journal rows of the message, conversation or key's messages (``find``'s lookup)."""
    if not lake.exists(MESSAGES):
        answer.not_searched.append(f"the journal: lake table {MESSAGES!r} does not exist under {lake.root}")
        return _JOURNAL_SCHEMA.empty_table()
    if query.by == "key":
        if not ids:
            answer.journal = {"found": 0}
            return _JOURNAL_SCHEMA.empty_table()
        result, index = journal_rows(lake, "message_id", ids)
        rows = search.in_time_order(result.rows)
        answer.journal = {
            "version": result.version,
            "files": result.files,
            "files_pruned": result.files_pruned,
            "files_scanned": result.files_scanned,
            "files_read": result.files_matched,
            "rows_scanned": result.rows_scanned,
            "found": rows.num_rows,
            "index": index,
        }
        return rows
    found = search.find(lake, query.by, query.text)  # a message's: its expired rows by the row id too
    rows = found.rows
    answer.journal = {
        "version": found.journal_version,
        "files": found.files,
        "files_pruned": found.files_pruned,
        "files_scanned": found.files_scanned,
        "files_read": found.files_read,
        "rows_scanned": found.rows_scanned,
        "found": rows.num_rows,
        "index": found.index,
    }
    return rows


def _untyped_files(lake: LakeEngine, typed: int | None) -> int | None:
    """How many journal files landed after the version the typed tables were brought up to: rows a
    business key cannot find there yet. Counted from the Delta log's data-changing adds
    (``added_files``), so a compaction, a retention delete or an erase, which add versions but no new
    rows, do not count (``None``: no typed tables, or no journal; -1: some, how many unknown, the commits
    since being past the Delta log's retention: ``bodies`` has not run for that long)."""
    if typed is None or not lake.exists(MESSAGES):
        return None
    version = lake.table_version(MESSAGES)
    if version is None or version <= typed:
        return 0
    try:
        return len(lake.added_files(MESSAGES, typed, version))
    except LakeError:  # the commits since are past the log's retention: how many is unknown (the note says so)
        return -1


def _replays_of(lake: LakeEngine, rows: pa.Table, answer: Answer) -> list[Place]:
    """Journal rows of replays of this message: a replay gives a copy a new MessageId and names the
    original in ``queuelake.Replay.OriginalMessageId``; it keeps the conversation, so the
    conversation's rows are looked up and those naming one of the message's ids kept."""
    conversations = [c for c in pc.unique(pc.drop_null(rows.column("conversation_id"))).to_pylist() if c]
    if not conversations:
        return []
    own = set(answer.searched)
    result, _ = journal_rows(lake, "conversation_id", conversations)
    originals = pc.map_lookup(result.rows.column("headers"), REPLAY_ORIGINAL_MESSAGE_ID, "last")
    replays = result.rows.filter(pc.is_in(originals, value_set=pa.array(sorted(own), pa.string())))
    answer.journal["replay_rows"] = replays.num_rows
    return [from_journal(row) for row in search.in_time_order(replays).to_pylist()]


def _records(lake: LakeEngine, answer: Answer, by: str) -> None:
    """The replays' records of the found places (``replays``), replays that skipped the messages
    (``replay_skipped``), and erase runs whose predicate names the id or a message id. An erase that
    names the conversation asked about is a note, not a message: it was listed as an erased message
    whose id was the conversation's."""
    ids = sorted({p.message_id for p in answer.places if p.message_id} | set(answer.searched))
    skipped_table = record_tables.REPLAY_SKIPPED.name
    if ids and lake.exists(skipped_table):
        skipped = lake.lookup(skipped_table, "message_id", ids).rows
        for row in skipped.to_pylist():
            answer.places.append(
                Place(
                    place="replay-skipped",
                    message_id=row.get("message_id"),
                    location=row.get("queue"),
                    at=row.get("recorded_at"),
                    detail=f"replay {row.get('replay_id')} did not send it: {row.get('reason')}",
                    source="replay_skipped",
                    facts={"replay_id": row.get("replay_id"), "seq": row.get("seq"), "reason": row.get("reason")},
                )
            )
    if lake.exists(record_tables.RUNS.name):
        rows = read_runs(lake, ["run_id", "command", "table", "predicate", "ended_at", "status"])
        erases = rows.filter(pc.equal(rows.column("command"), "erase"))
        seen: set[str] = set()
        answer.erase_runs = len(set(erases.column("run_id").to_pylist()))
        for row in erases.to_pylist():
            predicate = row.get("predicate") or ""
            named = named_by(predicate, ids)
            if not named or row["run_id"] in seen:
                continue
            seen.add(row["run_id"])
            if by == "conversation" and all(i in answer.searched for i in named):
                answer.notes.append(
                    f"erase run {row['run_id']} ({row.get('status')}) named this conversation: --where {predicate}"
                )
                continue
            answer.places.append(
                Place(
                    place="erased",
                    message_id=named[0],
                    location=MESSAGES,
                    at=row.get("ended_at"),
                    detail=f"erase run {row['run_id']} ({row.get('status')}): --where {predicate}",
                    source="runs",
                    facts={"run_id": row["run_id"], "predicate": predicate},
                )
            )


def named_by(predicate: str, ids: list[str]) -> list[str]:
    """The ``ids`` an erase's predicate names: a text literal equal to one, or a LIKE pattern matching it.
    Why not a substring of the predicate's text: every short id or ``--value`` (``2``, ``x``) is part of
    some erase's predicate, and was reported erased (a review)."""
    import sqlglot
    from sqlglot import errors, exp

    try:
        tree = sqlglot.parse_one(predicate, read="spark")
    except (errors.ParseError, errors.TokenError):
        return []

    def of_an_id(literal: exp.Literal) -> bool:  # compared with a column holding ids, not a queue's name
        column = literal.parent.find(exp.Column) if literal.parent is not None else None
        return literal.is_string and column is not None and column.name.lower() in _ID_COLUMNS

    patterns = [like.expression for like in tree.find_all(exp.Like)]
    literals = [lit for lit in tree.find_all(exp.Literal) if of_an_id(lit)]
    exact = {lit.this for lit in literals if not any(lit is p for p in patterns)}
    likes = [_like_regex(lit.this) for lit in literals if any(lit is p for p in patterns)]
    return [i for i in ids if i in exact or any(r.fullmatch(i) for r in likes)]


_ID_COLUMNS = frozenset({"message_id", "conversation_id", "id"})


def _like_regex(pattern: str) -> re.Pattern[str]:
    """SQL LIKE (``%`` any run, ``_`` one character) as a regular expression."""
    return re.compile("".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern), re.DOTALL)


def _lineage(lake: LakeEngine, answer: Answer) -> None:
    """Where replays sent the messages found (``replay_lineage``: one row per message a replay sent),
    so that those queues are read: a copy still waiting there is in no journal row yet, and a replay
    ``--to`` a queue gives it a new MessageId that only the copy's headers link to the original."""
    table = record_tables.REPLAY_LINEAGE.name
    ids = sorted({p.message_id for p in answer.places if p.message_id} | set(answer.searched))
    if not ids or not lake.exists(table):
        return
    rows = lake.lookup(table, "message_id", ids).rows
    answer.lineage_queues = sorted({d for d in rows.column("destination").to_pylist() if d})


def _replay_records(lake: LakeEngine, answer: Answer) -> None:
    """Each replay id the places name, with its ``replays`` row (when, what, status)."""
    wanted = {p.facts["replay_id"] for p in answer.places if p.facts.get("replay_id")}
    if not wanted:
        return
    table = record_tables.REPLAYS.name
    records = lake.read_arrow(table) if lake.exists(table) else _REPLAYS_SCHEMA.empty_table()
    records = records.filter(pc.is_in(records.column("replay_id"), value_set=pa.array(sorted(wanted), pa.string())))
    for replay_id in sorted(wanted):
        answer.replays[replay_id] = {"recorded": False}
    # a resumed replay has several runs: the last one wins, by when it started (the table's files come back
    # in any order: a review saw the first, interrupted run win over the one that finished it)
    for row in records.sort_by([("started_at", "ascending"), ("ended_at", "ascending")]).to_pylist():
        answer.replays[row["replay_id"]] = {
            "recorded": True,
            "run_id": row["run_id"],
            "started_at": row["started_at"],
            "ended_at": row["ended_at"],
            "predicate": row["predicate"],
            "to_queue": row["to_queue"],
            "selected": row["selected"],
            "total_sent": row["total_sent"],
            "status": row["status"],
        }


# ---------------------------------------------------------------------------------------- the queues


def _tables(cfg: Config, query: Query, answer: Answer) -> tuple[list[TableRef], list[TableRef]]:
    """(queue tables, delayed tables) to read, each once."""
    t = cfg.transport
    names = [*cfg.drain.queues, *(d for tr in cfg.transforms for d in tr.destinations), *query.queues]
    for place in answer.places:  # queues the journal rows name: the endpoint's own queue
        names += [v for k, v in place.facts.items() if k == "failed_queue" and v]
        if place.place == "processed" and place.endpoint:
            names.append(place.endpoint)
    names += [r["to_queue"] for r in answer.replays.values() if r.get("to_queue")]
    names += answer.lineage_queues
    # an endpoint that receives delayed messages has its input queue beside its delayed table
    names += list(t.delayed_endpoints)
    queues: dict[str, TableRef] = {}
    for name in names:
        try:
            ref = queue_ref(name, t)
        except ValueError as exc:  # an address from a row that this dialect cannot read
            answer.not_searched.append(f"queue {name!r}: {exc}")
            continue
        queues.setdefault(ref.canonical, ref)
    delayed: dict[str, TableRef] = {}
    for endpoint in t.delayed_endpoints:
        ref = queue_ref(endpoint, t).delayed()
        delayed.setdefault(ref.canonical, ref)
    return list(queues.values()), list(delayed.values())


def _match(query: Query, searched: set[str], headers: dict[str, str | None], row_id: str | None) -> bool:
    if query.by == "conversation":
        return headers.get(hdr.CONVERSATION_ID) in searched
    message_id = headers.get(hdr.MESSAGE_ID) or row_id
    return message_id in searched or headers.get(REPLAY_ORIGINAL_MESSAGE_ID) in searched


def _peek(cfg: Config, connect: Callable[[], Connection], query: Query, answer: Answer) -> None:
    queues, delayed = _tables(cfg, query, answer)
    needle = answer.searched[-1]  # a GUID's canonical spelling: the one NServiceBus writes
    body = written_alike(query.text).encode("utf-8") if query.by == "key" else None
    header_text = None if query.by == "key" else written_alike(needle)
    searched = set(answer.searched)
    figures: dict[str, Any] = {"tables": 0, "rows_read": 0, "missing": [], "failed": {}, "truncated": []}
    try:
        conn = connect()
    except TransportError as exc:
        answer.not_searched.append(f"the queue tables: {exc}")
        answer.queues = figures
        return
    with conn:
        for ref in _subscribers(conn, cfg, answer):
            if all(q.canonical != ref.canonical for q in queues):
                queues.append(ref)
        for ref, is_delayed in [(q, False) for q in queues] + [(d, True) for d in delayed]:
            peeked = peek_matching(conn, ref, header_text, body, is_delayed, query.limit, query.time_limit_s)
            _take(peeked, query, searched, answer, figures)
        _unresolved_claims(conn, cfg, answer)
    answer.queues = figures


def _unresolved_claims(conn: Connection, cfg: Config, answer: Answer) -> None:
    """A note when drain claims wait: rows a drain took from their queue and could not commit to the
    journal (stopped, or its commit failed) are in neither until the next drain lands them. Why: a
    message held so was "found nowhere" while ``status`` counted the claim (a review)."""
    try:
        waiting = claims.summary(conn, claims.claims_ref(cfg.transport))
        conn.rollback()
    except TransportError as exc:  # no claims table yet (before install): nothing waits
        conn.rollback()
        log.debug("where: the drain claims were not read: %s", exc)
        return
    if waiting:
        rows = sum(q.rows for q in waiting)
        answer.notes.append(
            f"{sum(q.claims for q in waiting)} unresolved drain claim(s) hold {rows} row(s) of "
            f"{', '.join(q.queue for q in waiting)}: taken from their queue by a drain stopped before its journal "
            "commit, they are in neither until the next drain lands them; the message may be among them"
        )


# characters every JSON writer writes as themselves (System.Text.Json escapes non-ASCII and ``+&<>'"`` as
# ``\uXXXX`` by default, in upper-case hex; Newtonsoft does not; some writers escape ``/``)
_WRITTEN_ALIKE = re.compile(r"[A-Za-z0-9._:@ -]+")


def written_alike(text: str) -> str:
    """What the queue tables are searched for: the longest run of ``text`` that any JSON writer spells as
    it is, so that a header or body holding it escaped (``peek-\u00fc-1`` for ``peek-ü-1``) is a
    candidate too; each candidate is then checked on its decoded headers or body. A GUID is itself. Why:
    such rows were not found (a review)."""
    runs = _WRITTEN_ALIKE.findall(text)
    return max(runs, key=len) if runs else text


def _subscribers(conn: Connection, cfg: Config, answer: Answer) -> list[TableRef]:
    """The queues of every subscriber in the subscription table (``status`` lists them too): the
    endpoints' input queues that an event, or anything else, may be waiting in."""
    t = cfg.transport
    routing = bridge_ref(t.subscription_table, t)
    try:
        addresses = subscriptions.all_subscribers(conn, routing) if schema.table_exists(conn, routing) else []
    except TransportError as exc:
        answer.not_searched.append(f"the subscribers in {routing.canonical}: {exc}")
        addresses = []
    finally:
        conn.rollback()
    refs = []
    for address in addresses:
        try:
            refs.append(queue_ref(address, t))
        except ValueError as exc:  # another program's row
            answer.not_searched.append(f"subscriber {address!r}: {exc}")
    return refs


def _take(peeked: Peeked, query: Query, searched: set[str], answer: Answer, figures: dict[str, Any]) -> None:
    figures["tables"] += 1
    figures["rows_read"] += len(peeked.rows)
    if peeked.missing:
        figures["missing"].append(peeked.table)
        return
    if peeked.error:
        figures["failed"][peeked.table] = peeked.error
        answer.not_searched.append(f"{peeked.table}: {peeked.error}")
        return
    if peeked.truncated:
        figures["truncated"].append(peeked.table)
        answer.notes.append(f"{peeked.table}: more than {query.limit} candidate rows; the first ones were checked")
    for row in peeked.rows:
        try:
            headers = hdr.decode_map(row.headers)
        except HeaderError:
            headers = {}
        if query.by == "key":
            assert query.field is not None
            ok = keys.body_matches(row.body, query.field, query.text)
        else:
            ok = _match(query, searched, headers, row.id)
        if ok:
            answer.places.append(from_queue_row(peeked.table, row, headers, peeked.delayed))
    log.info(
        "where: %s %s read in %.2fs (%d candidate row(s))",
        "delayed table" if peeked.delayed else "queue",
        peeked.table,
        peeked.seconds,
        len(peeked.rows),
    )


def _notes(cfg: Config, query: Query, answer: Answer) -> None:
    """What the answer cannot show, said once."""
    untyped = answer.typed.get("journal_files_untyped")
    if query.by == "key" and untyped:
        typed = answer.typed["journal_version_typed"]
        files = "journal file(s)" if untyped < 0 else f"{untyped} journal file(s)"
        answer.notes.append(
            f"the typed tables cover the journal up to version {typed}; {files} drained since are not typed "
            "yet: their messages are found by key only in the queues (run queuelake bodies)"
        )
    if cfg.lake.retention.rules or cfg.lake.retention.default_days is not None:
        answer.notes.append("lake.retention removes old journal rows (maintain): a retired message leaves no trace")
    answer.notes.append(
        "erase keeps no per-message record: a message erased by a predicate that does not name it looks never drained"
    )
    if not answer.places:  # the other way a message leaves no trace: deleted from its queue before a drain
        answer.notes.append(
            "purge-expired deletes expired messages from the queue tables before any drain: such a message leaves "
            "no trace (its count is in purge-expired's runs rows)"
        )
    if any(p.place == "failed" for p in answer.places) and not any(
        p.place in ("retried", "replayed") for p in answer.places
    ):
        answer.notes.append("a retry the endpoint has already taken shows once its audit or error copy is drained")
