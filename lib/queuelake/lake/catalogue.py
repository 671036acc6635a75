"""The table catalogue: every lake table queuelake writes, declared once with its schema, the command
that writes it and, where it is not the lake's own, the engine (``engine``, read by ``engines.py``).

Why: names and schemas used to live where each table was first written (the journal builder,
publish, replay, the quality module) and were spelt again by notebooks, the demo and tests. A new
table is one entry here; pipelines, notebooks and tests take the name and schema from it, and the
README's table list is checked against it (``tests/lake/test_tables.py``).

Per-output tables (``<output>_rejected``) are templates: ``REJECTED.name_for("outbound_x")``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

UTC_TS = pa.timestamp("us", tz="UTC")
_STR_MAP = pa.map_(pa.string(), pa.string())

# Tables with ``engine=DELTA_RS`` are delta-rs's under either ``lake.engine``. The journal
# (``messages``): the drain stages a batch's files before the queue's DB commit and commits exactly
# those files afterwards, maybe from another process; deltalake can commit files written earlier,
# delta-spark has no Python API for it (``delta_rs/staging.py``). The records of commands that may run without
# Spark (``runs``, ``replays``, ``replay_skipped``, ``replay_lineage``): drain, purge-expired and replay never start a
# session, and delta-rs is the engine every command has (a record table an older queuelake made with
# delta-spark stays delta-spark's: ``pipeline.runs.record_engine``). All stay plain Delta tables at
# protocol 1/2, which delta-spark, Databricks and every other engine read.
DELTA_RS = "delta-rs"


@dataclass(frozen=True)
class LakeTable:
    """One table (or, with ``{output}`` in its name, one table per publish output)."""

    name: str
    schema: pa.Schema | None  # None: the columns come from the user's transform
    written_by: str  # the command that appends to it
    about: str  # one line for the README and `describe`
    # The engine that creates and writes the table whatever ``lake.engine`` says (None: the lake's own,
    # ``engines.open_lake``). ``engines.table_engine`` reads it; see ``DELTA_RS`` for why a table has one.
    engine: str | None = None
    # Parquet dictionary encoding only for these columns (None: every column). Building a dictionary
    # for a column of unique values (ids, bodies) until Parquet gives up on it was a quarter of the
    # drain's file writing.
    dictionary_columns: tuple[str, ...] | None = None
    # Columns whose Parquet (row group) statistics are not written. The Delta log's file statistics
    # are what readers prune files with; min / max over maps, lists and long texts cost ~10% of the
    # drain's file writing and prune nothing a reader asks for.
    no_parquet_statistics: tuple[str, ...] = ()
    # Columns written without compression: GUIDs as text, which snappy shrinks by a tenth for a fifth
    # of the file's writing time (per 10,000 journal rows: 18.3 ms against 22.4, 4% larger files).
    uncompressed_columns: tuple[str, ...] = ()
    # A table whose rows are derived from journal rows names the journal columns that key them
    # (``("queue", "seq")``): ``queuelake erase`` removes its rows whose key is an erased journal row's
    # (``pipeline/store/erase.py``). Empty: not derived from journal rows row by row. The one place a
    # new derived table declares how its rows are erased (the typed body tables, whose names come from
    # the message types, are found through ``body_schema_changes``: ``pipeline/store/typed.py``).
    erased_by_journal_key: tuple[str, ...] = ()
    # Rows per Parquet row group when ``maintain`` rewrites the table's files (None: the engine's own,
    # a million rows). The journal keeps the drain's 10,000: ``queuelake find`` reads a row group that
    # holds a match whole, and a compacted file of 300,000 rows in one group made a lookup 3-4 times
    # slower than on the drain's files (bench/find.py, README "Find").
    row_group_rows: int | None = None

    @property
    def per_output(self) -> bool:
        return "{output}" in self.name

    def name_for(self, output: str) -> str:
        if not self.per_output:
            raise ValueError(f"{self.name} is not a per-output table")
        return self.name.format(output=output)


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
    erased_by_journal_key=("queue", "seq"),
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
    erased_by_journal_key=("queue", "seq"),
)

REJECTED = LakeTable(
    "{output}_rejected",
    None,  # the output's own columns plus `reasons`
    "publish",
    "outbound rows that break the outbound contract, with their reasons; never sent",
)

UNDELIVERABLE = LakeTable(
    "{output}_undeliverable",
    pa.schema(
        [
            pa.field("key", pa.string()),
            pa.field("intent", pa.string()),
            pa.field("message_type", pa.string()),
            pa.field("destination", pa.string()),
            pa.field("reason", pa.string()),
            pa.field("round", pa.string()),
            pa.field("batch_key", pa.string()),
            pa.field("recorded_at", UTC_TS),
        ]
    ),
    "publish",
    "copies publish could not deliver (a destination that is missing or not a queue table), with why",
)

EXPECTATION_RESULTS = LakeTable(
    "expectation_results",
    pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("output", pa.string()),
            pa.field("round", pa.string()),
            pa.field("suite", pa.string()),
            pa.field("success", pa.bool_()),
            pa.field("evaluated", pa.int64()),
            pa.field("failed", pa.int64()),
            pa.field("failed_expectations", pa.string()),  # JSON list, as in the JSON summary
            pa.field("result", pa.string()),  # GX's validation result (to_json_dict), as JSON
            pa.field("validated_at", UTC_TS),
        ]
    ),
    "publish",
    "every validation of a user's expectations (publish.expectations): GX's result, pass or fail",
)

OUTBOUND = LakeTable(
    "{output}",
    None,  # the transform's columns; publish reads the outbound contract's (README, "Outbound tables")
    "transform",
    "what a transform produces and publish sends",
)

# The identity columns every typed body table starts with (``pipeline/bodies``); the body's own
# fields follow, inferred. ``processing_*`` are set for rows that came from audit copies.
BODY_IDENTITY = pa.schema(
    [
        pa.field("message_id", pa.string()),
        pa.field("queue", pa.string()),
        pa.field("message_type", pa.string()),
        pa.field("type_version", pa.string()),
        pa.field("conversation_id", pa.string()),
        pa.field("time_sent", UTC_TS),
        pa.field("originating_endpoint", pa.string()),
        pa.field("processing_endpoint", pa.string()),
        pa.field("processing_started", UTC_TS),
        pa.field("processing_ended", UTC_TS),
    ]
)

BODY = LakeTable(
    "body_{type}",
    None,  # BODY_IDENTITY, then the body's fields as inferred (``bodies.table_prefix`` may change the name)
    "bodies",
    "one per message type: the message's identity beside its body's fields as typed columns",
)

BODY_UNPARSED = LakeTable(
    "body_unparsed",
    pa.schema(
        [
            pa.field("message_id", pa.string()),
            pa.field("queue", pa.string()),
            pa.field("seq", pa.int64()),
            pa.field("id", pa.string()),
            pa.field("message_type", pa.string()),
            pa.field("type_name", pa.string()),
            pa.field("content_type", pa.string()),
            pa.field("reason", pa.string()),
            pa.field("body_start", pa.string()),  # the first 200 characters of the body's text
            pa.field("journal_version", pa.int64()),
            pa.field("recorded_at", UTC_TS),
        ]
    ),
    "bodies",
    "bodies that did not parse (or only partly), with the reason; the journal row is (queue, seq)",
    erased_by_journal_key=("queue", "seq"),
)

BODY_SCHEMA_CHANGES = LakeTable(
    "body_schema_changes",
    pa.schema(
        [
            pa.field("type_name", pa.string()),
            pa.field("table", pa.string()),
            pa.field("type_version", pa.string()),  # the version whose bodies showed the change
            pa.field("change", pa.string()),  # created | added | widened | conflict
            pa.field("column", pa.string()),  # a dotted path; null for created
            pa.field("old_type", pa.string()),
            pa.field("new_type", pa.string()),
            pa.field("journal_version", pa.int64()),
            pa.field("run_id", pa.string()),
            pa.field("changed_at", UTC_TS),
        ]
    ),
    "bodies",
    "every schema change of a typed body table (created, column added, widened, conflict); the type-to-table map",
)

BODY_INCREMENTS = LakeTable(
    "body_increments",
    pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("journal_after", pa.int64()),
            pa.field("journal_version", pa.int64()),
            pa.field("rows_read", pa.int64()),
            pa.field("rows_written", pa.int64()),
            pa.field("unparsed", pa.int64()),
            pa.field("tables", pa.list_(pa.string())),
            pa.field("recorded_at", UTC_TS),
        ]
    ),
    "bodies",
    "one row per journal increment the bodies stage consumed; its application transaction is the checkpoint",
)

# ``queuelake health`` (``pipeline/health``): per endpoint and message type, per hour and per day, what the
# audit and error copies in the journal say. Times in milliseconds; percentiles by nearest rank over the
# bucket's audit copies (null: no audit copy carried both times). A journal increment recomputes the UTC
# days it touches (their rows are deleted and written again); the application transaction
# ``queuelake.health`` carries the journal version consumed. The lake's own engine: ``queuelake health``
# opens the lake with delta-rs (Arrow on the driver, no Spark), and ``pipeline.health.run.update`` given a
# delta-spark lake writes through it.
_HEALTH_TIMES = [pa.field(f"{kind}_p{q}_ms", pa.float64()) for kind in ("processing", "critical") for q in (50, 95, 99)]

ENDPOINT_HEALTH = LakeTable(
    "endpoint_health",
    pa.schema(
        [
            pa.field("period", pa.string(), nullable=False),  # hour | day
            pa.field("period_start", UTC_TS, nullable=False),
            pa.field("day", pa.date32(), nullable=False),  # the UTC day the period falls in
            pa.field("endpoint", pa.string(), nullable=False),
            pa.field("message_type", pa.string(), nullable=False),
            pa.field("processed", pa.int64(), nullable=False),  # audit copies
            pa.field("failed", pa.int64(), nullable=False),  # error-queue copies
            pa.field("retries", pa.int64(), nullable=False),  # copies of a retry or replay
            *_HEALTH_TIMES,
            pa.field("journal_version", pa.int64(), nullable=False),
            pa.field("computed_at", UTC_TS, nullable=False),
        ]
    ),
    "health",
    "per endpoint, message type and hour or day: processed, failed, retries, processing and critical time p50/p95/p99",
)

ENDPOINT_DAILY = LakeTable(
    "endpoint_daily",
    pa.schema(
        [
            pa.field("day", pa.date32(), nullable=False),
            pa.field("endpoint", pa.string(), nullable=False),
            pa.field("processed", pa.int64(), nullable=False),
            pa.field("failed", pa.int64(), nullable=False),
            pa.field("retries", pa.int64(), nullable=False),
            pa.field("message_types", pa.int64(), nullable=False),
            pa.field("peak_hour", UTC_TS),  # the hour of the day's most processed messages (the first of equals)
            pa.field("peak_hour_processed", pa.int64(), nullable=False),
            pa.field("critical_p95_ms", pa.float64()),
            pa.field("journal_version", pa.int64(), nullable=False),
            pa.field("computed_at", UTC_TS, nullable=False),
        ]
    ),
    "health",
    "daily throughput per endpoint (a licence review's table): processed, failed, retries, the peak hour",
)

CATALOGUE: tuple[LakeTable, ...] = (
    MESSAGES,
    RUNS,
    REPLAYS,
    REPLAY_SKIPPED,
    REPLAY_LINEAGE,
    OUTBOUND,
    REJECTED,
    UNDELIVERABLE,
    EXPECTATION_RESULTS,
    BODY,
    BODY_UNPARSED,
    BODY_SCHEMA_CHANGES,
    BODY_INCREMENTS,
    ENDPOINT_HEALTH,
    ENDPOINT_DAILY,
)


def by_name(name: str) -> LakeTable:
    """The catalogue entry of a fixed-name table."""
    for table in CATALOGUE:
        if table.name == name:
            return table
    raise KeyError(f"no lake table {name!r} in the catalogue")


def engine_for(name: str) -> str | None:
    """The engine the catalogue fixes for a table (None: the lake's own, also for tables not catalogued)."""
    for table in CATALOGUE:
        if table.name == name:
            return table.engine
    return None


def statistics_columns(name: str) -> list[str] | None:
    """The columns a table's files write Parquet statistics for (None: all, also for tables not catalogued)."""
    for table in CATALOGUE:
        if table.name == name and table.schema is not None and table.no_parquet_statistics:
            return [f.name for f in table.schema if f.name not in table.no_parquet_statistics]
    return None


def uncompressed_columns(name: str) -> tuple[str, ...]:
    """The columns a table's files leave uncompressed (none for tables not catalogued)."""
    for table in CATALOGUE:
        if table.name == name:
            return table.uncompressed_columns
    return ()


def row_group_rows(name: str) -> int | None:
    """Rows per row group of the files ``maintain`` rewrites (None: the engine's default)."""
    for table in CATALOGUE:
        if table.name == name:
            return table.row_group_rows
    return None


def dictionary_columns(name: str) -> tuple[str, ...] | None:
    """The columns a table's files dictionary-encode (None: all, also for tables not catalogued)."""
    for table in CATALOGUE:
        if table.name == name:
            return table.dictionary_columns
    return None
