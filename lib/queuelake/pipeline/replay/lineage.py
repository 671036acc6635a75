"""``replay_lineage``: one row per message a replay sent, linking the copy to its original journal row,
and the outcome of each copy read from the journal when asked (``outcomes``).

Why rows are written from the ledger, not as batches go: a batch's messages and its ledger row commit
in one DB transaction, and a lake append cannot join it. So the ledger is the truth of what was sent,
and the lineage follows it: after the canary batch and at the end of every run (however it ends), the
rows of each batch the ledger holds and the lineage does not are appended (``record_lineage``). A run
killed between a commit and that append leaves the batch out until the next run of the replay id
(the plan cuts the same batches, so the rows come out the same). One run of a replay id at a time
(its session lock), so two appends never race.

Why the outcome is not stored: it changes after the replay (a later drain brings the audit or error
copy), and a stored one would be as old as the last run that wrote it. ``outcomes`` reads it from the
journal's current version each time: a copy's journal rows are those whose ``message_id`` is the id
sent and whose ``queuelake.Replay.Id`` / ``queuelake.Replay.Source`` name this replay and row;
``processed`` when the latest of them is an audit copy, ``failed-again`` when it is an error copy,
``pending`` when there is neither yet.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.lake import record_tables, table_entry
from queuelake.lake.engines import journal_engine
from queuelake.lake.port import LakeEngine
from queuelake.nsb.retry import REPLAY_ID, REPLAY_SOURCE, REPLAY_SOURCE_ID
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.pipeline.message_ids import name_uuid
from queuelake.pipeline.replay.plan import Cut
from queuelake.pipeline.replay.planned import Planned
from queuelake.pipeline.runs import record_engine

LINEAGE = record_tables.REPLAY_LINEAGE.name
LINEAGE_SCHEMA: pa.Schema = record_tables.REPLAY_LINEAGE.schema
PROCESSED, FAILED_AGAIN, PENDING = "processed", "failed-again", "pending"


def sent_ids(replay_id: str, table: pa.Table) -> pa.Array:
    """The ``NServiceBus.MessageId`` each planned row's copy is sent with (``messages.build``): a
    replay's is new, ``uuid5(replay id, MessageId, destination)``; a retry or redirect keeps it (a
    column as it is: only a replay's rows are hashed, one by one)."""
    message_ids = table.column("message_id").combine_chunks().cast(pa.string())
    replays = np.asarray(pc.fill_null(pc.equal(table.column("kind"), "replay"), False).to_numpy(), dtype=bool)
    if not replays.any():
        return message_ids
    at = np.flatnonzero(replays)
    ids, targets = message_ids.take(at).to_pylist(), table.column("target").take(at).to_pylist()
    new = pa.array([name_uuid(f"replay\n{replay_id}\n{m}\n{t}") for m, t in zip(ids, targets, strict=True)])
    return pc.replace_with_mask(message_ids, pa.array(replays), new)


def batch_rows(replay_id: str, planned: Planned, cut: Cut, k: int, now: dt.datetime) -> pa.Table:
    """The lineage rows of batch k (its rows that were sent, ``Planned.sent``)."""
    part = planned.sent(k, cut)
    n = part.num_rows
    return pa.table(
        {
            "replay_id": pa.array([replay_id] * n, pa.string()),
            "queue": part.column("queue"),
            "seq": part.column("seq"),
            "id": part.column("id"),
            "message_id": part.column("message_id"),
            "message_type": part.column("message_type"),
            "kind": part.column("kind"),
            "destination": part.column("target"),
            "sent_message_id": sent_ids(replay_id, part),
            "batch": pa.array(np.full(n, k, dtype=np.int64)),
            "canary": pa.array(np.full(n, bool(cut.canary) and k == 0)),
            "recorded_at": pa.repeat(pa.scalar(now, table_entry.UTC_TS), n),
        },
        schema=LINEAGE_SCHEMA,
    )


def recorded_batches(lake: LakeEngine, replay_id: str) -> set[int]:
    """The batches of ``replay_id`` the lineage holds.

    Read by ``lookup``, not the whole table: the lineage grows with every replay for as long as the lake
    keeps it, and each run's append is one replay id's, so the log's statistics leave out every file
    of the other replays (after a compaction, those whose id range excludes it)."""
    journal = journal_engine(lake)
    if not journal.exists(LINEAGE):
        return set()
    rows = journal.lookup(LINEAGE, "replay_id", [replay_id]).rows
    return set(pc.unique(rows.column("batch")).to_pylist())


def record_lineage(lake: LakeEngine, replay_id: str, planned: Planned, cut: Cut, done: set[int]) -> int:
    """Append the rows of each batch in ``done`` (the ledger's) the lineage does not hold yet; returns
    how many rows were appended."""
    missing = sorted(k for k in done - recorded_batches(lake, replay_id) if k < cut.batches)
    if not missing:
        return 0
    now = dt.datetime.now(dt.timezone.utc)
    rows = pa.concat_tables([batch_rows(replay_id, planned, cut, k, now) for k in missing])
    writer = record_engine(lake, LINEAGE)
    app_id = f"queuelake.replay.lineage/{replay_id}"
    writer.append(LINEAGE, rows, app_id, (writer.last_version(LINEAGE, app_id) or 0) + 1)
    return rows.num_rows


def lineage_of(lake: LakeEngine, replay_id: str) -> pa.Table:
    """The lineage rows of one replay (none: an empty table)."""
    journal = journal_engine(lake)
    if not journal.exists(LINEAGE):
        return LINEAGE_SCHEMA.empty_table()
    return journal.lookup(LINEAGE, "replay_id", [replay_id]).rows.select(LINEAGE_SCHEMA.names)


# the journal columns ``outcomes`` reads of a sent copy (never its body)
_OUTCOME_COLUMNS = ["headers", "failed_queue", "exception_type", "time_of_failure", "processing_ended", "drained_at"]


def outcomes(lake: LakeEngine, lineage: pa.Table) -> pa.Table:
    """``lineage``'s rows with ``outcome`` (processed, failed-again, pending) and ``outcome_at`` (the
    audit copy's ProcessingEnded or the error copy's TimeOfFailure), from the journal's current version."""
    journal = journal_engine(lake)
    wanted = [m for m in pc.unique(pc.drop_null(lineage.column("sent_message_id"))).to_pylist() if m]
    latest: dict[tuple[str, str, str | None], tuple[dt.datetime, str]] = {}
    if wanted and journal.exists(MESSAGES):
        rows = journal.lookup(MESSAGES, "message_id", wanted, columns=_OUTCOME_COLUMNS).rows
        # only the copies a replay sent (its headers say so): a retry keeps the MessageId, so the lookup
        # also finds every failed original, which need not become Python values
        headers = rows.column("headers")
        replay_ids, sources = pc.map_lookup(headers, REPLAY_ID, "last"), pc.map_lookup(headers, REPLAY_SOURCE, "last")
        copies = pc.and_(pc.is_valid(replay_ids), pc.is_valid(sources))
        rows = rows.filter(copies)
        replay_ids, sources = replay_ids.filter(copies).to_pylist(), sources.filter(copies).to_pylist()
        source_ids = pc.map_lookup(rows.column("headers"), REPLAY_SOURCE_ID, "last").to_pylist()
        far = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
        for replay_id, source, source_id, failed_queue, exception, failed_at, ended, drained in zip(
            replay_ids,
            sources,
            source_ids,
            *(
                rows.column(c).to_pylist()
                for c in ("failed_queue", "exception_type", "time_of_failure", "processing_ended", "drained_at")
            ),
            strict=True,
        ):
            if not replay_id or not source:
                continue
            if failed_queue is not None or exception is not None:
                state, at = FAILED_AGAIN, failed_at or drained
            elif ended is not None:
                state, at = PROCESSED, ended
            else:
                continue  # a copy drained from the queue it was sent to: not processed yet
            # by the source's row id too: a re-created queue table's two rows of one queue@seq are two
            # sources (a copy sent before the id was carried names none)
            key = (replay_id, source, source_id or None)
            if key not in latest or (at or far, state) > (latest[key][0] or far, latest[key][1]):
                latest[key] = (at, state)
    if not latest:  # no copy came back to the journal yet: every one pending
        return lineage.append_column("outcome", pa.repeat(pa.scalar(PENDING), lineage.num_rows)).append_column(
            "outcome_at", pa.nulls(lineage.num_rows, table_entry.UTC_TS)
        )
    found = [
        latest.get((r, f"{q}@{s}", i)) or latest.get((r, f"{q}@{s}", None))
        for r, q, s, i in zip(
            lineage.column("replay_id").to_pylist(),
            lineage.column("queue").to_pylist(),
            lineage.column("seq").to_pylist(),
            lineage.column("id").to_pylist(),
            strict=True,
        )
    ]
    return lineage.append_column(
        "outcome", pa.array([f[1] if f else PENDING for f in found], pa.string())
    ).append_column("outcome_at", pa.array([f[0] if f else None for f in found], table_entry.UTC_TS))


ALREADY_SCHEMA = pa.schema(
    [
        pa.field("queue", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("id", pa.string()),  # the selected row's id
        pa.field("replay_id", pa.string()),  # the latest earlier replay that sent it
        pa.field("recorded_at", table_entry.UTC_TS),
        pa.field("outcome", pa.string()),  # that copy's: processed or pending (never failed-again)
    ]
)


def already_replayed(lake: LakeEngine, replay_id: str | None, selected: pa.Table) -> pa.Table:
    """The rows of ``selected`` (queue, seq, id, message_id) an earlier replay than ``replay_id`` sent and
    that have not failed again since: the latest earlier copy of each is not ``failed-again``
    (``outcomes``: processed, or pending, not drained back yet). Why: a replay id sends each row once, but
    the same selection under a new id (a rerun of "retry yesterday's failures") sent every message again,
    silently. One ``lookup`` of the lineage by the selection's MessageIds, then the copies' outcomes."""
    journal = journal_engine(lake)
    if selected.num_rows == 0 or not journal.exists(LINEAGE):
        return ALREADY_SCHEMA.empty_table()
    wanted = pc.unique(pc.drop_null(selected.column("message_id"))).to_pylist()
    sent = journal.lookup(LINEAGE, "message_id", wanted).rows.select(LINEAGE_SCHEMA.names)
    if replay_id is not None:  # this replay's own rows: a resume, sent once per replay id anyway
        sent = sent.filter(pc.not_equal(sent.column("replay_id"), replay_id))
    if sent.num_rows == 0:
        return ALREADY_SCHEMA.empty_table()
    # the selected row by queue, seq and row id (an id missing on either side: by queue and seq)
    keys = pa.table(  # as the lineage types them (a Spark selection's may be large or dictionary strings)
        {
            "queue": selected.column("queue").cast(pa.string()),
            "seq": selected.column("seq").cast(pa.int64()),
            "selected_id": selected.column("id").cast(pa.string()),
        }
    )
    joined = sent.join(keys, ["queue", "seq"], join_type="inner")
    joined = joined.filter(pc.fill_null(pc.equal(joined.column("id"), joined.column("selected_id")), True))
    if joined.num_rows == 0:
        return ALREADY_SCHEMA.empty_table()
    judged = outcomes(lake, joined).sort_by(
        [("queue", "ascending"), ("seq", "ascending"), ("selected_id", "ascending"), ("recorded_at", "descending")]
    )
    # each selected row's latest earlier copy: the first of its run of rows, in Arrow (100,000 rows a rerun
    # of a retry selects took seconds as Python values)
    same = np.ones(max(judged.num_rows - 1, 0), dtype=bool)  # row i + 1 is of row i's selected row
    for name in ("queue", "seq", "selected_id"):
        column = judged.column(name).combine_chunks()
        values = column.cast(pa.string()).to_numpy(zero_copy_only=False)
        nulls = column.is_null().to_numpy(zero_copy_only=False)
        same &= (values[1:] == values[:-1]) & (nulls[1:] == nulls[:-1])
    first = np.concatenate([np.ones(min(judged.num_rows, 1), dtype=bool), ~same])
    latest = judged.filter(pa.array(first))
    kept = latest.filter(pc.fill_null(pc.not_equal(latest.column("outcome"), FAILED_AGAIN), True))
    names = ("queue", "seq", "selected_id", "replay_id", "recorded_at", "outcome")
    return pa.table([kept.column(c).cast(f.type) for c, f in zip(names, ALREADY_SCHEMA, strict=True)], ALREADY_SCHEMA)
