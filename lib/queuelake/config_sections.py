"""The sections of a config file (``transport``, ``lake``, ``spark``, ``drain``, ``transforms``,
``publish``, ``replay``, ``bodies``): each section's keys, their defaults, and the checks one section
can make alone. ``config.py`` reads the file, fills ``${VAR}`` and checks across sections.

Why apart from the loading: a reader looking for what a key means and what it accepts finds it here
among the keys only, and a module that needs one section's settings (``DrainConfig``, ``LakeConfig``)
names this module. Like ``config.py``, it imports only ``errors`` and the dialect objects, which
say what ``transport.dialect`` and ``transport.driver`` may be.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from queuelake.dialects.dialect import DIALECTS
from queuelake.errors import ConfigError


def build_section(cls: type, data: Any, where: str) -> Any:
    """One section (or list entry) from its mapping, strictly: an unknown key is an error naming the
    known ones, a missing required key an error naming it, a value of the wrong type an error naming
    its key (``where`` says which part of the file). A number or a yes/no written as text (a quoted
    YAML value, a ``${VAR}``) is read as one."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(cls) if f.init}  # a field set after loading is no key
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    hints = typing.get_type_hints(cls)
    typed = {key: typed_value(hints[key], value, f"{where}.{key}") for key, value in data.items()}
    try:
        return cls(**typed)
    except TypeError as exc:  # a required key is missing
        raise ConfigError(f"{where}: {exc}") from None


_INTEGER = re.compile(r"[+-]?\d+")
_YES_NO = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def _finite(number: float) -> bool:
    """Whether ``number`` is a finite float: an integer past a float's range is not (YAML reads a
    400-digit number as an int, and ``math.isfinite`` raised OverflowError on it: a review)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def typed_value(hint: Any, value: Any, where: str) -> Any:
    """``value`` as the key's type ``hint`` says, or a ConfigError naming the key and what it expects.
    Why: a value of another type was taken as it was, and went wrong far from the file: ``queues:
    Sales`` (no brackets) drained and created the queues S, a, l, e and s; a number as the connection
    failed with a traceback and no summary; ``workers_per_queue: "2"`` failed comparing it (a review).
    The value itself is never shown: it may be a secret."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return typed_value(arg, value, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: expected {_expected(hint)}, got {_kind(value)}")
    if hint is Any or (isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, (dict, hint))):
        return value  # a nested section: its own class checks it
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _YES_NO:
            return _YES_NO[value.strip().lower()]
        if isinstance(value, int) and value in (0, 1):  # YAML's 1 and 0, as the texts "1" and "0" are
            return bool(value)
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
            return int(value)
    elif hint is float:  # finite: YAML's .nan and .inf, and "nan"/"inf" as text, are no seconds
        if isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value):
            return value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
            else:
                if math.isfinite(number):
                    return number
    elif hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, os.PathLike):  # a folder given from Python (a notebook's, a test's Path)
            return os.fspath(value)
    elif origin is list:
        if isinstance(value, (list, tuple)):  # a tuple given from Python is a list
            return [typed_value(args[0], item, f"{where}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, str):
            raise ConfigError(f"{where}: expected {_expected(hint)}, got one string (a list is written [a, b])")
    elif origin is dict:
        if isinstance(value, dict):
            if args[1] is str:  # settings handed on as text (Spark's, the store's): numbers and yes/no too
                # a key left empty (None) stays None: the store's options drop it, as before
                return {
                    str(k): v if v is None or isinstance(v, str) else _as_text(v, f"{where}.{k}")
                    for k, v in value.items()
                }
            return value
    else:
        return value
    raise ConfigError(f"{where}: expected {_expected(hint)}, got {_kind(value)}")


def _as_text(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    raise ConfigError(f"{where}: expected a text, number or true/false, got {_kind(value)}")


def _expected(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_expected(a) for a in args if a is not type(None)) + (
            " (or nothing)" if type(None) in args else ""
        )
    if origin is list:
        return f"a list of {_expected(args[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        return "a mapping"
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "a text", Any: "a value"}
    return names.get(hint, "a mapping")


def _kind(value: Any) -> str:
    """What was given, by kind only (never the value: it may be a secret)."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, float) and not math.isfinite(value):
        return "a number that is not finite"
    names = {str: "a text", int: "a whole number", float: "a number", list: "a list", dict: "a mapping"}
    return names.get(type(value), type(value).__name__)


@dataclass
class TransportConfig:
    dialect: str = "postgresql"
    driver: str = "psycopg"
    connection: str | None = None
    default_schema: str | None = None
    default_catalog: str | None = None
    subscription_table: str = "SubscriptionRouting"
    ledger_table: str = "queuelake_publish_ledger"
    # the drain's durable claims: one row per batch between its DELETE and its Delta commit
    claims_table: str = "queuelake_drain_claims"
    # data folder of a throwaway PostgreSQL (pgserver) started when connection is empty
    embedded: str | None = None
    # endpoints that receive delayed messages (outbound rows with deliver_at): install creates their
    # <endpoint>.Delayed tables, which NServiceBus only creates for endpoints that enable delayed delivery
    delayed_endpoints: list[str] = field(default_factory=list)
    # not a key: the ``${VAR}`` variables of ``connection`` when they were set but left it empty
    # (``config.from_dict``), for the error of a command that opens the queue database (``db.connect``)
    empty_variables: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rules = DIALECTS.get(self.dialect)
        if rules is None:
            raise ConfigError(f"transport.dialect must be {' or '.join(sorted(DIALECTS))}, not {self.dialect!r}")
        if self.driver not in rules.drivers:
            raise ConfigError(
                f"transport.driver {self.driver!r} does not reach {self.dialect}: use {', '.join(rules.drivers)}"
            )
        if self.default_schema is None:
            self.default_schema = rules.default_schema
        if self.embedded and not rules.embeddable:
            raise ConfigError(f"transport.embedded starts a PostgreSQL server; it cannot be a {self.dialect} database")
        if self.default_catalog is not None and not rules.has_catalogs:
            raise ConfigError(f"transport.default_catalog: {self.dialect} addresses have no catalog part")


_OUTCOMES = ("landed", "expired", "quarantined")


@dataclass(frozen=True)
class RetentionRule:
    """How long journal rows of one queue and/or outcome are kept: ``days`` after their ``drained_at``
    (null: for ever). ``queue`` is an address as ``drain.queues`` names it (canonicalised by the
    retention, ``pipeline/store/retention.py``); a missing ``queue`` or ``outcome`` matches any."""

    days: int | None
    queue: str | None = None
    outcome: str | None = None


@dataclass
class RetentionConfig:
    """``lake.retention``: rules, the first that matches a row decides its age limit; rows no rule
    matches keep ``default_days`` (null: for ever). Why first-match: an operator reads the list top
    down, and ``{queue: audit, days: 400}`` after ``{outcome: expired, days: 30}`` means what it says."""

    rules: list[RetentionRule] = field(default_factory=list)
    default_days: int | None = None

    def __post_init__(self) -> None:
        _check_days(self.default_days, "lake.retention.default_days")
        if not isinstance(self.rules, list):
            raise ConfigError("lake.retention.rules must be a list of {queue, outcome, days}")
        rules = []
        for i, raw in enumerate(self.rules):
            where = f"lake.retention.rules[{i}]"
            if isinstance(raw, RetentionRule):
                rules.append(raw)
                continue
            if isinstance(raw, dict) and "days" not in raw:
                raise ConfigError(f"{where}: give days (a whole number of days, or null: keep for ever)")
            rule = build_section(RetentionRule, raw, where)
            _check_days(rule.days, f"{where}.days")
            if rule.outcome is not None and rule.outcome not in _OUTCOMES:
                raise ConfigError(f"{where}.outcome must be one of {', '.join(_OUTCOMES)}, not {rule.outcome!r}")
            if rule.queue is not None and (not isinstance(rule.queue, str) or not rule.queue.strip()):
                raise ConfigError(f"{where}.queue must be a queue address")
            rules.append(rule)
        self.rules = rules


def _check_days(days: Any, where: str) -> None:
    if days is not None and (isinstance(days, bool) or not isinstance(days, int) or days < 0):
        raise ConfigError(f"{where} must be a whole number of days (0 or more) or null (keep for ever), not {days!r}")


# what a metastore takes as a name (lake.catalog, lake.schema; ``lake/metastore.py`` quotes it so)
METASTORE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,254}")


@dataclass
class LakeConfig:
    root: str = "./lake"
    engine: str = "auto"
    # object storage credentials and settings in deltalake's keys (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL,
    # ...): secrets, given as ${VAR}; never logged, redacted from errors (lake/storage.py maps them)
    storage_options: dict[str, str] = field(default_factory=dict)
    # metastore names: where schema is set, every lake table is also registered as
    # <catalog>.<schema>.<table> (catalog null: the session's current catalog), so SQL users and
    # notebooks read `queuelake.messages` rather than a path (lake/metastore.py)
    catalog: str | None = None
    schema: str | None = None
    # how long journal rows are kept (maintain applies it): rules by queue and outcome, by drained_at
    retention: RetentionConfig = field(default_factory=RetentionConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.retention, RetentionConfig):
            self.retention = build_section(RetentionConfig, self.retention, "lake.retention")
        if self.engine not in ("auto", "delta-spark", "delta-rs"):
            raise ConfigError(f"lake.engine must be auto, delta-spark or delta-rs, not {self.engine!r}")
        if self.catalog is not None and self.schema is None:
            raise ConfigError("lake.catalog needs lake.schema: tables are registered as <catalog>.<schema>.<table>")
        for key in ("catalog", "schema"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"lake.{key} must be a non-empty name")
            # as the metastore takes it (``lake/metastore.py``): 'my schema' drained every run, then failed
            # bodies and the transforms as "cannot be a metastore name" (a review)
            if value is not None and not METASTORE_NAME.fullmatch(value):
                raise ConfigError(f"lake.{key} {value!r} cannot be a metastore name: use letters, digits, '_' and '-'")
        _check_root_scheme(self.root)
        if "://" not in self.root and re.search(r"%[0-9A-Fa-f]{2}", self.root):
            # deltalake reads a local path as a URI: "a%20b" would be the folder "a b"
            raise ConfigError(
                f"lake.root {self.root!r}: a local folder whose name holds %XX cannot be a Delta table root "
                "(deltalake decodes it as an escaped character); rename the folder"
            )
        if "://" not in self.root and re.search(r"[\[\]?]", self.root):
            # deltalake turns a local path into a URL: brackets make it panic (an invalid host), and
            # "?" would start a query; either way the table could not be opened
            raise ConfigError(
                f"lake.root {self.root!r}: a local folder whose name holds '[', ']' or '?' cannot be a Delta "
                "table root (deltalake cannot turn it into a URL); rename the folder"
            )
        if "#" in self.root:
            # deltalake keeps it escaped (%23) in its table URIs, and then reads no history of the table:
            # erase and maintain failed after their first delete, and bodies reported 0 rows written
            raise ConfigError(
                f"lake.root {self.root!r}: a root whose path holds '#' cannot be a Delta table root (deltalake "
                "reads no history of its tables); rename the folder or prefix"
            )
        if not isinstance(self.storage_options, dict):
            raise ConfigError("lake.storage_options must be a mapping of option name to value")
        self.storage_options = {str(k): str(v) for k, v in self.storage_options.items() if v is not None}


# the schemes of a lake root some engine opens (object_store's and Hadoop's); a local folder has none
ROOT_SCHEMES = (
    *("file", "s3", "s3a", "s3n", "gs", "gcs", "az", "azure", "abfs", "abfss", "adl", "wasb", "wasbs"),
    *("hdfs", "viewfs", "dbfs"),
)


def _check_root_scheme(root: str) -> None:
    """A root that looks like a URI is one an engine opens. Why: ``s3:/bucket`` (one slash) was taken for
    a local folder, and a drain wrote ``./s3:/bucket/messages``, exit 0; ``ftp://...`` failed as
    "unexpected" deep in pyarrow (a review)."""
    typo = re.match(r"^(?!file:)([A-Za-z][A-Za-z0-9+.-]+):/(?!/)", root)  # file:/tmp/lake is a file URI
    if typo:
        raise ConfigError(
            f"lake.root {root!r}: a URI needs two slashes after {typo.group(1)}: (as {typo.group(1)}://...)"
            "; a local folder's name cannot hold ':/'"
        )
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", root)
    if scheme and scheme.group(1).lower() not in ROOT_SCHEMES:
        raise ConfigError(
            f"lake.root {root!r}: {scheme.group(1)}:// is no store the lake can be in (a local folder, or "
            f"{', '.join(s + '://' for s in ROOT_SCHEMES)})"
        )


@dataclass
class SparkConfig:
    master: str = "local[2]"
    app_name: str = "queuelake"
    conf: dict[str, str] = field(default_factory=dict)
    # journal rows bodies and each transform take in one Spark job: a larger increment (a first
    # backlog) goes a slice at a time, each committed, so memory follows this and not the backlog. The
    # default fits a default local session (spark.driver.memory 1g): 1.5M rows of one increment
    # already peaked at 2.9 GB there, and 5M ran it out of memory. Bodies' bytes are bounded apart:
    # bodies caches a slice on disk, samples by bytes and sizes Spark's batches by the average body
    slice_rows: int = 500_000

    def __post_init__(self) -> None:
        if isinstance(self.slice_rows, bool) or not isinstance(self.slice_rows, int) or self.slice_rows < 1:
            raise ConfigError(
                f"spark.slice_rows must be a number of journal rows of at least 1, not {self.slice_rows!r}"
            )


MOST_COMMIT_INTERVAL_SECONDS = 10  # drain.commit_interval_seconds (see there)
MOST_TIMEOUT_SECONDS = 2_147_483  # PostgreSQL's timeouts are whole milliseconds in a 32-bit integer
MOST_WORKERS_PER_QUEUE = 32  # each a receive session and thread; the drain's connection plan assumes it


def _not_whole(value: object) -> bool:
    return isinstance(value, bool) or not isinstance(value, int)


def _not_number(value: object) -> bool:
    return isinstance(value, bool) or not isinstance(value, (int, float)) or value != value  # NaN


@dataclass
class DrainConfig:
    queues: list[str] = field(default_factory=list)
    batch_size: int = 10000
    workers_per_queue: int = 2
    max_messages: int | None = None
    max_seconds: float | None = None
    # drained queues that queuelake also sends to, on purpose: without this a queue that is both
    # drained and a destination is a configuration error (the drain would take what was sent there
    # away from its endpoint)
    also_destinations: list[str] = field(default_factory=list)
    # auto: ADBC (Arrow straight from PostgreSQL, ~4x less CPU per row) when the dialect is
    # postgresql and adbc-driver-postgresql is installed; else the transport's driver
    receive_driver: str = "auto"
    # after an empty receive, how long to keep retrying while other sessions still hold rows
    # (a competing endpoint's open transaction) before reporting them as left behind
    settle_seconds: float = 5.0
    # bounds on the drain's own sessions, so a dead or hung drain cannot hold queue rows
    statement_timeout_seconds: float = 300.0
    idle_in_transaction_timeout_seconds: float = 600.0
    # database connections a drain holds at once, whatever the number of queues: PostgreSQL's default
    # max_connections is 100, shared with every endpoint (a drain of 100 queues opened ~300 and failed)
    max_connections: int = 24
    # a batch's received bytes (headers and bodies, as Arrow) at most: batch_size rows of 66 KB audit
    # bodies would be 690 MB per batch, two per worker in flight. A worker's first batch takes
    # batch_megabytes / 16 KB rows at most, later ones as many as the bytes per row seen so far allow.
    batch_megabytes: int = 64
    # where the queues' workers run: driver (threads of this process) or executors (Spark tasks, a
    # task per big queue and one per several small ones, each in its own Python process; the driver
    # commits what they claim), or processes (the executors' tasks in local processes of this machine,
    # no Spark: pipeline/drain/processes.py)
    on: str = "driver"
    # with on: processes, how many: null for the machine's cores (fewer when max_connections is tight)
    processes: int | None = None
    # at least this long between the starts of two group commits (the driver's committer) or of two
    # polls that found claims (with processes and executors, its claims poller): the batches claimed
    # meanwhile go in one group commit. 0 commits back to back; 1.0 makes a run's group commits at
    # most about one a second, whatever its queues and batches, each queue's end waiting up to a
    # second for its last commit. At most MOST_COMMIT_INTERVAL_SECONDS: a stop request or the run's
    # deadline waits for the interval, and a task gives up on a driver silent for minutes
    commit_interval_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.on not in ("driver", "executors", "processes"):
            raise ConfigError(f"drain.on must be driver, executors or processes, not {self.on!r}")
        if self.processes is not None and (
            isinstance(self.processes, bool) or not isinstance(self.processes, int) or self.processes < 1
        ):
            raise ConfigError(f"drain.processes must be a number, 1 or more, or null, not {self.processes!r}")
        if (
            isinstance(self.batch_megabytes, bool)
            or not isinstance(self.batch_megabytes, int)
            or self.batch_megabytes < 1
        ):
            raise ConfigError(
                f"drain.batch_megabytes must be a whole number of megabytes, 1 or more, not {self.batch_megabytes!r}"
            )
        if (
            isinstance(self.commit_interval_seconds, bool)
            or not isinstance(self.commit_interval_seconds, (int, float))
            or not 0 <= self.commit_interval_seconds <= MOST_COMMIT_INTERVAL_SECONDS
        ):
            raise ConfigError(
                f"drain.commit_interval_seconds must be a number of seconds from 0 to {MOST_COMMIT_INTERVAL_SECONDS}, "
                f"not {self.commit_interval_seconds!r}"
            )
        if self.settle_seconds < 0:
            raise ConfigError("drain.settle_seconds must be 0 or more")
        # as --max-messages and --max-seconds are checked (``commands/argtypes.py``): a negative count reached
        # the database as a negative LIMIT, every queue failed; a time box of 0 or less drained nothing, silently
        if self.max_messages is not None and (_not_whole(self.max_messages) or self.max_messages < 1):
            raise ConfigError(
                f"drain.max_messages must be a whole number, 1 or more, or null, not {self.max_messages!r}"
            )
        if self.max_seconds is not None and (_not_number(self.max_seconds) or not self.max_seconds > 0):
            raise ConfigError(
                f"drain.max_seconds must be a number of seconds above 0, or null, not {self.max_seconds!r}"
            )
        for key in ("statement_timeout_seconds", "idle_in_transaction_timeout_seconds"):
            value = getattr(self, key)
            # PostgreSQL takes a timeout of at most 2^31-1 ms: a longer one failed every queue's session
            if _not_number(value) or not 0 < value <= MOST_TIMEOUT_SECONDS:
                raise ConfigError(
                    f"drain.{key} must be a number of seconds above 0 and at most {MOST_TIMEOUT_SECONDS:,} "
                    f"(about 24 days), not {value!r}"
                )
        choices = ["auto", *dict.fromkeys(name for rules in DIALECTS.values() for name in rules.drivers)]
        if self.receive_driver not in choices:
            raise ConfigError(f"drain.receive_driver must be {', '.join(choices)}, not {self.receive_driver!r}")
        if self.batch_size < 1:
            raise ConfigError("drain.batch_size must be at least 1")
        if _not_whole(self.workers_per_queue) or not 1 <= self.workers_per_queue <= MOST_WORKERS_PER_QUEUE:
            raise ConfigError(
                f"drain.workers_per_queue must be a whole number from 1 to {MOST_WORKERS_PER_QUEUE}, "
                f"not {self.workers_per_queue!r}"
            )
        if self.max_connections < 4:
            raise ConfigError(
                "drain.max_connections must be at least 4 (the committer's, ADBC's, a queue's lock, a worker's)"
            )


@dataclass
class TransformConfig:
    name: str
    output: str
    function: str | None = None
    sql: str | None = None
    # the queues this transform's Send rows name (its outbound `destination` values): install creates
    # them, and a drained one is a configuration error unless drain.also_destinations lists it
    destinations: list[str] = field(default_factory=list)
    # great-expectations on the journal rows this transform reads (each increment, before it runs):
    # a suite JSON file path, or an inline list of {expectation_type: {kwargs}}; a failing suite
    # blocks the transform's increment (nothing written, its checkpoint stays)
    expectations: str | list[Any] | None = None

    def __post_init__(self) -> None:
        if (self.function is None) == (self.sql is None):
            raise ConfigError(f"transform {self.name!r}: give exactly one of function or sql")
        if self.expectations is not None and (not isinstance(self.expectations, (str, list)) or not self.expectations):
            raise ConfigError(f"transforms.{self.name}.expectations: give a suite file path or a list of expectations")


@dataclass
class PublishConfig:
    endpoint: str = "Lakehouse"
    outputs: list[str] = field(default_factory=list)
    batch_size: int = 5000
    # messages in one publish transaction at most, every subscriber's copy counted: a round of events
    # fanned out to many subscribers sends fewer rows per batch (pipeline/publish/run.py ``_fitted``)
    batch_copies: int = 50_000
    # output -> great-expectations suite: a suite JSON file path, or an inline list of
    # {expectation_type: {kwargs}}; a failing suite blocks that output's round (quality/expectations.py)
    expectations: dict[str, Any] = field(default_factory=dict)
    # a round of at least this many rows is sent from Spark executors, one task per Parquet row group
    # (pipeline/publish/executors.py); null: always from the driver
    executors_from_rows: int | None = 1_000_000

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError("publish.batch_size must be at least 1")
        if isinstance(self.batch_copies, bool) or not isinstance(self.batch_copies, int) or self.batch_copies < 1:
            raise ConfigError("publish.batch_copies must be a message count of at least 1")
        if self.executors_from_rows is not None and (
            isinstance(self.executors_from_rows, bool)
            or not isinstance(self.executors_from_rows, int)
            or self.executors_from_rows < 1
        ):
            raise ConfigError("publish.executors_from_rows must be a row count of at least 1, or null")
        self.expectations = self.expectations or {}
        if not isinstance(self.expectations, dict):
            raise ConfigError("publish.expectations must map an output to a suite file or a list of expectations")
        for output, suite in self.expectations.items():
            if output not in self.outputs:
                raise ConfigError(f"publish.expectations.{output}: not one of publish.outputs")
            if not isinstance(suite, (str, list)) or not suite:
                raise ConfigError(f"publish.expectations.{output}: give a suite file path or a list of expectations")


@dataclass
class ReplayConfig:
    # a replay of at least this many selected rows is sent from Spark executors, a task per few
    # batches (pipeline/replay/executors.py); null: always from the driver
    executors_from_rows: int | None = 1_000_000

    def __post_init__(self) -> None:
        if self.executors_from_rows is not None and (
            isinstance(self.executors_from_rows, bool)
            or not isinstance(self.executors_from_rows, int)
            or self.executors_from_rows < 1
        ):
            raise ConfigError("replay.executors_from_rows must be a row count of at least 1, or null")


_TABLE_PREFIX = re.compile(r"[a-z][a-z0-9_]{0,39}")


@dataclass
class BodiesConfig:
    """Typed body tables (``queuelake bodies``, a step of ``run``): one Delta table per message type,
    its columns inferred from the bodies (pipeline/bodies/). The defaults make a table of every type
    the journal holds, from every queue, business and audit copies counted once."""

    # a step of `queuelake run` (between drain and transform); `queuelake bodies` runs it whatever this says
    enabled: bool = True
    # journal queues to read (names as in drain.queues); empty: every queue in the journal
    queues: list[str] = field(default_factory=list)
    # message type names (no assembly part; `*` and `?` wildcards, e.g. Sales.*); empty: every type
    types: list[str] = field(default_factory=list)
    # audit copies (rows with a ProcessingEnded header): counted once with the business queue's copy
    include_audit: bool = True
    # copies in the error queue (rows with a FailedQ header): counted once with the message's other copies,
    # which are preferred; a message that only failed is typed from its error copy, so `where --field`
    # finds it (a failed order is the one an operator asks after)
    include_failed: bool = True
    # table name = prefix + the type name in lower case, non-alphanumerics as `_`
    table_prefix: str = "body_"
    # type name -> table name, where the derived one will not do
    tables: dict[str, str] = field(default_factory=dict)
    # rows per message type and version the schema is inferred from in each increment (a random
    # sample beyond that), and about 64 MB of bodies for all types of a slice together (each type
    # version its share, never under 20 bodies: the samples go to the driver); null: every row
    sample_rows: int | None = 5000
    # keep Newtonsoft's `$type` member of the body's root as a column (it repeats the message type)
    keep_type_member: bool = False
    # typed tables written at once (each its own Spark job and commit): jobs submitted together keep
    # the executors busy while the driver reads one table's log or commits another's files
    parallel_tables: int = 4

    def __post_init__(self) -> None:
        tables_at_once = self.parallel_tables
        if isinstance(tables_at_once, bool) or not isinstance(tables_at_once, int) or tables_at_once < 1:
            raise ConfigError("bodies.parallel_tables must be a number of tables of at least 1")
        if not isinstance(self.table_prefix, str) or not _TABLE_PREFIX.fullmatch(self.table_prefix):
            raise ConfigError(
                f"bodies.table_prefix {self.table_prefix!r}: start with a lower-case letter; letters, digits, '_'"
            )
        if self.sample_rows is not None and (
            isinstance(self.sample_rows, bool) or not isinstance(self.sample_rows, int) or self.sample_rows < 1
        ):
            raise ConfigError("bodies.sample_rows must be a row count of at least 1, or null (every row)")
        for key in ("queues", "types"):
            value = getattr(self, key)
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                raise ConfigError(f"bodies.{key} must be a list of names")
        if not isinstance(self.tables, dict):
            raise ConfigError("bodies.tables must map a message type name to a table name")
        for type_name, table in self.tables.items():
            if not isinstance(table, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,127}", table):
                raise ConfigError(
                    f"bodies.tables.{type_name}: {table!r} is not a table name (lower-case letters, digits, '_')"
                )
