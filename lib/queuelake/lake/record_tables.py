"""The journal and the commands' records: ``messages`` (every row ever dequeued), ``runs`` (one row per
command run and queue or table), and replay's ``replays``, ``replay_skipped`` and ``replay_lineage``.

Why together: these are the tables delta-rs writes whatever ``lake.engine`` says (``DELTA_RS`` in
``table_entry.py`` says why), the ones a command writes without Spark. ``catalogue.py`` lists them.
"""

from __future__ import annotations

import pyarrow as pa

from queuelake.lake.table_entry import DELTA_RS, UTC_TS, LakeTable

_STR_MAP = pa.map_(pa.string(), pa.string())

MESSAGES = LakeTable(
    "messages",
    pa.schema(
        [
            pa.field("queue", pa.string(), nullable=False),
            pa.field("seq", pa.int64(), nullable=False),
            pa.field("id", pa.string(), nullable=False),
            pa.field("batch_id", pa.string(), nullable=False),
            pa.field("drained_at", UTC_TS, nullable=False),
            pa.field("outcome", pa.string(), nullable=False),
            pa.field("error", pa.string()),
            pa.field("headers", _STR_MAP),
            pa.field("body", pa.binary()),
            pa.field("expires", UTC_TS),
            pa.field("raw_headers", pa.string()),
            pa.field("message_id", pa.string()),
            pa.field("message_intent", pa.string()),
            pa.field("enclosed_message_types", pa.list_(pa.string())),
            pa.field("message_type", pa.string()),
            pa.field("content_type", pa.string()),
            pa.field("conversation_id", pa.string()),
            pa.field("correlation_id", pa.string()),
            pa.field("reply_to_address", pa.string()),
            pa.field("originating_endpoint", pa.string()),
            pa.field("originating_machine", pa.string()),
            pa.field("time_sent", UTC_TS),
            pa.field("processing_started", UTC_TS),
            pa.field("processing_ended", UTC_TS),
            pa.field("processing_endpoint", pa.string()),
            pa.field("failed_queue", pa.string()),
            pa.field("exception_type", pa.string()),
            pa.field("exception_message", pa.string()),
            pa.field("time_of_failure", UTC_TS),
            # the original text of an Expires the journal's type cannot hold (infinity, -infinity, a BC
            # date, a year past 9999), which ``expires`` then holds clamped to 0001-01-01 or to the last
            # microsecond of 9999; null for every other row. Last: journals made before it gain it
            # at the end (``add_columns``), and a new journal has the same column order.
            pa.field("raw_expires", pa.string()),
        ]
    ),
    "drain",
    "the journal: every row ever dequeued, exactly once, landed / expired / quarantined",
    engine=DELTA_RS,
    dictionary_columns=(
        "queue",
        "batch_id",
        "outcome",
        "error",
        "headers.key_value.key",  # the keys repeat in every row; the values (ids, times) mostly do not
        "message_intent",
        "enclosed_message_types",
        "message_type",
        "content_type",
        "reply_to_address",
        "originating_endpoint",
        "originating_machine",
        "processing_endpoint",
        "failed_queue",
        "exception_type",
    ),
    no_parquet_statistics=(
        "headers",
        "body",
        "enclosed_message_types",
        "raw_headers",
        "error",
        "exception_message",
        "raw_expires",
    ),
    uncompressed_columns=("id", "message_id", "conversation_id", "correlation_id"),
    row_group_rows=10_000,
)

RUNS = LakeTable(
    "runs",
    pa.schema(
        [
            pa.field("run_id", pa.string(), nullable=False),
            pa.field("command", pa.string(), nullable=False),
            # what the row is about: a queue (drain, purge-expired, replay's destination) or a lake
            # table (transform's and publish's output, a maintained table)
            pa.field("queue", pa.string()),
            pa.field("table", pa.string()),
            pa.field("started_at", UTC_TS, nullable=False),
            pa.field("ended_at", UTC_TS, nullable=False),
            # drain
            pa.field("dequeued", pa.int64()),
            pa.field("landed", pa.int64()),
            pa.field("expired", pa.int64()),
            pa.field("quarantined", pa.int64()),
            pa.field("backlog_left", pa.int64()),
            # transform
            pa.field("rows_in", pa.int64()),
            pa.field("rows_out", pa.int64()),
            # publish (published and batches: replay too)
            pa.field("published", pa.int64()),
            pa.field("fanned_out", pa.int64()),
            pa.field("undeliverable", pa.int64()),
            pa.field("rejected", pa.int64()),
            pa.field("failed_expectations", pa.string()),  # JSON: GX's details of what blocked the round
            # purge-expired
            pa.field("purged", pa.int64()),
            # maintain
            pa.field("files_compacted", pa.int64()),
            pa.field("files_vacuumed", pa.int64()),
            # maintain's retention and erase: rows and files that left the table (files_rewritten: the
            # files written anew with the kept rows of files that held some rows to remove)
            pa.field("rows_removed", pa.int64()),
            pa.field("files_removed", pa.int64()),
            pa.field("files_rewritten", pa.int64()),
            pa.field("predicate", pa.string()),  # erase's --where (never the rows' content)
            # every command
            pa.field("batches", pa.int64()),
            pa.field("seconds", pa.float64()),
            pa.field("rate", pa.float64()),
            pa.field("status", pa.string(), nullable=False),
            pa.field("error", pa.string()),
        ]
    ),
    "every command",
    "one row per command run and queue or table, with the counts that apply to that command",
    engine=DELTA_RS,
)

# Which runs columns each command fills (besides run_id, command, times, seconds, status, error).
RUNS_COLUMNS_BY_COMMAND: dict[str, tuple[str, ...]] = {
    "drain": ("queue", "dequeued", "landed", "expired", "quarantined", "backlog_left", "batches", "rate"),
    "transform": ("table", "rows_in", "rows_out", "failed_expectations"),
    "publish": (
        "table",
        "published",
        "fanned_out",
        "undeliverable",
        "rejected",
        "failed_expectations",
        "batches",
        "rate",
    ),
    "replay": ("queue", "published", "batches", "rate"),
    "purge-expired": ("queue", "purged"),
    "maintain": ("table", "files_compacted", "files_vacuumed", "rows_removed", "files_removed", "files_rewritten"),
    "erase": ("table", "rows_removed", "files_removed", "files_rewritten", "files_vacuumed", "predicate"),
    "bodies": ("table", "rows_in", "rows_out"),
}

REPLAYS = LakeTable(
    "replays",
    pa.schema(
        [
            pa.field("replay_id", pa.string(), nullable=False),
            pa.field("run_id", pa.string(), nullable=False),
            pa.field("started_at", UTC_TS, nullable=False),
            pa.field("ended_at", UTC_TS, nullable=False),
            pa.field("predicate", pa.string(), nullable=False),
            pa.field("to_queue", pa.string()),
            pa.field("limit", pa.int64()),
            pa.field("journal_version", pa.int64()),
            pa.field("selected", pa.int64()),
            pa.field("destinations", pa.map_(pa.string(), pa.int64())),
            pa.field("rows_sent", pa.int64()),
            pa.field("total_sent", pa.int64()),
            pa.field("batches", pa.int64()),
            pa.field("batches_done_before", pa.int64()),
            pa.field("failed_batches", pa.int64()),
            pa.field("skipped", pa.int64()),
            pa.field("skipped_reasons", pa.map_(pa.string(), pa.int64())),
            pa.field("max_rate", pa.float64()),
            pa.field("rate", pa.float64()),
            pa.field("status", pa.string(), nullable=False),
            pa.field("error", pa.string()),
        ]
    ),
    "replay",
    "one row per replay run: the selection, where it went, how far it got",
    engine=DELTA_RS,
)

REPLAY_SKIPPED = LakeTable(
    "replay_skipped",
    pa.schema(
        [
            pa.field("replay_id", pa.string(), nullable=False),
            pa.field("queue", pa.string(), nullable=False),
            pa.field("seq", pa.int64(), nullable=False),
            pa.field("id", pa.string()),
            pa.field("message_id", pa.string()),
            pa.field("message_type", pa.string()),
            pa.field("destination", pa.string()),
            pa.field("reason", pa.string(), nullable=False),
            pa.field("recorded_at", UTC_TS, nullable=False),
        ]
    ),
    "replay",
    "journal rows a replay selected but will never send, with the reason (final per replay id)",
    engine=DELTA_RS,
    erased_by_journal_key=("queue", "seq", "id"),
)

REPLAY_LINEAGE = LakeTable(
    "replay_lineage",
    pa.schema(
        [
            pa.field("replay_id", pa.string(), nullable=False),
            # the journal row sent (the original): queue, seq, row id, its MessageId and type
            pa.field("queue", pa.string(), nullable=False),
            pa.field("seq", pa.int64(), nullable=False),
            pa.field("id", pa.string()),
            pa.field("message_id", pa.string()),
            pa.field("message_type", pa.string()),
            pa.field("kind", pa.string()),  # retry | redirect | replay
            pa.field("destination", pa.string()),  # the queue's canonical name
            pa.field("sent_message_id", pa.string()),  # the copy's NServiceBus.MessageId (new for a replay)
            pa.field("batch", pa.int64(), nullable=False),  # the replay's batch (its ledger row k/N@B)
            pa.field("canary", pa.bool_(), nullable=False),  # sent first, as a canary (--canary)
            # when the row was written: after its batch's commit (the ledger row's transaction)
            pa.field("recorded_at", UTC_TS, nullable=False),
        ]
    ),
    "replay",
    "one row per message a replay sent: the original journal row, the replay, the copy's id and queue",
    engine=DELTA_RS,
    erased_by_journal_key=("queue", "seq", "id"),
)

# ``pipeline/key_index``: where a message id or a conversation id lies in the journal, so that ``find`` and
# ``where`` open the journal files of its rows instead of scanning an id column of every file (random
# GUIDs: the journal's own statistics prune nothing). One row per journal row and key kind (``message_id``,
# ``conversation_id``; ``id`` only where it is not the row's message id, e.g. an expired copy's). Built by
# ``maintain`` from the journal files added since its application transaction ``queuelake.message_keys``
# (the journal version covered), each increment sorted by key; ``maintain`` rewrites it into files of
# non-overlapping key ranges (``rewrite``: the rewrite's number, 0 for an increment; ``upto``: the journal
# version the row's increment or rewrite covered). A hint, never the answer: lookups read the journal rows.
MESSAGE_KEYS = LakeTable(
    "message_keys",
    pa.schema(
        [
            pa.field("key", pa.string(), nullable=False),
            pa.field("kind", pa.string(), nullable=False),  # message_id | conversation_id | id
            pa.field("queue", pa.string(), nullable=False),
            pa.field("seq", pa.int64(), nullable=False),
            pa.field("upto", pa.int64(), nullable=False),
            pa.field("rewrite", pa.int64(), nullable=False),
        ]
    ),
    "maintain",
    "the journal's ids (message, conversation, expired row) by key, to its rows' (queue, seq): find and where's index",
    engine=DELTA_RS,
    erased_by_journal_key=("queue", "seq", "key"),
    # a lookup reads the key column of the row groups whose statistics admit the id, then the matching
    # group whole: 20,000 rows (~1 MB) instead of delta-rs's default of 1,048,576 (a whole rewritten file)
    row_group_rows=20_000,
)
