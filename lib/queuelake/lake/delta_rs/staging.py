"""The drain's staged writes: a batch's files written into the journal's folder before the queue's
database transaction commits, and committed to the Delta log after it, maybe by another process.

Why a module of its own: this is the claim protocol's side of the lake (design section on the drain:
stage, record the claim with the staged files, commit the DB, then commit exactly those files under
the application transaction), with its own caches (the table's schema and partitioning read once per
run; the snapshot kept between commits so that a commit does not re-read the whole log). Only the
Rust engine stages: deltalake can commit files written earlier, delta-spark has no Python API for it
(``jvm.DeltaSparkEngine`` refuses, ``engines.journal_engine`` gives the journal to delta-rs).
``DeltaRsEngine`` (``engine.py``) inherits these methods; everything else it writes goes through
``append``/``append_dataframe`` there.
"""

from __future__ import annotations

import tempfile
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa

from queuelake.errors import LakeError
from queuelake.lake import catalogue
from queuelake.lake.arrow_types import conform
from queuelake.lake.common import EngineBase
from queuelake.lake.delta_rs.append_log import AppendLog
from queuelake.lake.delta_rs.commits import commit_group
from queuelake.lake.delta_rs.log_files import named_files, tombstone_seconds
from queuelake.lake.delta_rs.log_head import LogHead
from queuelake.lake.files import FileSink, StagedFiles, ages_seconds, commit_files, delete_files, missing_files
from queuelake.report import log

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession


T = TypeVar("T")


class StagedWrites(EngineBase):
    """``stage``, ``check_stageable``, ``discard_staged`` and ``commit_staged`` of ``LakeEngine`` over
    deltalake (see the module docstring)."""

    def __init__(
        self, root: str, spark: SparkSession | None = None, storage_options: dict[str, str] | None = None
    ) -> None:
        super().__init__(root, spark, storage_options)
        self._stage_targets: dict[str, tuple[pa.Schema, list[str]]] = {}
        # per table: the snapshot staged commits start from, kept between them (``_newest``)
        self._snapshots: dict[str, DeltaTable] = {}
        self._snapshot_locks: dict[str, threading.Lock] = {}
        # per table: its log followed since the first staged commit or version asked (``append_log``)
        self._followed: dict[str, AppendLog] = {}
        # the last table loaded for another reason (``create_table``'s check) and its load, which its
        # followed log starts from instead of loading the table again (``keep_loaded``); one at most
        self._loaded: tuple[str, DeltaTable | LogHead] | None = None

    def stage(self, table: str, data: pa.Table) -> StagedFiles:
        """Write ``data`` as Parquet files into the table's folder without committing them: invisible
        to readers until ``commit_staged``; orphans for vacuum if nobody ever commits them."""
        return self._stage_into(table, data, self.path(table), self.storage_options)

    def check_stageable(self, table: str, data: pa.Table) -> None:
        with tempfile.TemporaryDirectory(prefix="queuelake-probe-") as scratch:
            self._stage_into(table, data, scratch, None)

    def _stage_into(
        self, table: str, data: pa.Table, folder: str, storage_options: dict[str, str] | None
    ) -> StagedFiles:
        target, partition_by = self._stage_target(table)
        sink = FileSink(
            folder,
            target,
            partition_by,
            storage_options=storage_options,
            dictionary_columns=catalogue.dictionary_columns(table),
            statistics_columns=catalogue.statistics_columns(table),
            uncompressed_columns=catalogue.uncompressed_columns(table),
        )
        try:
            sink.write(conform(data, target, table))
            files = sink.close()
        except BaseException:
            sink.abort()
            raise
        return StagedFiles(files, uuid.uuid4().hex)

    def _stage_target(self, table: str) -> tuple[pa.Schema, list[str]]:
        """The table's schema and partitioning, read once per engine (a drain run) from the followed
        log's load: staging every batch must not replay the log, and the workers of a run staging at
        once must not each load the table. A column added meanwhile reads as null in these files."""
        with self._locks_guard:
            cached = self._stage_targets.get(table)
        if cached is None:
            with self._snapshot_lock(table):
                followed = self._followed_log(table)
            cached = followed.target()
            with self._locks_guard:
                self._stage_targets[table] = cached
        return cached

    def discard_staged(self, table: str, staged: StagedFiles) -> None:
        """Best effort: what stays behind is an orphan that vacuum removes."""
        delete_files(self.path(table), staged.files, self.storage_options)

    def commit_staged(self, table: str, staged: StagedFiles, app_id: str, version: int, verify: bool = False) -> bool:
        """Commit staged files in one Delta commit carrying (app_id, version). False when that version
        is already committed: the files are then left alone (they may be the ones it added).
        ``verify`` first checks that every file is still there (files staged by another process, long
        ago): committing a missing file would corrupt the table.

        A drain's batches (``verify`` False) start from the snapshot kept since the previous commit
        (``_newest``); claims being resolved (``verify`` True) load the table afresh. If the kept
        snapshot fails in any way but the table's own refusals, the commit is tried again from fresh
        loads: a commit the first try made is then found by its app version."""
        with self._lock(table, app_id), self._snapshot_lock(table):
            if verify:
                gone = missing_files(self.path(table), staged.files, self.storage_options)
                if gone:
                    raise LakeError(
                        f"lake table {table}: staged files of ({app_id}, {version}) are missing "
                        f"({', '.join(gone[:3])}); they were removed before being committed (a vacuum "
                        "with a retention shorter than the claim's age?)"
                    )

            def commit(load: Callable[[], DeltaTable] | None) -> bool:
                return commit_files(
                    self.path(table),
                    table,
                    staged.files,
                    app_id,
                    version,
                    staged.write_id,
                    self.name,
                    delete_if_committed=False,
                    storage_options=self.storage_options,
                    load=load,
                )

            if verify:
                self._snapshots.pop(table, None)
                landed = commit(None)
            else:
                landed = self._from_kept_snapshot(table, commit)
        if not landed:
            self.check_landed(table, [(staged, app_id, version)])
        return landed

    def commit_staged_group(self, table: str, batches: list[tuple[StagedFiles, str, int]]) -> int:
        """One commit for many claimed batches. Written as the log's next commit file by the followed
        log (``append_log``: no cost per file the table holds) where it can; else by deltalake
        (``commits.commit_group``) from the kept snapshot as ``commit_staged`` does, and from fresh
        loads if that snapshot fails in any way. A followed log that fails in any way but the table's
        own refusals is dropped, and deltalake's fresh load finds what it may have committed."""
        write_id = uuid.uuid4().hex
        with self._snapshot_lock(table):
            carried = self._commit_group(table, batches, write_id)
        if carried < len(batches):
            self.check_landed(table, batches)
        return carried

    def _commit_group(self, table: str, batches: list[tuple[StagedFiles, str, int]], write_id: str) -> int:
        """``commit_staged_group``'s commit; the caller holds ``_snapshot_lock(table)``."""
        followed = self._followed_log(table)
        if followed.appendable([f for staged, _, _ in batches for f in staged.files]):
            try:
                carried = followed.append_group([(s.files, a, v) for s, a, v in batches], write_id)
                if carried is not None:
                    return carried
            except LakeError:
                raise
            except Exception as exc:  # noqa: BLE001 - the followed log is suspect: deltalake decides
                self._followed.pop(table, None)
                log.debug("lake table %s: the followed log's commit failed (%s)", table, type(exc).__name__)
        group = [([f.add_action() for f in staged.files], app_id, version) for staged, app_id, version in batches]

        def commit(load: Callable[[], DeltaTable] | None) -> int:
            return commit_group(
                self.path(table),
                table,
                group,
                write_id,
                self.name,
                storage_options=self.storage_options,
                load=load,
            )

        return self._from_kept_snapshot(table, commit)

    def check_landed(self, table: str, batches: list[tuple[StagedFiles, str, int]]) -> None:
        """Raise LakeError for a batch taken as committed (its app id holds its version) whose files
        the table's log never named while they are still in storage: another writer committed that
        version with files of its own, and this batch's rows are in files no reader sees. Why: the
        committer and a claim's resolution leave such a batch out and clear its claim, which is right
        only when the commit before added its files (``log_files``: the rare path only). Files neither
        named nor stored were vacuumed after their tombstones expired: nothing to tell then."""
        named = named_files(self.path(table), self.storage_options)
        if named is None:
            log.warning(
                "lake table %s: could not read which files its log names; batches taken as committed are unchecked",
                table,
            )
            return
        for staged, app_id, version in batches:
            unnamed = [f for f in staged.files if f.path not in named]
            if not unnamed:
                continue
            gone = set(missing_files(self.path(table), unnamed, self.storage_options))
            stored = [f.path for f in unnamed if f.path not in gone]
            if stored and self._tombstones_may_have_expired(table, stored):
                log.warning(
                    "lake table %s: (%s, %s) is in the log, but its batch's %d file(s) are older than the log keeps"
                    " tombstones: taken as compacted since (vacuum removes them)",
                    table,
                    app_id,
                    version,
                    len(stored),
                )
                continue
            if stored:
                raise LakeError(
                    f"lake table {table}: ({app_id}, {version}) is in the log, but not its batch's "
                    f"{len(stored)} file(s) ({', '.join(stored[:3])}): another writer committed that version; "
                    f"the batch's {staged.rows} row(s) are in those files, and its claim is kept"
                )

    def _tombstones_may_have_expired(self, table: str, stored: list[str]) -> bool:
        """Whether every one of a batch's files is older than the log keeps a removed file's tombstone:
        a batch that landed, was compacted and whose tombstones a later checkpoint dropped is named by
        no log entry, yet stays in storage until a vacuum; it failed its queue until then (a review)."""
        keep = tombstone_seconds(self._require(table).metadata().configuration)
        ages = ages_seconds(self.path(table), stored, self.storage_options)
        return all(age is not None and age > keep for age in ages.values())

    def staged_schema(self, table: str) -> pa.Schema:
        """``schema`` from the followed log: the load the run's staged commits and versions use, not a
        load of its own (57 ms with 10,000 files, bench/drain.py --journal-files)."""
        with self._snapshot_lock(table):
            followed = self._followed_log(table)
        return followed.target()[0]

    def finish_staged(self, table: str) -> None:
        """The run's staged commits are over: the followed log checkpoints the newest version if the
        table's interval has passed since the last checkpoint (``AppendLog.finish``). Never fails the
        run that calls it: its commits are in the log, and a checkpoint only makes loads faster."""
        followed = self._followed.get(table)
        if followed is None:
            return
        try:
            followed.finish()
        except Exception as exc:  # noqa: BLE001 - an optimisation; the next run's end tries again
            log.warning("lake table %s: no checkpoint at the run's end (%s)", table, type(exc).__name__)

    def staged_version(self, table: str, app_id: str) -> int | None:
        """``last_version`` from the followed log: only the commits written since the previous question
        are read, not the whole table (``append_log``). As current as ``last_version``."""
        try:
            # not behind the table's commit in progress (it holds the snapshot lock while it writes)
            followed = self._followed.get(table)
            if followed is None:
                with self._snapshot_lock(table):
                    if table not in self._followed and not self.exists(table):
                        return None
                    followed = self._followed_log(table)
            return followed.app_version(app_id)
        except LakeError:
            raise
        except Exception as exc:  # noqa: BLE001 - the followed log is a cache: ask deltalake
            with self._snapshot_lock(table):
                self._followed.pop(table, None)
            log.debug("lake table %s: the followed log failed (%s); loading afresh", table, type(exc).__name__)
            return self.last_version(table, app_id)

    def keep_loaded(self, table: str, dt: DeltaTable | LogHead) -> None:
        """A load of the table just made (``create_table``'s check), for the followed log to start
        from: a drain's first step checks the journal, and loading it again for the followed log cost
        as much (at 10,000 files, 40-45 ms on a quiet machine, 53-88 ms in a drain). The followed log
        reads whatever was committed since."""
        with self._locks_guard:
            self._loaded = None if table in self._followed else (table, dt)

    def _followed_log(self, table: str) -> AppendLog:
        """The table's followed log, loaded on first use (or from ``keep_loaded``'s load); the caller
        holds ``_snapshot_lock(table)``."""
        followed = self._followed.get(table)
        if followed is None:
            with self._locks_guard:
                loaded = self._loaded[1] if self._loaded is not None and self._loaded[0] == table else None
                if loaded is not None:
                    self._loaded = None
            followed = AppendLog(self.path(table), table, self.name, self._options(), loaded=loaded)
            self._followed[table] = followed
        return followed

    def _from_kept_snapshot(self, table: str, commit: Callable[[Callable[[], DeltaTable] | None], T]) -> T:
        """``commit(load)`` from the snapshot kept since the previous commit; if that fails in any
        way but the table's own refusals (``LakeError``), again from fresh loads: a commit the first
        try made is then found by its app versions. The caller holds ``_snapshot_lock(table)``."""
        try:
            return commit(lambda: self._newest(table))
        except LakeError:
            raise
        except Exception as exc:  # noqa: BLE001 - the kept snapshot is suspect: start afresh
            self._snapshots.pop(table, None)
            log.debug("lake table %s: commit from the kept snapshot failed (%s)", table, type(exc).__name__)
            return commit(None)

    def _snapshot_lock(self, table: str) -> threading.Lock:
        with self._locks_guard:
            return self._snapshot_locks.setdefault(table, threading.Lock())

    def _newest(self, table: str) -> DeltaTable:
        """The table at its newest version, for a commit: the snapshot of the previous commit brought
        up to date with only the log entries written since (``update_incremental``), else a fresh load.

        Why: a fresh load reads the last checkpoint, which lists every file of the table, on every
        commit; a drain commits once per batch, so each commit cost more as the journal grew (11.6 ms
        of CPU at first, 22.8 ms after 1,000 files, ``bench/commits.py``). The caller holds
        ``_snapshot_lock(table)``. Any failure to update (log entries cleaned up meanwhile, a table
        replaced) falls back to a fresh load: the snapshot is a cache, never the source of truth."""
        cached = self._snapshots.pop(table, None)
        if cached is not None:
            try:
                cached.update_incremental()
            except Exception as exc:  # noqa: BLE001 - any failure: load afresh
                # the type only: storage errors may quote a URL, and this is a cache miss, not a failure
                log.debug("lake table %s: snapshot not updated (%s); loading afresh", table, type(exc).__name__)
                cached = None
        dt = cached if cached is not None else self._require(table)
        self._snapshots[table] = dt
        return dt
