"""The exactly-once commit: one Delta commit per (app_id, version), whoever else is committing.

Both of the Rust engine's write paths end here: ``append`` (``write_deltalake`` of driver data) and
``files.commit_files`` (files staged by a drain or written by Spark executors, committed from the
driver or from the data source's Python worker). Why a module of its own: the loop (load, refuse
another engine's table, return False when the app id is already at ``version``, retry a conflict
from a fresh load) is the lake's exactly-once guarantee, and it is the same whatever wrote the files.

Runs in Spark Python workers too (the data source's ``commit()``): keep imports light.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any

from queuelake.errors import LakeError
from queuelake.lake.storage import delta_table

WRITE_ID_KEY = "queuelake.writeId"  # commitInfo key: lets the driver tell its own commit from others
# a commit's failure after which it may have landed all the same: the store took the PUT and the reply
# was lost (a reset, a timeout), or it throttled (what deltalake gave up on)
_OUTCOME_UNKNOWN = re.compile(
    r"connection (reset|closed|error)|broken pipe|os error (104|32)|error sending request|timed? ?out"
    r"|SLOW_?DOWN|HTTP status 50[0234]|Service[ _]?Unavailable|response body|reading a body",
    re.I,
)


def outcome_unknown(exc: BaseException) -> bool:
    """Whether a commit that raised ``exc`` may have landed (the store's connection, not a refusal)."""
    return isinstance(exc, Exception) and bool(_OUTCOME_UNKNOWN.search(str(exc)))


def carries(dt: Any, since: int, write_id: str) -> bool:
    """Whether a commit after version ``since`` of ``dt`` carries ``write_id`` (``common.landed``'s test,
    here for the Spark workers, which import this module alone)."""
    newer = dt.version() - since
    return newer > 0 and any(commit.get(WRITE_ID_KEY) == write_id for commit in dt.history(limit=newer))


KILL_ENV = "QUEUELAKE_TEST_KILL_BEFORE_COMMIT"  # test hook: SIGKILL right before the Delta commit


def kill_before_commit(pids: Iterable[int] = ()) -> None:
    """Test hook: with ``QUEUELAKE_TEST_KILL_BEFORE_COMMIT`` set, SIGKILL the given processes (the Spark
    driver, when the commit runs in a Python worker) and then this one, right before committing."""
    pids = list(pids)
    if not os.environ.get(KILL_ENV) and not pids:
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def exactly_once(
    table_uri: str,
    table: str,
    app_id: str,
    version: int,
    engine: str,
    write: Callable[[Any, int], None],
    *,
    storage_options: dict[str, str] | None = None,
    on_committed: Callable[[], None] | None = None,
    attempts: int = 20,
    load: Callable[[], Any] | None = None,
    write_id: str | None = None,
) -> bool:
    """The exactly-once write loop both paths of the Rust engine share (``append`` of driver data and
    ``commit_files`` of staged or executor-written files).

    A commit that failed on the store's connection (``outcome_unknown``) may have landed: the next
    attempt's load tells. One that carries ``write_id`` (the commit info every attempt of ``write``
    writes) is this write's own, landed, and True is returned; ``on_committed`` is not called then (it
    deletes the files, which that commit names). Why: a reset reply to a commit's PUT failed the data
    source's commit, and Spark's abort then deleted the files of a commit that had landed: the table's
    log named a file that was gone, for good (a review, behind a proxy that resets after forwarding).

    Each attempt loads the table, refuses another engine's table, and returns False (after
    ``on_committed``) when app_id already committed ``version`` or later; otherwise it calls
    ``write(table, attempt)``, which must make one Delta commit carrying (app_id, version). A
    CommitFailedError means the log moved in a way deltalake would not resolve by itself (blind appends
    it retries; the same app id committed concurrently it does not): reload and re-check, backing off.
    ``load`` gives the table at its newest version (default: a fresh load each attempt).
    """
    from deltalake.exceptions import CommitFailedError

    from queuelake.lake.marks import check_writable, engine_of

    since: int | None = None  # the version the first attempt read: a landed commit of ours is after it
    for attempt in range(attempts):
        dt = load() if load is not None else delta_table(table_uri, None, storage_options)
        metadata = dt.metadata()
        check_writable(table, table_uri, engine_of(metadata.configuration, metadata.description), engine)
        committed = dt.transaction_version(app_id)
        if committed is not None and committed >= version:
            if write_id is not None and since is not None and carries(dt, since, write_id):
                return True  # this write's own commit, whose reply the store lost
            if on_committed is not None:
                on_committed()
            return False
        if since is None:
            since = dt.version()
        try:
            write(dt, attempt)
            return True
        except CommitFailedError:
            time.sleep(min(0.05 * 2**attempt, 2.0))
        except Exception as exc:
            if not outcome_unknown(exc) or attempt == attempts - 1:
                raise
            time.sleep(min(0.5 * 2**attempt, 5.0))  # then the log says whether it landed
    raise LakeError(f"lake table {table}: could not commit ({app_id}, {version}) after {attempts} attempts")


def commit_actions(
    table_uri: str,
    table: str,
    actions: list[Any],
    app_id: str,
    version: int,
    write_id: str,
    engine: str,
    *,
    kill_pids: Iterable[int] = (),
    attempts: int = 20,
    on_committed: Callable[[], None] | None = None,
    storage_options: dict[str, str] | None = None,
    load: Callable[[], Any] | None = None,
) -> bool:
    """Commit add ``actions`` (deltalake ``AddAction``s of files already written, ``files.commit_files``)
    in one Delta transaction carrying (app_id, version) and ``write_id`` in its commit info.

    Returns False (after ``on_committed``) when app_id already committed ``version`` or later.
    Conflicts are retried by ``exactly_once``; ``kill_pids``: the test hook (``kill_before_commit``).
    """
    from deltalake import CommitProperties, Transaction

    kill_pids = list(kill_pids)

    def write(dt: Any, attempt: int) -> None:
        if attempt == 0:
            kill_before_commit(kill_pids)
        dt.create_write_transaction(
            actions,
            "append",
            dt.schema(),
            partition_by=dt.metadata().partition_columns,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id, version)],
                custom_metadata={WRITE_ID_KEY: write_id},
            ),
        )

    return exactly_once(
        table_uri,
        table,
        app_id,
        version,
        engine,
        write,
        storage_options=storage_options,
        on_committed=on_committed,
        attempts=attempts,
        load=load,
        write_id=write_id,
    )


def commit_group(
    table_uri: str,
    table: str,
    batches: list[tuple[list[Any], str, int]],
    write_id: str,
    engine: str,
    *,
    attempts: int = 20,
    storage_options: dict[str, str] | None = None,
    load: Callable[[], Any] | None = None,
) -> int:
    """Commit many batches, each (add actions, app_id, version), in ONE Delta commit carrying every
    app id's highest version (a group commit: the drain's claimed batches of many workers and queues).

    Each attempt loads the table and leaves out the batches whose app id already committed their
    version (a retry after a commit that raised, a claim another run resolved); the rest commit
    together, or not at all. A batch may be left out only with every lower version of its app id
    committed or in the same group: the caller stops submitting an app id after a failed group.
    Returns how many batches this commit carried (0: all were committed already)."""
    from deltalake import CommitProperties, Transaction
    from deltalake.exceptions import CommitFailedError

    from queuelake.lake.marks import check_writable, engine_of

    for attempt in range(attempts):
        dt = load() if load is not None else delta_table(table_uri, None, storage_options)
        metadata = dt.metadata()
        check_writable(table, table_uri, engine_of(metadata.configuration, metadata.description), engine)
        todo = [(a, app_id, v) for a, app_id, v in batches if (dt.transaction_version(app_id) or 0) < v]
        if not todo:
            return 0
        versions: dict[str, int] = {}
        for _, app_id, v in todo:
            versions[app_id] = max(v, versions.get(app_id, 0))
        if attempt == 0:
            kill_before_commit()
        try:
            dt.create_write_transaction(
                [action for actions, _, _ in todo for action in actions],
                "append",
                dt.schema(),
                partition_by=metadata.partition_columns,
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(a, v) for a, v in versions.items()],
                    custom_metadata={WRITE_ID_KEY: write_id},
                ),
            )
            return len(todo)
        except CommitFailedError:
            time.sleep(min(0.05 * 2**attempt, 2.0))
    raise LakeError(
        f"lake table {table}: could not commit a group of {len(batches)} batch(es) after {attempts} attempts"
    )
