"""``message_keys`` brought up to the journal's current version: the ids of the journal rows added since
the version it covers, one index row per journal row and key kind, each increment sorted by key.

Why an index at all: message and conversation ids are random GUIDs, so every journal file's
``[min, max]`` of them spans nearly the whole range and the log's statistics prune nothing; a lookup
read the id column of every file (bench/where.py: 1,003 files at 10,000,000 rows, 0 pruned). The index
maps an id to the journal rows' ``(queue, seq)``, and a drain's file holds one queue's consecutive
seqs: the journal's own statistics of ``(queue, seq)`` then leave the few files holding the rows
(``search.py``).

Why ``maintain`` runs it, not the drain: it reads only the files added since its watermark (five
small columns, never headers or bodies) and commits to a table of its own, so it never waits on the
drain nor makes the drain wait. The watermark is the application transaction ``APP_ID`` (the journal
version covered), written with the last chunk of the increment; earlier chunks of a large increment
go under ``PART_APP_ID`` so that memory holds ``CHUNK_ROWS`` index rows at most. A run killed between
chunks leaves rows the next run writes again: duplicates, which lookups and ``rewrite`` ignore.
Journal rows re-added by a compaction or a delete (``added_files`` leaves them out) were indexed
when first added.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.errors import LakeError
from queuelake.lake import record_tables
from queuelake.lake.engines import journal_engine, table_engine
from queuelake.lake.port import LakeEngine
from queuelake.lake.round_files import open_file
from queuelake.report import log

APP_ID = "queuelake.message_keys"
PART_APP_ID = "queuelake.message_keys.part"
KEYS = record_tables.MESSAGE_KEYS.name
SCHEMA: pa.Schema = record_tables.MESSAGE_KEYS.schema
MESSAGES = record_tables.MESSAGES.name
KINDS = ("message_id", "conversation_id", "id")
_READ = ["queue", "seq", "id", "message_id", "conversation_id"]
CHUNK_ROWS = 2_000_000  # index rows held before a chunk is written (~150 MB of Arrow)


@dataclass
class Built:
    journal_version: int | None = None
    indexed_after: int | None = None  # the journal version covered before (None: nothing)
    files_read: int = 0
    journal_rows: int = 0
    index_rows: int = 0
    chunks: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "journal_version": self.journal_version,
            "indexed_after": self.indexed_after,
            "journal_files_read": self.files_read,
            "journal_rows_read": self.journal_rows,
            "index_rows_written": self.index_rows,
            "chunks": self.chunks,
        }


def watermark(lake: LakeEngine) -> int | None:
    """The journal version the index covers (None: no index)."""
    keys = table_engine(lake, KEYS)
    return keys.last_version(KEYS, APP_ID) if keys.exists(KEYS) else None


def update(lake: LakeEngine, upto: int | None = None) -> Built:
    """Index the journal rows added since the watermark, up to the journal's current version (or
    ``upto``: bench/where.py leaves the last files unindexed, as a drain since the last maintain does)."""
    journal = journal_engine(lake)
    keys = table_engine(lake, KEYS)
    upto = journal.table_version(MESSAGES) if upto is None else upto
    built = Built(journal_version=upto, indexed_after=watermark(lake))
    if upto is None:
        return built
    after = built.indexed_after
    if after is not None and after >= upto:
        log.debug("message_keys: up to date with journal version %d", upto)
        return built
    try:
        files = journal.added_files(MESSAGES, after, upto)
    except LakeError as exc:  # the log no longer holds a commit since the watermark: index it all again
        log.warning("message_keys: %s; indexing the whole journal again", exc)
        files = journal.added_files(MESSAGES, None, upto)
    pending: list[pa.Table] = []
    held = 0
    for uri in files:
        lake_file = open_file(uri)
        present = set(lake_file.schema_arrow.names)
        rows = lake_file.read(columns=[c for c in _READ if c in present])
        built.files_read += 1
        built.journal_rows += rows.num_rows
        part = keys_of(rows, upto)
        pending.append(part)
        held += part.num_rows
        if held >= CHUNK_ROWS:
            part_version = (keys.last_version(KEYS, PART_APP_ID) or 0) + 1
            _write(keys, pending, PART_APP_ID, part_version, built)
            pending, held = [], 0
    _write(keys, pending, APP_ID, upto, built)
    log.debug(
        "message_keys: journal versions (%s, %d]: %d file(s), %d row(s) indexed as %d key(s)",
        after,
        upto,
        built.files_read,
        built.journal_rows,
        built.index_rows,
    )
    return built


def reindex_all(lake: LakeEngine) -> Built:
    """Every journal row indexed again, beside the index's rows (duplicates, which lookups and ``rewrite``
    ignore), the watermark kept. Why: an erase an older version left stopped, with no record of its
    selection, may have deleted index rows of journal rows it did not delete; read again from the journal,
    the index names every row the journal holds (``erase.finish_pending``). Chunks under ``PART_APP_ID``,
    whose versions only grow: the watermark's own transaction, at a version already written, would be
    taken as done and skipped."""
    journal = journal_engine(lake)
    keys = table_engine(lake, KEYS)
    upto = journal.table_version(MESSAGES)
    built = Built(journal_version=upto, indexed_after=None)
    if upto is None or not keys.exists(KEYS):
        return built
    pending: list[pa.Table] = []
    held = 0
    for uri in journal.added_files(MESSAGES, None, upto):
        lake_file = open_file(uri)
        present = set(lake_file.schema_arrow.names)
        rows = lake_file.read(columns=[c for c in _READ if c in present])
        built.files_read += 1
        built.journal_rows += rows.num_rows
        pending.append(keys_of(rows, upto))
        held += pending[-1].num_rows
        if held >= CHUNK_ROWS:
            _write(keys, pending, PART_APP_ID, (keys.last_version(KEYS, PART_APP_ID) or 0) + 1, built)
            pending, held = [], 0
    if pending:
        _write(keys, pending, PART_APP_ID, (keys.last_version(KEYS, PART_APP_ID) or 0) + 1, built)
    return built


def keys_of(rows: pa.Table, upto: int) -> pa.Table:
    """The index rows of journal ``rows``: a message id and a conversation id per row (where set), and
    the row's ``id`` where it is not its message id (an expired copy keeps no headers: ``where`` finds
    it by the row id). ``upto``: the journal version of the increment."""
    n = rows.num_rows

    def column(name: str) -> pa.Array:
        if name not in rows.column_names:
            return pa.nulls(n, pa.string())
        return rows.column(name).combine_chunks().cast(pa.string())

    queue, seq = column("queue"), rows.column("seq").combine_chunks().cast(pa.int64())
    message_id, row_id = column("message_id"), column("id")
    wanted = {
        "message_id": (message_id, pc.is_valid(message_id)),
        "conversation_id": (column("conversation_id"), pc.is_valid(column("conversation_id"))),
        "id": (row_id, pc.and_(pc.is_valid(row_id), pc.fill_null(pc.not_equal(row_id, message_id), True))),
    }
    parts = []
    for kind, (values, mask) in wanted.items():
        picked = values.filter(mask)
        m = len(picked)
        parts.append(
            pa.Table.from_arrays(
                [
                    picked,
                    pa.array([kind] * m, pa.string()),
                    queue.filter(mask),
                    seq.filter(mask),
                    pa.array([upto] * m, pa.int64()),
                    pa.array([0] * m, pa.int64()),
                ],
                schema=SCHEMA,
            )
        )
    return pa.concat_tables(parts)


def _write(keys: LakeEngine, pending: list[pa.Table], app_id: str, version: int, built: Built) -> None:
    data = pa.concat_tables(pending) if pending else SCHEMA.empty_table()
    data = data.sort_by("key")
    keys.append(KEYS, data, app_id, version)
    built.index_rows += data.num_rows
    built.chunks += 1
