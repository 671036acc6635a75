"""The tables the stages make from the journal: transform's outbound tables and publish's side tables
(rejected and undeliverable rows, expectation results), the typed body tables, and health's tables.

Why together: each is the lake's own engine's (no ``engine`` fixed) and holds what a stage derived;
``record_tables.py`` holds the journal and the commands' records. ``catalogue.py`` lists them all.
"""

from __future__ import annotations

import pyarrow as pa

from queuelake.lake.table_entry import UTC_TS, LakeTable

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
    "bodies that did not parse (or only partly), with the reason; the journal row is (queue, seq, id)",
    erased_by_journal_key=("queue", "seq", "id"),
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
