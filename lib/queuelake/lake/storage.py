"""Object storage for lake roots: ``lake.storage_options`` for deltalake, pyarrow and Spark (s3a).

One map in the config (deltalake's own keys, e.g. ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ALLOW_HTTP``) serves every reader and writer of the lake:

- deltalake gets it as ``storage_options=`` on every table it opens, creates or commits to;
- pyarrow (the Parquet files our own writers stage and our readers read) gets an ``S3FileSystem``
  built from the same keys, so the drain's staged files land where the Delta log will point;
- Spark gets the matching ``fs.s3a.*`` settings on the session (hadoop-aws), with ``s3://`` served by
  the S3A file system too: deltalake names files ``s3://...`` and Spark must read those same URIs.

Retries: S3 throttles in bursts (``503 SlowDown`` for every request for seconds on end) and drops
connections; each client's own retry defaults gave up inside such a burst (pyarrow's three attempts
failed a drain on ``HeadObject``). An S3 root's options therefore get ``RETRY_DEFAULTS`` (object_store's
keys, which deltalake reads as they are), unless the config sets them; ``filesystem`` and ``s3a_conf``
derive pyarrow's and S3A's retries from the same keys, so one setting governs every client.

Why a registry of roots: modules handed only a file or table URI (increments, replay's Parquet reads,
Spark Python workers) must reach the same credentials without each caller threading them through; an
engine registers its root when it is opened, and ``options_for(uri)`` finds the longest root the URI
is under. Values are secrets: nothing here logs them, and ``cli._secrets`` redacts them from errors.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar, cast
from urllib.parse import urlparse

from queuelake.errors import LakeError
from queuelake.report import log
from queuelake.stopping import interruptible

T = TypeVar("T")
# the end of a stream of batches, told apart from any batch
_NO_MORE = object()

_ROOTS: dict[str, dict[str, str]] = {}
_GUARD = threading.Lock()

# deltalake key (upper case) -> Hadoop S3A setting. Endpoint, region and http handled in s3a_conf.
_S3A_KEYS = {
    "AWS_ACCESS_KEY_ID": "fs.s3a.access.key",
    "AWS_SECRET_ACCESS_KEY": "fs.s3a.secret.key",
    "AWS_SESSION_TOKEN": "fs.s3a.session.token",
    "AWS_TOKEN": "fs.s3a.session.token",
}
_TRUE = ("1", "true", "yes", "on")


# object_store's retry settings, which deltalake reads only in this (lower) case: an upper-cased
# MAX_RETRIES is silently ignored (tried with deltalake 1.6). object_store's backoff is "decorrelated
# jitter": each wait is drawn between init_backoff and base x the previous one, capped at max_backoff;
# with base 2 the waits hardly grow (10 retries took 1.9 s and failed inside a 2 s burst), with base 3
# they grow x1.5 on average. So: 10 retries, each wait at least 300 ms (the 7th retry comes 2.1 s
# after the first failure at the soonest, ~8 s on average), at most 5 s, no retry begun after 180 s
# (object_store's own defaults: 100 ms, base 2, 15 s, 180 s). Not 60 s: object_store begins no retry
# once ``retry_timeout`` has passed, so a request that timed out after ``timeout`` (60 s) was never
# tried again, and one stalled reply failed a drain that one retry would have landed (a review).
RETRY_DEFAULTS = {
    "max_retries": "10",
    "retry_timeout": "180s",
    "backoff_config.init_backoff": "300ms",
    "backoff_config.max_backoff": "5s",
    "backoff_config.base": "3",
}
# object_store's request timeout (from sending a request to the end of its reply), whose own default of
# 30 s failed a drain whose commit PUT a slow store answered after 35 s (a review); pyarrow's S3 client
# gave up on a reply after ~9 s without a byte, and failed a drain whose staged files' PUTs took 20 s.
# One key, ``timeout``, now sets every client's: 60 s, S3A's own default. Not longer: pyarrow retries a
# request that timed out up to ``max_retries`` times with no overall cap, so a store that takes
# connections and never answers holds a command ``timeout`` x 11. ``connect_timeout`` passes too.
TIMEOUT_DEFAULTS = {"timeout": "60s"}
_CLIENT_KEYS = (*RETRY_DEFAULTS, *TIMEOUT_DEFAULTS, "connect_timeout")
_LOWER = {key.upper(): key for key in _CLIENT_KEYS}


# the keys whose values are durations: written for every client in one spelling (``canonical_duration``)
_DURATION_KEYS: tuple[str, ...] = (
    "retry_timeout",
    "backoff_config.init_backoff",
    "backoff_config.max_backoff",
    "connect_timeout",
    *TIMEOUT_DEFAULTS,
)
# (timeout, retry_timeout) pairs already warned about: every client's options pass here, many times a command
_WARNED_TIMEOUTS: set[tuple[str, str]] = set()


def normalise(options: Mapping[str, Any] | None) -> dict[str, str]:
    """Keys as deltalake spells them (upper case; object_store's retry keys lower case), values as
    strings, durations in the one spelling every client reads alike; None values dropped."""
    out: dict[str, str] = {}
    for key, value in (options or {}).items():
        if value is not None:
            upper = str(key).upper()
            name = _LOWER.get(upper, upper)
            out[name] = canonical_duration(str(value), name) if name in _DURATION_KEYS else str(value)
    return out


def canonical_duration(value: str, key: str) -> str:
    """A duration as whole seconds (``30s``) or milliseconds (``1500ms``). Why: the clients read the same
    text differently: a bare ``30`` was 30 s to pyarrow, 30 ms to S3A, and refused by deltalake (a
    review); every client reads ``30s`` and ``1500ms`` alike."""
    millis = round(duration_seconds(value, key) * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def lake_options(root: str, options: Mapping[str, Any] | None) -> dict[str, str]:
    """The storage options every client of the lake at ``root`` gets: normalised, and on S3 with
    ``RETRY_DEFAULTS`` under the config's own keys (a key the config sets wins). Other roots are left
    as they are: a local lake has nothing to retry, and other stores keep object_store's defaults."""
    opts = normalise(options)
    if not is_s3(root):
        return opts
    full = {**RETRY_DEFAULTS, **TIMEOUT_DEFAULTS, **opts}
    pair = (full["timeout"], full["retry_timeout"])
    if pair not in _WARNED_TIMEOUTS and duration_seconds(pair[0], "timeout") >= duration_seconds(
        pair[1], "retry_timeout"
    ):
        _WARNED_TIMEOUTS.add(pair)
        log.warning(
            "lake.storage_options: timeout %s is not shorter than retry_timeout %s: a request that times out"
            " is not tried again",
            full["timeout"],
            full["retry_timeout"],
        )
    return full


_PUBLIC = (
    "REGION",
    "ENDPOINT",
    "ALLOW_HTTP",
    "VIRTUAL_HOSTED",
    "CONDITIONAL_PUT",
    "UNSAFE_RENAME",
    "TIMEOUT",
    "RETRIES",
    "BACKOFF",
)


def secret_values(options: Mapping[str, Any] | None) -> list[str]:
    """The option values an error message must not show: all but the plainly public settings
    (region, endpoint, flags), so that a key whose name we do not know is treated as a secret; values
    shorter than 4 characters are flags (``1``, ``on``, ``dev``) rather than credentials, and masking
    them wherever they stand as a word (queuelake.redaction) would hide numbers and words of every
    message for nothing."""
    items = normalise(options).items()
    return [v for k, v in items if len(v) >= 4 and not any(p in k.upper() for p in _PUBLIC)]


def job_secrets(connection: str | None, options: Mapping[str, Any] | None) -> list[str]:
    """What an error a job reports must not show: the queue database's connection string (the
    environment's and the config's) and the lake's credentials (``secret_values``)."""
    found = [os.environ.get("QUEUELAKE_CONNECTION") or "", connection or "", *secret_values(options)]
    return [s for s in found if s]


def register(root: str, options: Mapping[str, Any] | None) -> None:
    """Remember the storage options of a lake root (an engine's, ``lake_options``); later registrations
    replace earlier."""
    with _GUARD:
        _ROOTS[root.rstrip("/")] = lake_options(root, options)


def options_for(uri: str) -> dict[str, str]:
    """The storage options of the registered root ``uri`` is under (longest match), else {}."""
    with _GUARD:
        roots = sorted(_ROOTS, key=len, reverse=True)
        for root in roots:
            if uri == root or uri.startswith(root + "/"):
                return dict(_ROOTS[root])
    return {}


def registered(uri: str) -> tuple[str, dict[str, str]] | None:
    """(root, storage options) of the registered root ``uri`` is under, to register the same in
    another process (a Spark executor's Python worker, which never opened the lake)."""
    with _GUARD:
        for root in sorted(_ROOTS, key=len, reverse=True):
            if uri == root or uri.startswith(root + "/"):
                return root, dict(_ROOTS[root])
    return None


def is_s3(uri: str) -> bool:
    return urlparse(uri).scheme in ("s3", "s3a")


def filesystem(uri: str, options: Mapping[str, str] | None = None):
    """(pyarrow FileSystem, path inside it) for a local path or URI, with the lake's storage options
    (``options``, else those registered for the URI's root)."""
    from pyarrow import fs as pafs

    opts = normalise(options) if options is not None else options_for(uri)
    if not is_s3(uri):
        return pafs.FileSystem.from_uri(uri)  # a local absolute path, file://, or another scheme
    parsed = urlparse(uri)
    kwargs: dict[str, Any] = {}
    if opts.get("AWS_ACCESS_KEY_ID"):
        kwargs["access_key"] = opts["AWS_ACCESS_KEY_ID"]
        kwargs["secret_key"] = opts.get("AWS_SECRET_ACCESS_KEY", "")
        token = opts.get("AWS_SESSION_TOKEN") or opts.get("AWS_TOKEN")
        if token:
            kwargs["session_token"] = token
    region = opts.get("AWS_REGION") or opts.get("AWS_DEFAULT_REGION")
    if region:
        kwargs["region"] = region
    endpoint = opts.get("AWS_ENDPOINT_URL") or opts.get("AWS_ENDPOINT")
    if endpoint:
        target = urlparse(endpoint)
        kwargs["endpoint_override"] = target.netloc or target.path
        kwargs["scheme"] = target.scheme or "https"
    # Delayed open: a file smaller than one multipart part (most staged batches) is one PutObject, not
    # create/upload/complete-multipart (3 requests; moto's server also fails the complete step).
    for key, argument in (("timeout", "request_timeout"), ("connect_timeout", "connect_timeout")):
        if opts.get(key):
            kwargs[argument] = duration_seconds(opts[key], key)
    fs = pafs.S3FileSystem(allow_delayed_open=True, retry_strategy=retry_strategy(opts), **kwargs)
    return fs, f"{parsed.netloc}{parsed.path}".rstrip("/")


def _retries(opts: Mapping[str, str]) -> int:
    value = opts.get("max_retries", RETRY_DEFAULTS["max_retries"])
    try:
        retries = int(value)
    except ValueError:
        raise LakeError(f"lake.storage_options max_retries must be a whole number, not {value!r}") from None
    if retries < 0:
        raise LakeError(f"lake.storage_options max_retries must be 0 or more, not {retries}")
    return retries


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(value: str, key: str) -> float:
    """A duration as object_store and Hadoop write it (``120s``, ``500ms``, ``2m``; a bare number is
    seconds), in seconds for pyarrow; anything else is refused naming the key."""
    match = _DURATION.match(str(value))
    if not match:
        raise LakeError(f"lake.storage_options {key} must be a duration such as 120s or 500ms, not {value!r}")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]


def retry_strategy(opts: Mapping[str, str]) -> Any:
    """pyarrow's S3 retries: ``max_retries`` retries (``RETRY_DEFAULTS`` when not set) with the AWS
    SDK's default strategy, which waits 0, 50 ms, 100 ms, ... doubling (10 retries: 25.6 s in all, the
    last wait 12.8 s; pyarrow offers no cap). Not ``AwsStandardS3RetryStrategy``: its retry quota (the
    SDK's 500 tokens, 5 a retry) is refilled by successful requests only through a hook pyarrow does not
    call, so a file system that lives through a long drain stops retrying for good after ~100 retries
    (tried with pyarrow 26: 140 of 400 HEADs failed at 30% 503s, none with this strategy)."""
    from pyarrow import fs as pafs

    return pafs.AwsDefaultS3RetryStrategy(max_attempts=_retries(opts))


# The AWS SDK for C++ (pyarrow's S3 client) reads a ranged GET into a buffer the size of the range. A
# throttled read whose 503 SlowDown body is longer than the range (the XML into an 81-byte column chunk)
# turns that buffer bad: the SDK reports INTERNAL_FAILURE "Failed to flush response stream", which it
# marks not retryable, so ``retry_strategy`` never sees it. A CI run's ``maintain`` behind a throttling
# store failed so, reading the journal's small column chunks for the id index.
TRANSIENT_READ = "Failed to flush response stream"
READ_RETRIES = 10  # as RETRY_DEFAULTS' max_retries: waits of 0.3 s doubling, at most 5 s (~34 s in all)


def read_retrying(read: Callable[[], T], what: str) -> T:
    """``read()`` (a whole read of lake files through pyarrow: idempotent), again after a wait when the
    S3 client failed it with the transient error its own retries skip (``TRANSIENT_READ``)."""
    waits = _Waits(what)
    while True:
        try:
            return interruptible(read)  # a stop signal is taken while the read waits on the store
        except Exception as exc:
            if not _retried_kind(exc):
                raise
            waits.after(exc)


def delta_table(table_uri: str, version: int | None = None, storage_options: Mapping[str, Any] | None = None) -> Any:
    """deltalake's ``DeltaTable`` of ``table_uri`` (at ``version``), its log read again after a jittered
    wait when the store throttled past deltalake's own retries (``read_retrying``). Why: deltalake's
    retries wait 0.1 s doubling with no jitter, and gave up behind bursts of 3.5 s in every 6 s (a review);
    every load of a table's log goes through here. A missing table raises deltalake's own error."""
    from deltalake import DeltaTable

    from queuelake.lake.waiting import said_while_waiting

    options = dict(storage_options) if storage_options else None
    loads, key = _LOADS, (table_uri.rstrip("/"), version)
    if loads is not None and key in loads:
        return loads[key]
    with said_while_waiting(f"reading the Delta log of {table_uri}"):
        dt = read_retrying(lambda: DeltaTable(table_uri, version=version, storage_options=options), table_uri)
    if loads is not None:  # the newest version, asked for again by its number, is this load too
        loads[key] = loads[(key[0], dt.version())] = dt
    return dt


# (table URI, version or None for the newest) -> its DeltaTable, while ``loads_reused`` holds; else None
_LOADS: dict[tuple[str, int | None], Any] | None = None


@contextlib.contextmanager
def loads_reused() -> Iterator[None]:
    """Each table's log read once per version while it holds, and "the newest version" fixed at the
    first read: for a command that writes no lake table (``Command.reads_only``). Why: such a command
    asked for the same table 3 to 10 times (``tables``: its version, its files, its engine; ``find``: the
    journal's version, then the journal at that version, twice), and deltalake reads the log anew each
    time, every commit since the checkpoint twice and the checkpoint in 11 ranged reads. On an S3 lake
    that throttles, a week old, ``tables`` made 450 requests and took 36 s, ``find`` 287 and 18 s (a
    review); a read-only command also sees one snapshot of each table throughout. A writing command
    must not: the DeltaTable it loaded before its own write would be stale after it."""
    global _LOADS
    before, _LOADS = _LOADS, {}
    try:
        yield
    finally:
        _LOADS = before


def batches_retrying(open_batches: Callable[[], Iterator[T]], what: str) -> Iterator[T]:
    """The items of ``open_batches()`` (a stream of batches read from lake files, the same ones in the
    same order each time it is opened), reopened after a wait when the S3 client failed a read with
    ``TRANSIENT_READ``, resuming after the last item already yielded: a caller sees each batch once."""
    waits = _Waits(what)
    yielded = 0
    while True:
        try:
            batches = interruptible(lambda: iter(open_batches()))  # an iterator, whatever the stream is
            i = 0
            # each batch read as ``read_retrying`` reads: a stop signal is taken while it waits on the store
            while (item := interruptible(functools.partial(next, batches, _NO_MORE))) is not _NO_MORE:
                if i >= yielded:
                    yielded += 1
                    yield cast(T, item)
                i += 1
            return
        except Exception as exc:
            if not _retried_kind(exc):
                raise
            waits.after(exc)


def _retried_kind(exc: Exception) -> bool:
    """An I/O error of pyarrow's or deltalake's, or deltalake's own ``DeltaError`` (not an ``OSError``),
    which its log reads raise after their retries ("Failed to read delta log object", "Error getting
    list response body": a review's erase and maintain failed on them behind 6-10 s bursts)."""
    return isinstance(exc, OSError) or type(exc).__name__ == "DeltaError"


# A throttling or failing store's reply that the S3 client's own retries gave up on. Its retries wait
# 0, 50 ms, 100 ms, ... doubling with no jitter: behind bursts of 503s (2 s of every 6 s, as S3 throttles
# a prefix) a request begun at a burst's start had one attempt outside the bursts in its 25.6 s, and a
# random 503 there failed a ``maintain`` and a ``find`` (a review). Such a read is begun again, a few
# times, after a jittered wait: the new attempts fall elsewhere in the bursts' period.
# A connection reset in the middle of a reply's body (deltalake's "request or response body error",
# "Error getting list response body"; a review's proxy) is read again the same way: object_store does
# not retry a body's failure, and one such reset in a hundred requests failed most commands.
_THROTTLED = re.compile(
    r"(?<![\w/.-])(?:SLOW_?DOWN|HTTP status 50[0234]|Service[ _]?Unavailable|connection (reset|closed)"
    r"|response body|reading a body)(?![\w/.-])",  # words, not inside a name (a file, a table, a type)
    re.I,
)
THROTTLED_RETRIES = 3


class _Waits:
    """The waits between attempts at a read the S3 client failed with ``TRANSIENT_READ`` (0.3 s doubling,
    at most 5 s, ``READ_RETRIES`` of them) or with a throttling it gave up on (``_THROTTLED``: 1-3 s at
    random, ``THROTTLED_RETRIES`` of them); any other error, or one too many, is raised."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._left = READ_RETRIES
        self._throttled_left = THROTTLED_RETRIES
        self._wait = 0.3

    def after(self, exc: Exception) -> None:
        import random

        text = str(exc)
        if TRANSIENT_READ in text and self._left > 0:
            self._left -= 1
            reason, wait = TRANSIENT_READ, self._wait
            self._wait = min(self._wait * 2, 5.0)
        elif (said := throttling(exc)) is not None and self._throttled_left > 0:
            self._throttled_left -= 1
            reason, wait = said[0], random.uniform(1.0, 3.0)
        else:
            raise exc
        log.info("lake: reading %s met a throttled store (%s); again in %.1fs", self._what, reason, wait)
        time.sleep(wait)


def throttling(exc: Exception) -> re.Match[str] | None:
    """The store's throttling in ``exc``, looked for in the store's own words (after "AWS Error"), never
    in the path before them: a file of a type named ``...SlowDownRequested`` that was missing was read 4
    times over 5 s (a review). A missing file or a refused access is never throttling."""
    if isinstance(exc, (FileNotFoundError, PermissionError)):
        return None
    text = str(exc)
    _, aws, words = text.partition("AWS Error")
    return _THROTTLED.search(words if aws else text)


def path_in(uri: str) -> str:
    """The path of ``uri`` inside the filesystem ``filesystem(uri)`` returns (cheap: no client built)."""
    from pyarrow import fs as pafs

    if is_s3(uri):
        parsed = urlparse(uri)
        return f"{parsed.netloc}{parsed.path}".rstrip("/")
    return pafs.FileSystem.from_uri(uri)[1]


def s3a_conf(options: Mapping[str, str] | None) -> dict[str, str]:
    """Hadoop S3A settings for the storage options (empty when they say nothing about S3).

    ``fs.s3.impl`` maps ``s3://`` (deltalake's spelling, found in the file lists we hand Spark) to the
    S3A file system, so one root serves both engines. A custom endpoint (MinIO, a local S3) gets path
    style access; ``AWS_ALLOW_HTTP`` switches TLS off for it. The retry keys (``RETRY_DEFAULTS``) map
    to S3A's retries (``_S3A_RETRIES``).
    """
    opts = normalise(options)
    conf = {hadoop: opts[key] for key, hadoop in _S3A_KEYS.items() if opts.get(key)}
    if opts.get("AWS_ACCESS_KEY_ID"):
        temporary = "fs.s3a.session.token" in conf
        provider = "TemporaryAWSCredentialsProvider" if temporary else "SimpleAWSCredentialsProvider"
        conf["fs.s3a.aws.credentials.provider"] = f"org.apache.hadoop.fs.s3a.{provider}"
    region = opts.get("AWS_REGION") or opts.get("AWS_DEFAULT_REGION")
    if region:
        conf["fs.s3a.endpoint.region"] = region
    endpoint = opts.get("AWS_ENDPOINT_URL") or opts.get("AWS_ENDPOINT")
    if endpoint:
        conf["fs.s3a.endpoint"] = endpoint
        conf["fs.s3a.path.style.access"] = "true"
        if endpoint.startswith("http://") or opts.get("AWS_ALLOW_HTTP", "").lower() in _TRUE:
            conf["fs.s3a.connection.ssl.enabled"] = "false"
    conf.update(_s3a_retries(opts))
    for key, hadoop in _S3A_TIMEOUTS.items():
        if opts.get(key):
            duration_seconds(opts[key], key)  # a bad value fails here, not in the JVM
            conf[hadoop] = opts[key]
    if conf:
        conf["fs.s3.impl"] = "org.apache.hadoop.fs.s3a.S3AFileSystem"
    return conf


# S3A retries twice over: the AWS SDK inside it retries each request (``fs.s3a.attempts.maximum``),
# and S3A retries the operation, throttling (503 SlowDown) and other transient errors each with its own
# limit and exponential backoff from an interval. All from the object_store keys: ``max_retries`` for
# S3A's counts, ``backoff_config.init_backoff`` for its intervals (Hadoop reads "100ms", "2s" as
# object_store does). The SDK's count is at most Hadoop's default of 5: each S3A retry repeats the
# SDK's, and 10 x 10 attempts with backoff would hold a task for many minutes.
_SDK_ATTEMPTS = 5
_S3A_RETRIES = {
    "fs.s3a.attempts.maximum": "max_retries",
    "fs.s3a.retry.limit": "max_retries",
    "fs.s3a.retry.throttle.limit": "max_retries",
    "fs.s3a.retry.interval": "backoff_config.init_backoff",
    "fs.s3a.retry.throttle.interval": "backoff_config.init_backoff",
}


# the same timeouts in S3A (Hadoop reads "120s", "500ms" as object_store does)
_S3A_TIMEOUTS = {
    "timeout": "fs.s3a.connection.request.timeout",
    "connect_timeout": "fs.s3a.connection.establish.timeout",
}


def _s3a_retries(opts: Mapping[str, str]) -> dict[str, str]:
    if not any(key in opts for key in RETRY_DEFAULTS):
        return {}  # options without retry keys (not an S3 lake's, see lake_options): S3A's defaults
    full = {**RETRY_DEFAULTS, **opts}
    conf = {hadoop: full[key] for hadoop, key in _S3A_RETRIES.items()}
    conf["fs.s3a.attempts.maximum"] = str(min(_retries(full), _SDK_ATTEMPTS))  # a bad value fails here too
    return conf


def configure_spark(spark: Any, options: Mapping[str, str] | None) -> None:
    """Put the S3A settings on a session: its Hadoop configuration (classic Spark) and its SQL conf
    (which Spark merges into the Hadoop configuration of every file read and write, and which is all a
    Spark Connect session has). Spark redacts ``*.secret.key``/``*.access.key``/``*token`` values.
    A retry or timeout setting the session was given (``spark.hadoop.fs.s3a.retry.limit`` in ``spark.conf``) is
    the user's and stays: ours are defaults."""
    conf = s3a_conf(options)
    if not conf:
        return
    for key in (*_S3A_RETRIES, *_S3A_TIMEOUTS.values()):
        try:
            if spark.conf.get(f"spark.hadoop.{key}", None) is not None:
                conf.pop(key, None)
        except Exception:  # a session that cannot say: our defaults apply
            pass
    hadoop = None
    try:
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    except Exception:  # Spark Connect: no JVM handle; the SQL conf below still applies
        hadoop = None
    for key, value in conf.items():
        if hadoop is not None:
            hadoop.set(key, value)
        try:
            spark.conf.set(key, value)
        except Exception:  # a static setting on a running session; the Hadoop configuration has it
            pass


def list_tables(root: str, options: Mapping[str, str] | None = None) -> list[str]:
    """Names of the Delta tables directly under ``root`` (folders with a ``_delta_log``), sorted; [] when
    the root does not exist yet. Works on any storage pyarrow reaches (on S3 a "folder" is a prefix)."""
    from pyarrow import fs as pafs

    fs, base = filesystem(root, options)
    try:
        top = pafs.FileSelector(base, allow_not_found=True, recursive=False)
        children = read_retrying(lambda: fs.get_file_info(top), f"lake root {root}")
        names = sorted(info.base_name for info in children if info.type == pafs.FileType.Directory)
        paths = [f"{base}/{name}/_delta_log" for name in names]
        logs = read_retrying(lambda: fs.get_file_info(paths), f"lake root {root}") if names else []
    except FileNotFoundError:
        return []
    except OSError as exc:  # object storage unreachable or refusing: say so in one line
        raise storage_error(exc, f"lake root {root}") from None
    return [name for name, log in zip(names, logs) if log.type == pafs.FileType.Directory]


# a commit or a checkpoint (classic, multi-part, or v2 ``<version>.checkpoint.<uuid>.json``) in ``_delta_log``
_LOG_ENTRY = re.compile(r"^\d{20}\.(json|checkpoint\..*(parquet|json)|checkpoint\.parquet)$")


def is_delta_table(table_uri: str, options: Mapping[str, str] | None = None) -> bool:
    """Whether a Delta log is under ``table_uri``: its first commit or its last checkpoint's pointer (two
    HEADs), else a commit or checkpoint in a listing of the log (a table whose first commits were cleaned
    up). Read again, as every read of the log is, when the store throttled past its client's retries.
    Why not deltalake's ``DeltaTable.is_deltatable``: it holds the GIL for its whole request, the store's
    retries included (``retry_timeout``: 60 s), so every other thread of the command stood still meanwhile
    (a drain's workers, the pings that keep its locks): behind a throttling proxy that runs in the same
    process it hung for 60 s and failed "operation timed out"."""
    from pyarrow import fs as pafs

    if "://" in table_uri and not is_s3(table_uri) and urlparse(table_uri).scheme != "file":
        # Azure, GCS: their credentials are deltalake's storage options, which pyarrow's file systems
        # here are not given (a review): deltalake asks, as before
        from deltalake import DeltaTable

        opts = dict(normalise(options)) if options is not None else options_for(table_uri)
        return read_retrying(lambda: DeltaTable.is_deltatable(table_uri, opts or None), table_uri)
    fs, base = filesystem(table_uri, options)
    log_dir = f"{base}/_delta_log"

    def look() -> bool:
        try:
            pointers = fs.get_file_info([f"{log_dir}/_last_checkpoint", f"{log_dir}/{0:020d}.json"])
        except OSError:  # a refused HEAD has no body to say why (a bad key): the listing's error will
            pointers = []
        if any(info.type == pafs.FileType.File for info in pointers):
            return True
        entries = fs.get_file_info(pafs.FileSelector(log_dir, allow_not_found=True))
        return any(info.type == pafs.FileType.File and _LOG_ENTRY.match(info.base_name) for info in entries)

    return read_retrying(look, table_uri)


@dataclass(frozen=True)
class StoredFile:
    """A file under a table, outside its log: its path below the table's root, when it was last written
    (None where the store does not say)."""

    path: str
    modified: datetime | None

    @property
    def is_hidden(self) -> bool:
        """A name starting with a dot: a local store's checksum (``.part-….parquet.crc``) goes with its file."""
        return self.path.rsplit("/", 1)[-1].startswith(".")

    @property
    def is_data(self) -> bool:
        """A Parquet file that is not hidden."""
        return self.path.endswith(".parquet") and not self.is_hidden


def stored_files(table_uri: str, options: Mapping[str, str] | None = None) -> list[StoredFile]:
    """Every file stored under a table but its log's: the live files, those removed but not yet vacuumed
    and orphans alike. One listing of the table (read again when the store throttles it)."""
    from pyarrow import fs as pafs

    fs, base = filesystem(table_uri, options)
    try:
        infos = read_retrying(
            lambda: fs.get_file_info(pafs.FileSelector(base, allow_not_found=True, recursive=True)), table_uri
        )
    except OSError as exc:
        raise storage_error(exc, f"table {table_uri}") from None
    prefix = base.rstrip("/") + "/"
    return [
        StoredFile(info.path[len(prefix) :] if info.path.startswith(prefix) else info.path, _utc(info.mtime))
        for info in infos
        if info.type == pafs.FileType.File and "/_delta_log/" not in f"/{info.path}"
    ]


def delete_stored(table_uri: str, paths: list[str], options: Mapping[str, str] | None = None) -> None:
    """Delete files under a table, each named by its path below the table's root (as ``stored_files``
    gives it). A file already gone is no error (a purge run again after a stop); a delete the store
    throttled is tried again as a read is (a delete is idempotent)."""
    fs, base = filesystem(table_uri, options)
    prefix = base.rstrip("/") + "/"

    def delete(path: str) -> None:
        try:
            fs.delete_file(prefix + path)
        except FileNotFoundError:
            pass

    for path in paths:
        try:
            read_retrying(functools.partial(delete, path), f"{table_uri}/{path}")
        except OSError as exc:
            raise storage_error(exc, f"table {table_uri}: deleting {path}") from None


def _utc(moment: datetime | None) -> datetime | None:
    """A store's time as an aware UTC datetime (a store that gives a naive one gives UTC)."""
    return moment.replace(tzinfo=timezone.utc) if moment is not None and moment.tzinfo is None else moment


def data_file_count(table_uri: str, options: Mapping[str, str] | None = None) -> int:
    """The Parquet files stored under a table (its log's and files removed but not yet vacuumed alike):
    what a vacuum deleted is the count before less the count after (delta-spark's vacuum returns none)."""
    return sum(1 for stored in stored_files(table_uri, options) if stored.is_data)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_REFUSED = re.compile(
    r"\b(403|401)\b|access_?denied|invalid_?access_?key_?id|signature_?does_?not_?match|credential", re.I
)
_S3_ERROR = re.compile(r"<Code>([^<]*)</Code>\s*<Message>([^<]*)</Message>")


def storage_error(exc: BaseException, where: str) -> LakeError:
    """A LakeError that says in one line what the storage refused, from deltalake's multi-line,
    colour-coded OSError (the S3 error code and message when there is one), with a hint at the
    config key. Secrets are redacted by the CLI; the server's reply carries none but the key id."""
    text = _ANSI.sub("", str(exc))
    match = _S3_ERROR.search(text)
    if match:
        reason = f"{match.group(1)}: {match.group(2)}"
    else:
        lines = [line.strip(" ↳\t") for line in text.splitlines() if line.strip(" ↳\t")]
        reason = "; ".join(lines[-2:]) if lines else type(exc).__name__
    hint = ""
    if re.search(
        r"\b(403|401)\b|access_?denied|invalid_?access_?key_?id|signature_?does_?not_?match|credential", text, re.I
    ):
        hint = " (check the credentials in lake.storage_options)"
    elif re.search(r"IMDS|metadata|No credentials|NoCredentials", text, re.I):
        hint = " (no credentials found: set them in lake.storage_options)"
    elif _THROTTLED.search(text):
        # what is left after every retry: the store throttled or dropped connections for longer
        hint = (
            " (the store throttled or dropped connections past the retries; nothing is left half-done: run the"
            " command again, or raise max_retries in lake.storage_options)"
        )
    return LakeError(f"{where}: object storage error{hint}: {reason}")
