"""Which journal rows a bodies increment reads, and what each is: type, version, format, text.

An increment is the journal versions (after, upto] (``increments.py``: the files those commits
added; of their batches only when an erase rewrote rows read before into one of them). A row is read
when it landed, has a message type, comes from a configured queue (``bodies.queues``; default every
queue) and type (``bodies.types``), and is not an audit copy (``ProcessingEnded`` set) when
``include_audit`` is off, nor an error-queue copy (``FailedQ`` set) unless ``include_failed`` is on.
Rows without a message type (subscription control messages) have
no table and are not read.

First a pass in Arrow on the driver over the few small columns (no body, no Spark job): which types
and versions are there, how many rows each, and whether any message id repeats within a type (a
business queue and its audit copy): the sampling and the deduplication are planned from it. Then the
same selection in Spark, with each body's text (UTF-8, a byte-order mark removed, trimmed) and its
format: the ``NServiceBus.ContentType`` header when it names JSON or XML, else, when the header is
missing, the first character (``{`` or ``[``: JSON, ``<``: XML). Rows that cannot be parsed at all
carry a ``reason`` here and go to ``body_unparsed``.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.config import Config
from queuelake.lake.arrow_types import as_string, to_spark_schema
from queuelake.lake.round_files import open_file, spark_frame
from queuelake.pipeline.bodies import names
from queuelake.pipeline.bodies.seen import Times
from queuelake.pipeline.journal.batch_filter import of_batches
from queuelake.pipeline.journal.schema import MESSAGES_SCHEMA
from queuelake.transport.table_refs import queue_ref

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_PLAN_COLUMNS = [
    "outcome",
    "queue",
    "message_type",
    "enclosed_message_types",
    "failed_queue",
    "processing_ended",
    "message_id",
    "time_sent",
    # the deduplication's keys and order (``later_copies``)
    "seq",
    "id",
    "drained_at",
]


@dataclass
class Plan:
    """What the increment holds, from the Arrow pass: the selected rows per (type name, version)."""

    files: list[str]
    # the increment's batch ids when its files also hold rows read before (``LakeEngine.added_batches``:
    # an erase rewrote old and new rows into one file); None: every row of the files is new
    batches: list[str] | None = None
    # the first EnclosedMessageTypes entry (assembly-qualified; the journal's ``message_type`` is its
    # full name alone) -> type name
    types: dict[str, str] = field(default_factory=dict)
    strata: Counter[tuple[str, str | None]] = field(default_factory=Counter)
    repeated_ids: set[str] = field(default_factory=set)  # type names whose message ids repeat
    times: dict[str, Times] = field(default_factory=dict)  # type name -> its rows' send times
    # type name -> its rows' message ids: what a table's ids are narrowed to before the anti-join
    ids: dict[str, pa.ChunkedArray] = field(default_factory=dict)
    # type name -> the rows (queue, seq, id) that repeat a message id of the slice: all but its first
    # copy, the business copy before the audit copy before the error copy, then the first drained.
    # Found here, in Arrow on the driver, not by a window over the slice in Spark (its sorts, four
    # types at once, ran the default driver out of memory on a first backlog: a review)
    later_copies: dict[str, pa.Table] = field(default_factory=dict)
    queues: list[str] | None = None  # canonical addresses; None: every queue
    # which copies are read (``bodies.include_audit`` / ``include_failed``): ``frame`` must select the
    # very rows counted here, or copies left out of the count (and of ``repeated_ids``) get written
    include_audit: bool = True
    include_failed: bool = False
    # the bodies' bytes in the files, from their footers (of every row, selected or not): whether the
    # samples can be the whole selection (``schema_plan.samples``)
    body_bytes: int = 0
    file_rows: int = 0  # the rows in the files, selected or not
    # a rewritten first run's slice (``increments.Span.drained``): its rows' first and last ``drained_at``,
    # so that the row groups of the files beyond them are not read
    drained: tuple[dt.datetime, dt.datetime] | None = None

    @property
    def average_body_bytes(self) -> float:
        """A body's bytes on average in the files (0 when they hold no rows)."""
        return self.body_bytes / self.file_rows if self.file_rows else 0.0

    @property
    def rows(self) -> int:
        return sum(self.strata.values())

    def rows_of(self, name: str) -> int:
        return sum(n for (t, _), n in self.strata.items() if t == name)

    @property
    def type_names(self) -> list[str]:
        return sorted({t for t, _ in self.strata})


def plan(
    config: Config,
    files: list[str],
    batches: list[str] | None = None,
    drained: tuple[dt.datetime, dt.datetime] | None = None,
) -> Plan:
    """The rows of ``files`` (of ``batches`` only, when given; of the row groups ``drained`` meets) the
    bodies read, counted per type."""
    cfg = config.bodies
    queues = sorted({queue_ref(q, config.transport).canonical for q in cfg.queues}) if cfg.queues else None
    out = Plan(files, batches, queues=queues, include_audit=cfg.include_audit, include_failed=cfg.include_failed)
    out.drained = drained
    ids: dict[str, list[pa.Array]] = {}
    sent: dict[str, list[pa.Array]] = {}
    copies: dict[str, list[pa.Table]] = {}
    wanted_batches = None if batches is None else pa.array(batches, pa.string())
    for uri in files:
        opened = open_file(uri)
        out.body_bytes += opened.column_bytes("body")
        out.file_rows += opened.metadata.num_rows
        columns = _PLAN_COLUMNS + ([] if batches is None else ["batch_id"])
        if drained is None:
            data = opened.read(columns=columns)
        else:  # a compacted file holds many slices' rows, in the order they were drained
            groups = opened.row_groups_within("drained_at", *drained)
            if not groups:
                continue
            data = opened.read_row_groups(groups, columns=columns)
        keep = pc.and_(pc.equal(data["outcome"], "landed"), pc.is_valid(data["message_type"]))
        if wanted_batches is not None:
            keep = pc.and_(keep, pc.fill_null(pc.is_in(as_string(data["batch_id"]), value_set=wanted_batches), False))
        if queues is not None:
            keep = pc.and_(keep, pc.is_in(data["queue"], value_set=pa.array(queues, pa.string())))
        if not out.include_failed:  # the same copies as ``_copies`` selects in Spark
            keep = pc.and_(keep, pc.is_null(data["failed_queue"]))
        if not out.include_audit:
            keep = pc.and_(keep, pc.or_(pc.is_null(data["processing_ended"]), pc.is_valid(data["failed_queue"])))
        rows = data.filter(keep)
        if not rows.num_rows:
            continue
        rows = rows.append_column("aqn", _first_type(rows))
        grouped = rows.group_by("aqn").aggregate([("message_id", "count")])
        for full, count in zip(grouped["aqn"].to_pylist(), grouped["message_id_count"].to_pylist()):
            name = out.types.get(full) or names.type_name(full)
            if not names.wanted(name, cfg.types):
                continue
            out.types[full] = name
            out.strata[(name, names.type_version(full))] += count
            of_type = rows.filter(pc.equal(rows["aqn"], full))
            ids.setdefault(name, []).append(of_type["message_id"])
            sent.setdefault(name, []).append(of_type["time_sent"])
            copies.setdefault(name, []).append(_copy_keys(of_type))
    for name, chunks in ids.items():
        values = pa.chunked_array(chunks, pa.string())
        out.ids[name] = values
        if pc.count_distinct(values).as_py() < len(values):
            out.repeated_ids.add(name)
            out.later_copies[name] = later_copies(pa.concat_tables(copies[name]))
    out.times = {name: Times.of(chunks) for name, chunks in sent.items()}
    return out


_KEY = ["queue", "seq", "id"]


def _copy_keys(rows: pa.Table) -> pa.Table:
    """The columns ``later_copies`` ranks by, the copy's rank as ``frame``'s ``copy_rank`` says it."""
    rank = pc.if_else(pc.is_valid(rows["failed_queue"]), 2, pc.if_else(pc.is_valid(rows["processing_ended"]), 1, 0))
    return rows.select(["message_id", "drained_at", *_KEY]).append_column("copy_rank", rank)


def later_copies(keys: pa.Table) -> pa.Table:
    """The (queue, seq, id) of every row but the first of its message id (by copy rank, then drained,
    queue and seq). A row held twice with the same key is not a later copy of itself (an anti-join on
    it would drop both: a review)."""
    ordered = keys.sort_by(
        [
            ("message_id", "ascending"),
            ("copy_rank", "ascending"),
            ("drained_at", "ascending"),
            ("queue", "ascending"),
            ("seq", "ascending"),
        ]
    )
    ids = ordered["message_id"].combine_chunks()
    first = pc.not_equal(ids[1:], ids[:-1]) if len(ids) > 1 else pa.array([], pa.bool_())
    is_first = pa.concat_arrays([pa.array([True]), pc.fill_null(first, True)]) if len(ids) else pa.array([], pa.bool_())
    later = ordered.filter(pc.invert(is_first)).select(_KEY)
    firsts = ordered.filter(is_first).select(_KEY)
    if not later.num_rows:
        return later
    return later.join(firsts, _KEY, join_type="left anti").select(_KEY)


def _first_type(rows: pa.Table) -> pa.ChunkedArray:
    """The first EnclosedMessageTypes entry, else the journal's ``message_type``: as ``_aqn`` says in
    Spark (a null first entry included), so that both passes file a row under the same type."""
    enclosed = rows["enclosed_message_types"]
    lengths = pc.fill_null(pc.list_value_length(enclosed), 0)
    first = pc.list_element(pc.if_else(pc.greater(lengths, 0), enclosed, pa.scalar([""], enclosed.type)), 0)
    return pc.coalesce(pc.if_else(pc.greater(lengths, 0), first, rows["message_type"]), rows["message_type"])


def _aqn() -> Column:
    from pyspark.sql import functions as F

    return F.coalesce(F.get(F.col("enclosed_message_types"), 0), F.col("message_type"))


def _copies(selected: Plan) -> Column:
    """The Spark side of ``plan``'s row filter: landed, with a message type, and only the copies
    configured (error copies only with ``include_failed``, audit copies unless ``include_audit`` is
    off). Why it must match: ``plan`` counts the rows (``rows_in``) and finds the message ids that
    repeat (``repeated_ids``: the one-row-per-message window runs only for those types); a copy that
    Spark read but ``plan`` did not (an error copy, then its audit copy after a retry) was written as
    a second row, and counted nowhere."""
    from pyspark.sql import functions as F

    keep = (F.col("outcome") == "landed") & F.col("message_type").isNotNull()
    if not selected.include_failed:
        keep = keep & F.col("failed_queue").isNull()
    if not selected.include_audit:
        keep = keep & (F.col("processing_ended").isNull() | F.col("failed_queue").isNotNull())
    return keep


def _text(body: Column) -> Column:
    from pyspark.sql import functions as F

    # bytes that are not UTF-8 become U+FFFD (``decode`` would fail the job); such a body goes to
    # body_unparsed (``frame``'s reason): inside a JSON string the replaced text still parsed, and the
    # value was typed altered, with no record (a review)
    text = F.make_valid_utf8(body.cast("string"))
    return F.trim(F.regexp_replace(text, "^\ufeff", ""))


def frame(spark: SparkSession, selected: Plan) -> DataFrame:
    """The selected rows in Spark: identity columns, ``type_name``, ``type_version``, ``table``
    (filled by the caller's map), ``text``, ``format`` (json, xml or null) and ``reason``."""
    from pyspark.sql import functions as F

    df = spark_frame(spark, selected.files, to_spark_schema(MESSAGES_SCHEMA)).where(_copies(selected))
    if selected.drained is not None:  # pushed down: the row groups beyond the slice's rows are not read
        df = df.where(F.col("drained_at").between(*selected.drained))
    if selected.batches is not None:  # the increment's batches only (``plan`` counts those alone too)
        df = of_batches(df, selected.batches)
    full = list(selected.types)
    df = df.withColumn("aqn", _aqn()).where(F.col("aqn").isin(full))
    if selected.queues is not None:
        df = df.where(F.col("queue").isin(selected.queues))
    type_map = F.create_map(*[F.lit(x) for t in full for x in (t, selected.types[t])])
    version_map = F.create_map(*[F.lit(x) for t in full for x in (t, names.type_version(t) or "")])
    text = _text(F.col("body"))
    content = F.lower(F.trim(F.col("content_type")))
    first = F.substring(F.col("text"), 1, 1)
    fmt = (
        F.when(content.contains("json"), "json")
        .when(content.contains("xml"), "xml")
        .when(F.coalesce(content, F.lit("")) == "", F.when(first.isin("{", "["), "json").when(first == "<", "xml"))
    )
    copy_rank = F.when(F.col("failed_queue").isNotNull(), 2).when(F.col("processing_ended").isNotNull(), 1).otherwise(0)
    df = df.select(
        "message_id",
        "queue",
        "seq",
        "id",
        "drained_at",
        F.col("aqn").alias("message_type"),  # the full name, assembly and version included
        type_map[F.col("aqn")].alias("type_name"),
        F.nullif(version_map[F.col("aqn")], F.lit("")).alias("type_version"),
        "content_type",
        "conversation_id",
        "time_sent",
        "originating_endpoint",
        "processing_endpoint",
        "processing_started",
        "processing_ended",
        "failed_queue",
        copy_rank.alias("copy_rank"),
        text.alias("text"),
        F.is_valid_utf8(F.col("body").cast("string")).alias("utf8"),
    ).withColumn("format", fmt)
    reason = (
        F.when(F.col("text").isNull(), "no body")
        .when(~F.col("utf8"), "the body's bytes are not UTF-8")
        .when(F.col("text") == "", "empty body")
        .when(
            F.col("format").isNull(),
            F.when(
                F.coalesce(content, F.lit("")) == "",
                "no content type, and the body is neither JSON nor XML",
            ).otherwise(F.concat(F.lit("content type "), F.col("content_type"), F.lit(" is neither JSON nor XML"))),
        )
        .when((F.col("format") == "json") & (F.col("text") == "null"), "the body is JSON null")
        .when((F.col("format") == "json") & first.isin("[", '"'), "the JSON body is not an object")
        .when((F.col("format") == "json") & (first != "{"), "malformed JSON")
    )
    return df.withColumn("reason", reason).drop("utf8")
