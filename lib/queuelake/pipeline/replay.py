"""Send journal rows back to queues: failed messages to the queue they failed in (a retry), or any
selection to one queue (a replay), exactly once per replay id.

A replay is planned once and then sent batch by batch:

1. *Selection.* ``--where`` is one Spark SQL boolean expression over ``messages``, evaluated at one
   Delta version V of the journal. Only ``landed`` rows can be sent (an expired row has no headers
   or body left, a quarantined one has headers nobody can read); the others are reported as skipped
   with their reason. The landed rows are ordered by (queue, seq, id), ``--limit`` keeps the first N.
2. *Plan.* The first run of a replay id writes a plan row into the publish ledger (pipeline
   ``replay/<id>``): V, the number of rows, the batch size and a fingerprint of the predicate,
   ``--to`` and ``--limit``. A rerun with the same id reads the plan back, evaluates the same
   predicate at the same V and cuts the same batches; a different predicate, or a selection that
   came out differently, is refused rather than guessed at.
3. *Destinations* are resolved before anything is sent: each address is parsed and its table checked
   (a queue table with the transport's columns). A row whose destination cannot be delivered (no or a
   malformed ``NServiceBus.FailedQ``, a table that does not exist) is not sent; it is recorded with its
   reason in ``replay_skipped`` before the first batch, and that record is final for the replay id.
4. *Batches.* Batch k's inserts into every destination and its ledger row commit in one DB
   transaction, as publish does; a rerun skips the batches that are in the ledger.

Headers follow what ServiceControl does on a retry (see the README for the table and its sources):
the failure headers are stripped (``HeaderFilter``), ``ServiceControl.Retry.UniqueMessageId`` is set
(``ReturnToSender`` also sets ``ServiceControl.Retry.AcknowledgementQueue``: here only when asked
for, since a successful retry then sends an acknowledgement to that queue). Every copy carries
``queuelake.Replay.*`` headers naming the replay. Expires is recomputed from
``NServiceBus.TimeToBeReceived`` by the database clock, never copied.
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from queuelake import hooks, stopping
from queuelake.config import Config
from queuelake.context import connect
from queuelake.errors import QueuelakeError
from queuelake.lake import tables
from queuelake.lake.engines import journal_engine
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.journal import MESSAGES
from queuelake.pipeline.outgoing import name_uuid
from queuelake.pipeline.runs import append_runs
from queuelake.report import log
from queuelake.transport import headers as hdr
from queuelake.transport import ledger, locks, queues, schema
from queuelake.transport.db import Connection
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.tables import TableRef, bridge_ref, queue_ref

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPLAYS = tables.REPLAYS.name
SKIPPED = tables.REPLAY_SKIPPED.name
DEFAULT_BATCH_SIZE = 5000
PACED_BATCH_SECONDS = 0.5  # under --max-rate a batch holds about this long's worth of messages
MAX_TTBR_MS = hdr.MAX_TTBR_MS  # TimeSpan.MaxValue and the like: no expiry

# What a ServiceControl retry strips: every header *starting with* one of these
# (ServiceControl src/ServiceControl/Recoverability/Retrying/HeaderFilter.cs).
STRIPPED_PREFIXES = (
    "NServiceBus.Retries",  # also NServiceBus.Retries.Timestamp
    "NServiceBus.FailedQ",
    "NServiceBus.TimeOfFailure",
    "NServiceBus.ExceptionInfo.",
    "ServiceControl.EditOf",
)
# ServiceControl's own staging headers, removed by ReturnToSender before the message is dispatched
# (src/ServiceControl/Recoverability/Retrying/Infrastructure/ReturnToSender.cs): never on the wire.
STAGING_HEADERS = (
    "ServiceControl.Retry.StagingId",
    "ServiceControl.Retry.Attempt.MessageId",
    "ServiceControl.TargetEndpointAddress",
)
RETRY_UNIQUE_MESSAGE_ID = "ServiceControl.Retry.UniqueMessageId"
RETRY_ACKNOWLEDGEMENT_QUEUE = "ServiceControl.Retry.AcknowledgementQueue"
REPLAY_ID = "queuelake.Replay.Id"
REPLAY_KIND = "queuelake.Replay.Kind"  # retry | redirect | replay
REPLAY_SOURCE = "queuelake.Replay.Source"  # the journal row: <queue>@<seq>
REPLAY_ORIGINAL_MESSAGE_ID = "queuelake.Replay.OriginalMessageId"  # replays get a new MessageId

REPLAYS_SCHEMA: pa.Schema = tables.REPLAYS.schema
SKIPPED_SCHEMA: pa.Schema = tables.REPLAY_SKIPPED.schema

# The selection's small columns (no headers, no bodies): what planning, dry runs and counts need.
_KEY_COLUMNS = [
    "queue",
    "seq",
    "id",
    "outcome",
    "error",
    "message_id",
    "message_type",
    "failed_queue",
    "processing_endpoint",
]

_EMPTY_KEYS = pa.schema(
    [(c, pa.int64() if c == "seq" else pa.string()) for c in _KEY_COLUMNS]
    + [("is_failure", pa.bool_()), ("is_audit", pa.bool_()), ("file", pa.string()), ("row_index", pa.int64())]
)


# ---------------------------------------------------------------- the predicate

# Functions whose value differs between two runs: the selection must come out the same on a rerun.
# reflect / java_method call Java: no business in a filter.
_REFUSED_FUNCTIONS = {
    "rand": "random",
    "randn": "random",
    "random": "random",
    "uuid": "random",
    "shuffle": "random",
    "current_timestamp": "time-dependent",
    "current_date": "time-dependent",
    "current_time": "time-dependent",
    "curdate": "time-dependent",
    "now": "time-dependent",
    "localtimestamp": "time-dependent",
    "reflect": "a Java call",
    "java_method": "a Java call",
    "try_reflect": "a Java call",
}
_BARE_TIME = {"current_timestamp", "current_date", "current_time", "localtimestamp"}  # valid without ()
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _code_only(predicate: str) -> str:
    """The predicate with string literals, quoted identifiers and comments blanked out, so that the
    checks below see only code: ``exception_type = 'a;b'`` holds no second statement."""
    out: list[str] = []
    i, n = 0, len(predicate)
    while i < n:
        ch = predicate[i]
        if ch in ("'", '"', "`"):
            j = i + 1
            while j < n:
                if ch != "`" and predicate[j] == "\\":
                    j += 2
                    continue
                if predicate[j] == ch:
                    if j + 1 < n and predicate[j + 1] == ch:  # a doubled quote inside
                        j += 2
                        continue
                    break
                j += 1
            if j >= n:
                raise QueuelakeError(f"--where: unterminated {ch}-quoted text in {predicate!r}")
            out.append(" x " if ch == "`" else " '' ")
            i = j + 1
        elif predicate.startswith("--", i):
            j = predicate.find("\n", i)
            i = n if j < 0 else j
            out.append(" ")
        elif predicate.startswith("/*", i):
            j = predicate.find("*/", i + 2)
            if j < 0:
                raise QueuelakeError(f"--where: unterminated comment in {predicate!r}")
            i = j + 2
            out.append(" ")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def check_predicate(predicate: str | None) -> str:
    """Refuse what is not one deterministic boolean expression over ``messages``, naming the problem
    (Spark then parses and analyses it: ``validate_against``)."""
    if predicate is None or not predicate.strip():
        raise QueuelakeError("--where is required: a Spark SQL predicate over messages, e.g. \"exception_type = 'X'\"")
    code = _code_only(predicate)
    if ";" in code:
        raise QueuelakeError(
            f"--where must be a single boolean expression over messages; {predicate!r} holds ';' "
            "(a second statement): refused"
        )
    words = [(m.group(0).lower(), m.end()) for m in _WORD.finditer(code)]
    for word, end in words:
        if word == "select":
            raise QueuelakeError(
                f"--where must be a single boolean expression over messages; {predicate!r} holds a subquery "
                "(SELECT): refused"
            )
        why = _REFUSED_FUNCTIONS.get(word)
        if why is None:
            continue
        called = code[end:].lstrip().startswith("(")
        if called or word in _BARE_TIME:
            raise QueuelakeError(
                f"--where {predicate!r} calls {word}(), which is {why}: a rerun of the replay must select the "
                "same rows, so use literal values (e.g. time_of_failure >= '2026-05-01T00:00:00Z')"
            )
    return predicate.strip()


def _spark_reason(exc: BaseException) -> str:
    """The first meaningful line of a Spark error, without the JVM stack."""
    for line in str(exc).splitlines():
        line = line.strip()
        if line and not line.startswith(("at ", "JVM stacktrace", "== ")):
            return line[:400]
    return type(exc).__name__


def validate_against(df: DataFrame, predicate: str) -> DataFrame:
    """``df`` filtered by the predicate; Spark parses it as one expression and checks it is a boolean
    over the journal's columns (not an aggregate, not a statement)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    try:
        condition = F.expr(predicate)
        kind = df.select(condition.alias("p")).schema[0].dataType
        if not isinstance(kind, BooleanType):
            raise QueuelakeError(f"--where {predicate!r} is a {kind.simpleString()}, not a boolean predicate")
        return df.where(condition)
    except QueuelakeError:
        raise
    except Exception as exc:  # ParseException, AnalysisException (Spark Classic or Connect)
        raise QueuelakeError(f"--where {predicate!r} is not a predicate over messages: {_spark_reason(exc)}") from None


# ---------------------------------------------------------------- headers


_TIMESPAN = re.compile(r"^(-)?(?:(\d+)\.)?(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,7}))?)?$")


def timespan_ms(text: str | None) -> int | None:
    """A .NET TimeSpan string (``00:00:10``, ``1.00:00:00``, ``00:00:01.5000000``) in milliseconds;
    None when absent, unreadable, not positive or practically infinite (TimeSpan.MaxValue)."""
    if not text:
        return None
    m = _TIMESPAN.match(text.strip())
    if m is None:
        return None
    sign, days, hours, minutes, seconds, fraction = m.groups()
    ms = (int(days or 0) * 86_400 + int(hours) * 3600 + int(minutes) * 60 + int(seconds or 0)) * 1000 + int(
        (fraction or "0").ljust(7, "0")
    ) // 10_000
    if sign or ms <= 0 or ms >= MAX_TTBR_MS:
        return None
    return ms


def _queue_part(address: str) -> str:
    at = address.find("@")
    return address if at < 0 else address[:at]


def unique_message_id(headers: dict[str, str | None]) -> str | None:
    """ServiceControl's id of a failed message: the ``ServiceControl.Retry.UniqueMessageId`` it already
    carries (a retry that failed again), else the MD5-based Guid of MessageId + processing endpoint
    name (ProcessingEndpoint, else the queue part of FailedQ, else of ReplyToAddress), as
    ``DeterministicGuid.MakeId`` builds it (.NET Guid byte order: ``bytes_le``)."""
    existing = headers.get(RETRY_UNIQUE_MESSAGE_ID)
    if existing:
        return existing
    message_id = headers.get(hdr.MESSAGE_ID)
    endpoint = headers.get(hdr.PROCESSING_ENDPOINT)
    if endpoint is None and headers.get(hdr.FAILED_QUEUE) is not None:
        endpoint = _queue_part(headers[hdr.FAILED_QUEUE] or "")
    if endpoint is None and headers.get(hdr.REPLY_TO_ADDRESS) is not None:
        endpoint = _queue_part(headers[hdr.REPLY_TO_ADDRESS] or "")
    if message_id is None or endpoint is None:
        return None
    x = hashlib.md5(f"{message_id}{endpoint}".encode(), usedforsecurity=False).hexdigest()
    # str(uuid.UUID(bytes_le=digest)) without the object: the first three fields byte-swapped
    return f"{x[6:8]}{x[4:6]}{x[2:4]}{x[0:2]}-{x[10:12]}{x[8:10]}-{x[14:16]}{x[12:14]}-{x[16:20]}-{x[20:32]}"


_KEPT: dict[str, bool] = {}  # header name -> kept on a retry (names repeat across messages: decide once)


def _kept(name: str) -> bool:
    kept = _KEPT.get(name)
    if kept is None:
        kept = not name.startswith(STRIPPED_PREFIXES) and name not in STAGING_HEADERS
        if len(_KEPT) < 100_000:
            _KEPT[name] = kept
    return kept


def retry_headers(headers: dict[str, str | None], ack_queue: str | None) -> dict[str, str | None]:
    """The headers a ServiceControl retry sends: failure and staging headers stripped, the retry's
    unique id set, and the acknowledgement queue when one is configured."""
    unique = unique_message_id(headers)
    out = {k: v for k, v in headers.items() if _kept(k)}
    if unique is not None:
        out[RETRY_UNIQUE_MESSAGE_ID] = unique
    if ack_queue:
        out[RETRY_ACKNOWLEDGEMENT_QUEUE] = ack_queue
    return out


# ---------------------------------------------------------------- options, plan


@dataclass
class ReplayOptions:
    predicate: str
    to: str | None = None
    dry_run: bool = False
    limit: int | None = None
    max_rate: float | None = None
    replay_id: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    ack_queue: str | None = None

    def check(self) -> None:
        self.predicate = check_predicate(self.predicate)
        if self.limit is not None and self.limit < 0:
            raise QueuelakeError("--limit must be 0 or more")
        if self.max_rate is not None and self.max_rate <= 0:
            raise QueuelakeError("--max-rate must be a positive number of messages per second")
        if self.batch_size < 1:
            raise QueuelakeError("--batch-size must be at least 1")
        if self.replay_id is not None and not _REPLAY_ID.fullmatch(self.replay_id):
            raise QueuelakeError(
                f"--replay-id {self.replay_id!r}: use 1-100 characters of letters, digits, '.', '_', ':' or '-'"
            )
        if self.to is not None and not self.to.strip():
            raise QueuelakeError("--to is empty")

    def fingerprint(self) -> str:
        data = orjson.dumps({"where": self.predicate, "to": self.to, "limit": self.limit})
        return hashlib.sha256(data).hexdigest()[:16]

    def effective_batch_size(self) -> int:
        if self.max_rate is None:
            return self.batch_size
        return max(1, min(self.batch_size, round(self.max_rate * PACED_BATCH_SECONDS)))


_REPLAY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}")


def new_replay_id() -> str:
    now = dt.datetime.now(dt.timezone.utc)
    return f"replay-{now:%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class Plan:
    fingerprint: str
    version: int
    total: int
    batch_size: int

    def key(self) -> str:
        return f"plan:{self.fingerprint}:v{self.version}:n{self.total}:b{self.batch_size}"

    @property
    def batches(self) -> int:
        return (self.total + self.batch_size - 1) // self.batch_size

    @staticmethod
    def parse(key: str) -> Plan:
        _, fp, v, n, b = key.split(":")
        return Plan(fp, int(v[1:]), int(n[1:]), int(b[1:]))


def _batch_key(k: int, n: int, size: int) -> str:
    return f"{k}/{n}@{size}"


# ---------------------------------------------------------------- rows and destinations


@dataclass
class Row:
    """One selected landed row: identity, where it goes (or why not), where its content is."""

    queue: str
    seq: int
    id: str
    message_id: str | None
    message_type: str | None
    kind: str  # retry | redirect | replay
    address: str | None  # the destination as written (FailedQ, endpoint, --to, or the row's queue)
    file: str
    index: int
    target: TableRef | None = None
    reason: str | None = None


def _kinds(keys: pa.Table, to: str | None) -> list[tuple[str, str | None, str | None]]:
    """(kind, address, reason-if-none) per landed row, from the small columns."""
    out: list[tuple[str, str | None, str | None]] = []
    for failed_queue, failure, audited, endpoint, queue in zip(
        keys.column("failed_queue").to_pylist(),
        keys.column("is_failure").to_pylist(),
        keys.column("is_audit").to_pylist(),
        keys.column("processing_endpoint").to_pylist(),
        keys.column("queue").to_pylist(),
        strict=True,
    ):
        if to is not None:
            out.append(("redirect" if failure else "replay", to, None))
        elif failure:
            if failed_queue is None or not failed_queue.strip():
                out.append(
                    ("retry", None, "no NServiceBus.FailedQ header: the queue it failed in is unknown (use --to)")
                )
            else:
                out.append(("retry", failed_queue, None))
        elif endpoint:
            out.append(("replay", endpoint, None))
        elif audited:
            reason = "an audited message without NServiceBus.ProcessingEndpoint: its queue is unknown (use --to)"
            out.append(("replay", None, reason))
        else:
            out.append(("replay", queue, None))  # drained from its own queue: back there
    return out


class _Verdicts:
    """Each address parsed and checked once per run: (queue, None) or (None, reason naming it)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.cache: dict[str, tuple[TableRef | None, str | None]] = {}

    def __call__(self, conn: Connection, address: str, kind: str) -> tuple[TableRef | None, str | None]:
        verdict = self.cache.get(address)
        if verdict is None:
            label = "NServiceBus.FailedQ" if kind == "retry" else "destination"
            try:
                ref = queue_ref(address, self.config.transport)
            except QueuelakeError as exc:
                verdict = (None, f"{label} {address!r} is not a queue address: {exc}")
            else:
                problem = schema.delivery_problem(conn, ref)
                verdict = (ref, None) if problem is None else (None, f"{label} {address!r}: {problem}")
            self.cache[address] = verdict
        return verdict


# ---------------------------------------------------------------- reading content


class _Content:
    """Headers and bodies of selected rows, read from the journal's Parquet files of version V by
    (file, row index). A replay batch of rows in (queue, seq) order touches few files; the last
    few files read stay cached, so memory holds a batch and a handful of files, never the selection."""

    CACHED_FILES = 3

    def __init__(self, uris: list[str]) -> None:
        self.by_name = {u.rsplit("/", 1)[-1]: u for u in uris}
        self.cache: collections.OrderedDict[str, pa.Table] = collections.OrderedDict()

    def uri(self, spark_path: str) -> str:
        from urllib.parse import unquote

        name = unquote(spark_path.rsplit("/", 1)[-1])
        try:
            return self.by_name[name]
        except KeyError:
            raise QueuelakeError(f"journal file {name} is not in the planned journal version") from None

    def _file(self, uri: str) -> pa.Table:
        table = self.cache.get(uri)
        if table is not None:
            self.cache.move_to_end(uri)
            return table
        from queuelake.lake.storage import filesystem as lake_filesystem

        filesystem, path = lake_filesystem(uri)  # with the lake's storage options (object storage)
        table = pq.ParquetFile(path, filesystem=filesystem).read(columns=["headers", "body"])
        self.cache[uri] = table
        while len(self.cache) > self.CACHED_FILES:
            self.cache.popitem(last=False)
        return table

    def read(self, rows: list[Row]) -> list[tuple[list[tuple[str, str | None]] | None, bytes | None]]:
        """(headers as pairs, body) per row, in the order given."""
        out: list[Any] = [None] * len(rows)
        by_file: dict[str, list[int]] = {}
        for i, r in enumerate(rows):
            by_file.setdefault(r.file, []).append(i)
        for file, positions in by_file.items():
            table = self._file(self.uri(file))
            taken = table.take(pa.array([rows[i].index for i in positions], pa.int64()))
            headers = taken.column("headers").to_pylist()
            bodies = taken.column("body").to_pylist()
            for j, i in enumerate(positions):
                out[i] = (headers[j], bodies[j])
        return out


# ---------------------------------------------------------------- the replay


@dataclass
class ReplayResult:
    replay_id: str | None
    status: str = "ok"
    dry_run: bool = False
    journal_version: int | None = None
    matched: int = 0  # journal rows the predicate matches, any outcome, before --limit
    selected: int = 0  # the landed rows of those that the replay plans to send (the first --limit)
    to_send: int = 0
    rows_sent: int = 0
    total_sent: int = 0
    batches: int = 0
    batches_sent: int = 0
    batches_done_before: int = 0
    failed_batches: list[str] = field(default_factory=list)
    skipped: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    destinations: dict[str, int] = field(default_factory=dict)
    message_types: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds_sending: float = 0.0
    rate: float = 0.0
    error: str | None = None


class Replayer:
    def __init__(self, config: Config, spark: SparkSession, lake: LakeEngine, options: ReplayOptions) -> None:
        self.config = config
        self.spark = spark
        self.lake = lake
        self.journal = journal_engine(lake)
        self.options = options
        self.ledger = bridge_ref(config.transport.ledger_table, config.transport)
        self.verdicts = _Verdicts(config)
        self.run_id = str(uuid.uuid4())
        self.started = dt.datetime.now(dt.timezone.utc)
        self.result = ReplayResult(options.replay_id)
        self.sending = False  # set once the plan is in the ledger: from then on the run is recorded
        self.sent_per_destination: collections.Counter[str] = collections.Counter()
        self._files: list[str] | None = None

    # -- selection ------------------------------------------------------------------------------

    def _select(self, version: int) -> pa.Table:
        """The selection's small columns at journal version V, in (queue, seq, id) order, with each row's
        data file and row index (``_metadata``), as Arrow on the driver."""
        from pyspark.sql import functions as F

        df = self.journal.read(MESSAGES, version)
        if not self.journal_files(version):  # an empty journal: no files, no _metadata
            validate_against(df, self.options.predicate)
            return _EMPTY_KEYS.empty_table()
        selected = validate_against(df, self.options.predicate)
        failure = F.col("failed_queue").isNotNull() | F.col("exception_type").isNotNull()
        failure = failure | F.col("time_of_failure").isNotNull()
        audit = F.col("processing_started").isNotNull() | F.col("processing_ended").isNotNull()
        keys = selected.select(
            *_KEY_COLUMNS,
            failure.alias("is_failure"),
            audit.alias("is_audit"),
            F.col("_metadata.file_path").alias("file"),
            F.col("_metadata.row_index").alias("row_index"),
        )
        # Sorted here, not by Spark: the keys are small, and a Spark sort costs a sampling job and a
        # shuffle of spark.sql.shuffle.partitions tasks.
        return keys.toArrow().sort_by([(c, "ascending") for c in ("queue", "seq", "id", "file", "row_index")])

    def _rows(self, keys: pa.Table) -> tuple[list[Row], pa.Table]:
        """(the landed rows to plan, first --limit of them), and the other selected rows."""
        landed_mask = pc.equal(keys.column("outcome"), "landed")
        landed = keys.filter(landed_mask)
        others = keys.filter(pc.invert(landed_mask))
        if self.options.limit is not None:
            landed = landed.slice(0, self.options.limit)
        kinds = _kinds(landed, self.options.to)
        rows = [
            Row(q, s, i, m, t, kind, address, f, x, reason=reason)
            for q, s, i, m, t, f, x, (kind, address, reason) in zip(
                landed.column("queue").to_pylist(),
                landed.column("seq").to_pylist(),
                landed.column("id").to_pylist(),
                landed.column("message_id").to_pylist(),
                landed.column("message_type").to_pylist(),
                landed.column("file").to_pylist(),
                landed.column("row_index").to_pylist(),
                kinds,
                strict=True,
            )
        ]
        return rows, others

    # -- ledger ---------------------------------------------------------------------------------

    def _ledger(self, conn: Connection, replay_id: str) -> tuple[Plan | None, set[int], int]:
        recorded = ledger.rows_of_pipeline(conn, self.ledger, f"replay/{replay_id}")
        conn.rollback()
        rows = [(r.output_table, r.batch_key, r.rows_sent) for r in recorded]
        plans = [Plan.parse(key) for _, key, _ in rows if key.startswith("plan:")]
        if len(plans) > 1:
            raise QueuelakeError(f"replay {replay_id} has {len(plans)} plans in the ledger; start a new replay id")
        done = {int(key.split("/")[0]) for _, key, _ in rows if not key.startswith("plan:")}
        sent = sum(int(n) for _, key, n in rows if not key.startswith("plan:"))
        return (plans[0] if plans else None), done, sent

    def _insert_ledger(self, conn: Connection, replay_id: str, key: str, rows_sent: int) -> None:
        ledger.record(conn, self.ledger, f"replay/{replay_id}", MESSAGES, key, rows_sent, rows_sent)

    # -- skipped rows ---------------------------------------------------------------------------

    def _recorded_skips(self, replay_id: str) -> set[tuple[str, int]]:
        if not self.lake.exists(SKIPPED):
            return set()
        table = self.lake.read_arrow(SKIPPED, columns=["replay_id", "queue", "seq"])
        table = table.filter(pc.equal(table.column("replay_id"), replay_id))
        return set(zip(table.column("queue").to_pylist(), table.column("seq").to_pylist(), strict=True))

    def _record_skips(self, replay_id: str, records: list[dict[str, Any]]) -> None:
        """Before the first batch of this run: the rows this replay will not send, with why. Final for
        the replay id (a rerun never sends a row recorded here)."""
        if not records:
            return
        version = (self.lake.last_version(SKIPPED, f"queuelake.replay.skipped/{replay_id}") or 0) + 1
        self.lake.append(
            SKIPPED,
            pa.Table.from_pylist(records, schema=SKIPPED_SCHEMA),
            f"queuelake.replay.skipped/{replay_id}",
            version,
        )

    # -- sending --------------------------------------------------------------------------------

    def _messages(
        self, replay_id: str, rows: list[Row], content: _Content
    ) -> dict[str, tuple[TableRef, list[OutgoingMessage]]]:
        ack = self.options.ack_queue
        out: dict[str, tuple[TableRef, list[OutgoingMessage]]] = {}
        for row, (pairs, body) in zip(rows, content.read(rows), strict=True):
            original = dict(pairs or [])
            assert row.target is not None
            if row.kind == "replay":
                headers = dict(original)
                mid = name_uuid(f"replay\n{replay_id}\n{row.message_id}\n{row.target.canonical}")
                headers[hdr.MESSAGE_ID] = mid
                if row.message_id is not None:
                    headers[REPLAY_ORIGINAL_MESSAGE_ID] = row.message_id
            else:  # retry, redirect: the message's own identity, as ServiceControl sends it back
                headers = retry_headers(original, ack)
                if not headers.get(hdr.MESSAGE_ID) and row.message_id:
                    headers[hdr.MESSAGE_ID] = row.message_id  # it had none: the drained row's id
            headers[REPLAY_ID] = replay_id
            headers[REPLAY_KIND] = row.kind
            headers[REPLAY_SOURCE] = f"{row.queue}@{row.seq}"
            row_id = name_uuid(f"replay-row\n{replay_id}\n{row.queue}\n{row.seq}\n{row.id}")
            message = OutgoingMessage(
                orjson.dumps(headers).decode(),  # names and values are strings already (map<string,string>)
                body,
                id=row_id,
                ttbr_ms=timespan_ms(original.get(hdr.TIME_TO_BE_RECEIVED)),
            )
            out.setdefault(row.target.canonical, (row.target, []))[1].append(message)
        return out

    def _send_batch(
        self, conn: Connection, replay_id: str, key: str, rows: list[Row], content: _Content, due: float | None
    ) -> None:
        """One DB transaction: the batch's inserts into every destination and its ledger row. With
        --max-rate, the commit waits until ``due`` (monotonic), so the rows become visible on pace."""
        for ref, messages in self._messages(replay_id, rows, content).values():
            queues.send(conn, ref, messages)
        self._insert_ledger(conn, replay_id, key, len(rows))
        if due is not None:
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        hooks.checkpoint("before_replay_commit")
        conn.commit()
        hooks.checkpoint("after_replay_commit")

    # -- the whole --------------------------------------------------------------------------------

    def run(self) -> ReplayResult:
        opts = self.options
        opts.check()
        if not self.journal.exists(MESSAGES):
            raise QueuelakeError("there is no journal (lake table messages) to replay from: run a drain first")
        replay_id = opts.replay_id or (None if opts.dry_run else new_replay_id())
        result = self.result = ReplayResult(replay_id, dry_run=opts.dry_run)
        with connect(self.config, "queuelake-replay") as conn:
            plan: Plan | None = None
            done: set[int] = set()
            if replay_id is not None:
                if not opts.dry_run:
                    self._lock(conn, replay_id)
                try:
                    plan, done, result.total_sent = self._ledger(conn, replay_id)
                except QueuelakeError:
                    if not opts.dry_run:
                        raise
                    conn.rollback()  # a dry run before `install`: no ledger, nothing sent yet
                if plan is not None and plan.fingerprint != opts.fingerprint():
                    raise QueuelakeError(
                        f"replay {replay_id} was started with a different --where, --to or --limit; rerun it with "
                        "the same ones to resume, or start a new replay (another --replay-id)"
                    )
            version = plan.version if plan is not None else self.journal.table_version(MESSAGES)
            assert version is not None
            result.journal_version = version
            t0 = time.monotonic()
            keys = self._select(version)
            rows, others = self._rows(keys)
            result.matched = keys.num_rows
            log.info(
                "replay %s: %d journal row(s) match at version %d, %d of them landed; %d selected%s (%.1fs)",
                replay_id or "(dry run)",
                keys.num_rows,
                version,
                int(pc.sum(pc.equal(keys.column("outcome"), "landed")).as_py() or 0),
                len(rows),
                "" if opts.limit is None else f" (--limit {opts.limit})",
                time.monotonic() - t0,
            )
            if plan is not None and plan.total != len(rows):
                raise QueuelakeError(
                    f"replay {replay_id}: the predicate now selects {len(rows)} landed row(s) at journal version "
                    f"{version}, its plan {plan.total}: the selection is not reproducible; start a new replay"
                )
            self._resolve(conn, rows)
            conn.rollback()
            size = plan.batch_size if plan is not None else opts.effective_batch_size()
            result.selected = len(rows)
            result.batches = (len(rows) + size - 1) // size
            result.batches_done_before = len(done & set(range(result.batches)))
            records = self._skip_records(replay_id or "", rows, others)
            new, reasons, skip = self._settle_skips(replay_id, size, done, rows, records)
            self._count(result, rows, reasons, skip)
            if opts.dry_run:
                return result
            assert replay_id is not None
            if plan is None:
                plan = Plan(opts.fingerprint(), version, len(rows), size)
                self._insert_ledger(conn, replay_id, plan.key(), 0)
                conn.commit()
            self.sending = True
            self._record_skips(replay_id, new)
            for r in rows:
                if (r.queue, r.seq) in skip:
                    r.target = None
            self._send(conn, replay_id, plan, done, rows)
        return result

    def _lock(self, conn: Connection, replay_id: str) -> None:
        if not locks.try_lock(conn, f"queuelake.replay:{replay_id}"):
            raise QueuelakeError(f"replay {replay_id} is already running in another process")

    def _resolve(self, conn: Connection, rows: list[Row]) -> None:
        for row in rows:
            if row.reason is not None or row.address is None:
                continue
            row.target, row.reason = self.verdicts(conn, row.address, row.kind)
        bad = {r.address for r in rows if r.reason is not None and r.address is not None}
        for address in sorted(bad):
            log.warning("replay: not sending to %s", self.verdicts.cache[address][1])
        missing = sum(1 for r in rows if r.reason is not None and r.address is None)
        if missing:
            log.warning("replay: %d selected row(s) have no destination (no FailedQ / ProcessingEndpoint)", missing)

    def _skip_records(self, replay_id: str, rows: list[Row], others: pa.Table) -> list[dict[str, Any]]:
        now = dt.datetime.now(dt.timezone.utc)
        records = []
        for q, s, i, m, t, outcome, error in zip(
            *(others.column(c).to_pylist() for c in ("queue", "seq", "id", "message_id", "message_type")),
            others.column("outcome").to_pylist(),
            others.column("error").to_pylist(),
            strict=True,
        ):
            if outcome == "expired":
                reason = "expired: the journal keeps no headers or body of an expired message"
            else:
                reason = f"{outcome}: its headers could not be decoded ({error or 'no reason recorded'})"
            records.append(_skip(replay_id, q, s, i, m, t, None, reason, now))
        for r in rows:
            if r.reason is not None:
                records.append(
                    _skip(replay_id, r.queue, r.seq, r.id, r.message_id, r.message_type, r.address, r.reason, now)
                )
        return records

    def _count(self, result: ReplayResult, rows: list[Row], reasons: list[str], skip: set[tuple[str, int]]) -> None:
        counted = collections.Counter(reasons)
        result.skipped = sum(counted.values())
        result.skipped_reasons = dict(counted.most_common())
        destinations: collections.Counter[str] = collections.Counter()
        types: dict[str, collections.Counter[str]] = {}
        for r in rows:
            if r.target is None or (r.queue, r.seq) in skip:
                continue
            destinations[r.target.canonical] += 1
            types.setdefault(r.target.canonical, collections.Counter())[r.message_type or "(unknown)"] += 1
        result.to_send = sum(destinations.values())
        result.destinations = dict(destinations.most_common())
        result.message_types = {d: dict(c.most_common()) for d, c in types.items()}

    def _settle_skips(
        self, replay_id: str | None, size: int, done: set[int], rows: list[Row], records: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[str], set[tuple[str, int]]]:
        """Which rows this run skips, and which of them are new to the record. The record is final: a
        row an earlier run recorded stays unsent; a row found undeliverable now is recorded only when
        its batch is still to be sent (one in a sent batch went out while its queue was there).
        Returns (new records, reasons to report, keys not to send)."""
        frozen = self._recorded_skips(replay_id) if replay_id else set()
        position = {(r.queue, r.seq): k // size for k, r in enumerate(rows)}
        new, reasons, current = [], [], set()
        for rec in records:
            key = (rec["queue"], rec["seq"])
            current.add(key)
            if key in frozen:
                reasons.append(rec["reason"])
            elif key not in position or position[key] not in done:
                new.append(rec)
                reasons.append(rec["reason"])
        earlier = [k for k in frozen if k in position and k not in current]
        reasons += ["recorded as skipped by an earlier run of this replay"] * len(earlier)
        skip = frozen | {(rec["queue"], rec["seq"]) for rec in new}
        return new, reasons, skip

    def _send(self, conn: Connection, replay_id: str, plan: Plan, done: set[int], rows: list[Row]) -> None:
        opts, result = self.options, self.result
        n, size = plan.batches, plan.batch_size
        content = _Content(self.journal_files(plan.version))
        started = time.monotonic()
        sent = 0
        for k in range(n):
            if k in done:
                continue
            if stopping.requested():
                result.status = "interrupted"
                break
            batch = [r for r in rows[k * size : (k + 1) * size] if r.target is not None]
            key = _batch_key(k, n, size)
            due = None if opts.max_rate is None else started + (sent + len(batch)) / opts.max_rate
            t_batch = time.monotonic()
            try:
                self._send_batch(conn, replay_id, key, batch, content, due)
            except QueuelakeError as exc:
                conn.rollback()
                result.status = "failed"
                result.failed_batches.append(key)
                result.error = str(exc)
                log.error("replay %s batch %s failed, nothing of it was sent: %s", replay_id, key, exc)
                continue
            sent += len(batch)
            result.rows_sent = sent
            result.total_sent += len(batch)
            result.batches_sent += 1
            for r in batch:
                self.sent_per_destination[r.target.canonical] += 1  # type: ignore[union-attr]
            elapsed = time.monotonic() - started
            result.seconds_sending = round(elapsed, 3)
            result.rate = round(sent / elapsed, 1) if elapsed else 0.0
            left = sum(1 for j in range(k + 1, n) if j not in done)
            log.info(
                "replay %s batch %d/%d: %d rows in %.2fs; %d sent at %.0f msg/s, %d batch(es) left",
                replay_id,
                k + 1,
                n,
                len(batch),
                time.monotonic() - t_batch,
                sent,
                result.rate,
                left,
            )

    def journal_files(self, version: int) -> list[str]:
        if self._files is None:
            # through the lake port: it knows the storage options of the root
            self._files = self.journal.added_files(MESSAGES, None, version)
        return self._files

    # -- the record -----------------------------------------------------------------------------

    def record(self, result: ReplayResult) -> None:
        """A ``replays`` row and ``runs`` rows (one per destination) for this run."""
        ended = dt.datetime.now(dt.timezone.utc)
        opts = self.options
        replay = {
            "replay_id": result.replay_id,
            "run_id": self.run_id,
            "started_at": self.started,
            "ended_at": ended,
            "predicate": opts.predicate,
            "to_queue": opts.to,
            "limit": opts.limit,
            "journal_version": result.journal_version,
            "selected": result.selected,
            "destinations": list(result.destinations.items()),
            "rows_sent": result.rows_sent,
            "total_sent": result.total_sent,
            "batches": result.batches,
            "batches_done_before": result.batches_done_before,
            "failed_batches": len(result.failed_batches),
            "skipped": result.skipped,
            "skipped_reasons": list(result.skipped_reasons.items()),
            "max_rate": opts.max_rate,
            "rate": result.rate,
            "status": result.status,
            "error": result.error,
        }
        self.lake.append(
            REPLAYS, pa.Table.from_pylist([replay], schema=REPLAYS_SCHEMA), f"queuelake.replays/{self.run_id}", 1
        )
        # a replay that sent nothing still gets its one runs row
        per_destination: list[tuple[str | None, int]] = [*sorted(self.sent_per_destination.items())] or [(None, 0)]
        runs = [
            {
                "run_id": self.run_id,
                "command": "replay",
                "queue": destination,
                "started_at": self.started,
                "ended_at": ended,
                "published": count,
                "batches": result.batches_sent,
                "seconds": result.seconds_sending,
                "rate": result.rate,
                "status": result.status,
                "error": result.error,
            }
            for destination, count in per_destination
        ]
        append_runs(self.lake, self.run_id, "replay", runs)


def _skip(
    replay_id: str,
    queue: str,
    seq: int,
    row_id: str | None,
    message_id: str | None,
    message_type: str | None,
    destination: str | None,
    reason: str,
    now: dt.datetime,
) -> dict[str, Any]:
    return {
        "replay_id": replay_id,
        "queue": queue,
        "seq": seq,
        "id": row_id,
        "message_id": message_id,
        "message_type": message_type,
        "destination": destination,
        "reason": reason,
        "recorded_at": now,
    }


def replay(config: Config, spark: SparkSession, lake: LakeEngine, options: ReplayOptions) -> dict[str, Any]:
    """Run (or dry-run) one replay; returns the JSON summary. Once sending has begun, a run records
    itself in ``replays`` and ``runs`` however it ends (failed, interrupted)."""
    replayer = Replayer(config, spark, lake, options)
    try:
        result = replayer.run()
    except QueuelakeError as exc:
        if not replayer.sending:
            raise
        result = replayer.result
        result.status, result.error = "failed", str(exc)
    except BaseException as exc:  # SIGTERM's Interrupted, Ctrl-C: record what was sent, then go on
        if replayer.sending:
            replayer.result.status, replayer.result.error = "interrupted", str(exc) or type(exc).__name__
            replayer.record(replayer.result)
        raise
    if not options.dry_run:
        replayer.record(result)
    summary = dict(result.__dict__)
    if options.dry_run:
        for k in ("rows_sent", "total_sent", "batches_sent", "seconds_sending", "rate", "failed_batches"):
            summary.pop(k)
        summary["note"] = "dry run: nothing was sent or written"
    else:
        summary.pop("message_types")
        summary.pop("dry_run")
    return summary
